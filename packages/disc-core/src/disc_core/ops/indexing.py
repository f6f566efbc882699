"""Indexing by tensors of indices: ``gather``, ``gather_elements`` and their transposes
``scatter_add`` and ``scatter_elements_add``.

Index operands are i32 or i64. Every index is CLAMPED into ``[0, size - 1]`` of the axis
it indexes (XLA's gather rule, applied to the scatters too, so a scatter never drops an
update): negative indices are NOT wrapped Python-style, ``-1`` reads/writes element 0.
Framework bridges normalize negative indices (``i + size`` where ``i < 0``) before these
ops. Indexing an axis of size 0 is an InterpretError unless nothing is read or written.

Scatters accumulate duplicates (``np.add.at``); f16/bf16 accumulate in float32, f32 in
float64 (rounded once at the end), integers wrap in their own type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..dtypes import ALL_DTYPES, NUMERIC_DTYPES, DType, dtype_of
from ..index_map import DATA, DimMap, OperandMap
from ..ir import Op, TensorType
from ..opdef import INT, Attr, Ctx, Env, Fusion, InterpretError, KernelContext, OpDef
from ..shape_facts import Eq, Fact
from ..symbolic import Expr
from .linalg import acc_dtype

INDEX_DTYPES = (DType.I32, DType.I64)


def _prod(xs: Iterable[int]) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def _clamped(idx: np.ndarray, size: int) -> np.ndarray:
    return np.clip(idx.astype(np.int64), 0, size - 1)


# -- gather / scatter_add: the shared geometry ------------------------------------------

def _check_gather_attrs(ctx: Ctx, attrs: Mapping[str, Any]) -> None:
    operand, indices = ctx.types[0], ctx.types[1]
    axis, b = attrs["axis"], attrs["batch_dims"]
    ctx.dtype_in(1, INDEX_DTYPES, "an index dtype:")
    ctx.axis(axis, operand.rank, "axis")
    if not 0 <= b <= axis:
        ctx.fail(f"attribute batch_dims={b} must satisfy 0 <= batch_dims <= axis={axis}")
    if b > indices.rank:
        ctx.fail(f"attribute batch_dims={b} exceeds the rank of operand #1 'indices' "
                 f"({indices})")


def _gather_shape(ctx: Ctx, attrs: Mapping[str, Any]) -> tuple[list[Expr], list[Expr]]:
    """(operand dims with the batch dims unified, the gathered shape)."""
    operand, indices = ctx.types[0], ctx.types[1]
    axis, b = attrs["axis"], attrs["batch_dims"]
    dims = list(operand.shape)
    for k in range(b):
        dims[k] = ctx.unify(operand.shape[k], indices.shape[k],
                            f"batch dim {k} of operand #0 '{ctx.opdef.operands[0]}' "
                            f"({operand}) vs operand #1 'indices' ({indices})")
    return dims, dims[:axis] + list(indices.shape[b:]) + dims[axis + 1:]


def _gather_facts(op: Op) -> Iterable[Fact]:
    operand, indices = op.operands[0].shape, op.operands[1].shape
    for k in range(op.attrs["batch_dims"]):
        if operand[k] != indices[k]:
            yield Eq(operand[k], indices[k])


class _Plan:
    """How gather/scatter_add see the operand: (Bp, d, pre..., post...) indexed by
    (batch iota, clamped indices) gives (Bp, I..., pre..., post...)."""

    def __init__(self, name: str, shape: Sequence[int], ishape: Sequence[int], axis: int,
                 b: int):
        if tuple(shape[:b]) != tuple(ishape[:b]):
            raise InterpretError(f"{name}: the batch dims {tuple(shape[:b])} of the operand "
                                 f"differ from the batch dims {tuple(ishape[:b])} of indices")
        self.batch, self.pre = tuple(shape[:b]), tuple(shape[b:axis])
        self.size, self.post = shape[axis], tuple(shape[axis + 1:])
        self.ishape = tuple(ishape[b:])
        self.bp = _prod(self.batch)
        self.result_shape = self.batch + self.pre + self.ishape + self.post
        nb, ni, npre = 1, len(self.ishape), len(self.pre)
        # (Bp, pre, I, post) <-> (Bp, I, pre, post)
        self.to_ip = ([0] + list(range(nb + npre, nb + npre + ni)) + list(range(nb, nb + npre))
                      + list(range(nb + npre + ni, nb + npre + ni + len(self.post))))
        self.from_ip = [int(i) for i in np.argsort(self.to_ip)]

    def operand_view(self, x: np.ndarray) -> np.ndarray:
        """(Bp, d, pre..., post...), a view of contiguous ``x``."""
        v = x.reshape((self.bp,) + self.pre + (self.size,) + self.post)
        return np.moveaxis(v, 1 + len(self.pre), 1)

    def index(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ir = _clamped(idx, self.size).reshape((self.bp,) + self.ishape)
        bidx = np.arange(self.bp).reshape((self.bp,) + (1,) * len(self.ishape))
        return bidx, ir


def _c_indirect(op: Op, ctx: KernelContext) -> str:
    """The native load of a gather: operand 0 at the (clamped) index operand 1 holds."""
    idx = ctx.operand(1)
    top = ctx.dim(op.operands[0].shape[op.attrs["axis"]] - 1)
    return ctx.read_at(0, f"disc_clampi((int64_t)({idx}), {top})")


class Gather(OpDef):
    """Take slices of ``operand`` along ``axis`` (TF ``GatherV2`` / ``np.take``)::

        result[b..., p..., i..., q...] = operand[b..., p..., indices[b..., i...], q...]

    where ``b`` are the first ``batch_dims`` dims (shared by operand and indices), ``p``
    the operand dims before ``axis`` and ``q`` those after. Result shape:
    ``operand.shape[:axis] + indices.shape[batch_dims:] + operand.shape[axis+1:]``, with
    ``operand.shape[:batch_dims] == indices.shape[:batch_dims]`` and
    ``0 <= batch_dims <= axis``. Covers embedding lookup, ``index_select`` and
    ``tf.gather``. Indices are clamped (see the module docstring); any operand dtype.
    """

    name = "gather"
    operands = ("operand", "indices")
    attrs = {"axis": Attr(INT, doc="the operand axis indexed"),
             "batch_dims": Attr(INT, default=0, doc="leading dims shared with indices")}
    traits = frozenset({"pure"})
    fusion = Fusion.INDEXING
    indirect = True

    @classmethod
    def index_map(cls, op: Op, i: int, result_map: DimMap, kernel_rank: int) -> OperandMap:
        axis, bd = op.attrs["axis"], op.attrs["batch_dims"]
        q = op.operands[1].rank - bd  # index dims that replace the operand's axis
        v = op.operands[i]
        if i == 1:
            return tuple(result_map[j] if j < bd else result_map[axis + j - bd]
                         for j in range(v.rank)), {}
        return tuple(result_map[j] if j < axis else DATA if j == axis else
                     result_map[j + q - 1] for j in range(v.rank)), {}

    c_kernel = classmethod(lambda cls, op, ctx: _c_indirect(op, ctx))

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        _check_gather_attrs(ctx, attrs)
        _, shape = _gather_shape(ctx, attrs)
        return [TensorType(ctx.types[0].dtype, tuple(shape))]

    @classmethod
    def facts(cls, op: Op) -> Iterable[Fact]:
        return _gather_facts(op)

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        operand, idx = inputs
        plan = _Plan(cls.name, operand.shape, idx.shape, attrs["axis"], attrs["batch_dims"])
        if plan.size == 0 or _prod(plan.result_shape) == 0:
            if _prod(plan.result_shape):
                raise InterpretError(f"gather: cannot index axis {attrs['axis']} of size 0 of "
                                     f"an operand of shape {operand.shape}")
            return np.zeros(plan.result_shape, operand.dtype)
        g = plan.operand_view(np.ascontiguousarray(operand))[plan.index(idx)]
        return np.ascontiguousarray(
            g.transpose(plan.from_ip)).reshape(plan.result_shape)


class ScatterAdd(OpDef):
    """The transpose of ``gather``: ``operand`` plus ``updates`` summed into the positions
    ``gather`` with the same attributes would read::

        result = operand; result[b..., p..., indices[b..., i...], q...] += updates[b, p, i, q]

    Duplicate indices accumulate (``np.add.at``). ``updates`` has exactly the shape
    ``gather(operand, indices)`` would have; operand and updates share a numeric dtype,
    which is the result's; the result has operand's shape. Indices are clamped.
    """

    name = "scatter_add"
    operands = ("operand", "indices", "updates")
    attrs = {"axis": Attr(INT, doc="the operand axis indexed"),
             "batch_dims": Attr(INT, default=0, doc="leading dims shared with indices")}
    traits = frozenset({"pure"})
    fusion = Fusion.SCATTER

    @classmethod
    def scatter_dims(cls, op: Op) -> tuple[int, list[int], list[int | None]]:
        x, idx = op.operands[0], op.operands[1]
        axis, bd = op.attrs["axis"], op.attrs["batch_dims"]
        q = idx.rank - bd
        idims = [j if j < bd else axis + j - bd for j in range(idx.rank)]
        xdims = [j if j < axis else None if j == axis else j + q - 1 for j in range(x.rank)]
        return axis, idims, xdims

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        ctx.dtype_in(0, NUMERIC_DTYPES, "a numeric dtype:")
        ctx.same_dtype(0, 2)
        _check_gather_attrs(ctx, attrs)
        dims, shape = _gather_shape(ctx, attrs)
        updates = ctx.types[2]
        if updates.rank != len(shape):
            ctx.fail(f"operand #2 'updates' ({updates}) has rank {updates.rank}, expected the "
                     f"gathered shape [{', '.join(str(d) for d in shape)}]")
        axis, ni = attrs["axis"], ctx.types[1].rank - attrs["batch_dims"]
        for k, (want, got) in enumerate(zip(shape, updates.shape, strict=True)):
            u = ctx.unify(want, got, f"dim {k} of operand #2 'updates' ({updates}) vs the "
                                     f"gathered shape [{', '.join(str(d) for d in shape)}]")
            if k < axis:
                dims[k] = u
            elif k >= axis + ni:
                dims[k - ni + 1] = u
        return [TensorType(ctx.types[0].dtype, tuple(dims))]

    @classmethod
    def facts(cls, op: Op) -> Iterable[Fact]:
        yield from _gather_facts(op)
        operand, indices = op.operands[0].shape, op.operands[1].shape
        axis, b = op.attrs["axis"], op.attrs["batch_dims"]
        want = list(operand[:axis]) + list(indices[b:]) + list(operand[axis + 1:])
        for w, u in zip(want, op.operands[2].shape, strict=True):
            if w != u:
                yield Eq(w, u)

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        operand, idx, updates = inputs
        dt = dtype_of(operand.dtype)
        plan = _Plan(cls.name, operand.shape, idx.shape, attrs["axis"], attrs["batch_dims"])
        if updates.shape != plan.result_shape:
            raise InterpretError(f"scatter_add: updates have shape {updates.shape}, expected "
                                 f"the gathered shape {plan.result_shape}")
        acc = operand.astype(acc_dtype(dt), order="C")  # a contiguous copy
        if updates.size:
            if plan.size == 0:
                raise InterpretError(f"scatter_add: cannot index axis {attrs['axis']} of size "
                                     f"0 of an operand of shape {operand.shape}")
            u = updates.astype(acc.dtype).reshape(
                (plan.bp,) + plan.pre + plan.ishape + plan.post).transpose(plan.to_ip)
            np.add.at(plan.operand_view(acc), plan.index(idx), u)
        with np.errstate(all="ignore"):
            return acc.astype(dt.np)


# -- gather_elements / scatter_elements_add ---------------------------------------------

def _check_elements(ctx: Ctx, axis: int, operand: int, indices: int) -> None:
    ctx.dtype_in(indices, INDEX_DTYPES, "an index dtype:")
    x, ix = ctx.types[operand], ctx.types[indices]
    ctx.rank(indices, x.rank)
    ctx.axis(axis, x.rank, "axis")
    for k, (d, i) in enumerate(zip(x.shape, ix.shape, strict=True)):
        if k != axis and d.is_const and i.is_const and i.value > d.value:
            ctx.fail(f"{ctx.operand_name(indices)} ({ix}) is larger than "
                     f"{ctx.operand_name(operand)} ({x}) in dim {k} (only the indexed "
                     f"axis={axis} may be larger)")


def _elements_index(name: str, operand: np.ndarray, idx: np.ndarray, axis: int
                    ) -> tuple[np.ndarray, ...] | None:
    """Index arrays addressing operand at every position of ``idx`` (None if idx is empty)."""
    if operand.ndim != idx.ndim or not 0 <= axis < operand.ndim:
        raise InterpretError(f"{name}: indices of shape {idx.shape} do not fit an operand of "
                             f"shape {operand.shape} with axis={axis}")
    for k, (d, i) in enumerate(zip(operand.shape, idx.shape, strict=True)):
        if k != axis and i > d:
            raise InterpretError(f"{name}: indices of shape {idx.shape} are larger than the "
                                 f"operand of shape {operand.shape} in dim {k}")
    if idx.size == 0:
        return None
    if operand.shape[axis] == 0:
        raise InterpretError(f"{name}: cannot index axis {axis} of size 0 of an operand of "
                             f"shape {operand.shape}")
    grid = list(np.indices(idx.shape, sparse=True))
    grid[axis] = _clamped(idx, operand.shape[axis])
    return tuple(grid)


class GatherElements(OpDef):
    """Pick one element per index (``torch.gather`` / ``np.take_along_axis``)::

        result[i0, ..., ik, ...] = operand[i0, ..., indices[i0, ..., ik, ...], ...]

    with the index replacing position ``axis``. Same rank for both operands; the result
    has ``indices``' shape and ``operand``'s dtype. Off ``axis``, indices dims may be
    smaller than the operand's (as torch allows) but not larger. Indices are clamped.
    """

    name = "gather_elements"
    operands = ("operand", "indices")
    attrs = {"axis": Attr(INT, doc="the operand axis indexed")}
    traits = frozenset({"pure"})
    fusion = Fusion.INDEXING
    indirect = True

    @classmethod
    def index_map(cls, op: Op, i: int, result_map: DimMap, kernel_rank: int) -> OperandMap:
        if i == 1:
            return result_map, {}
        axis = op.attrs["axis"]
        return tuple(DATA if j == axis else e for j, e in enumerate(result_map)), {}

    c_kernel = classmethod(lambda cls, op, ctx: _c_indirect(op, ctx))

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        ctx.dtype_in(0, ALL_DTYPES)
        _check_elements(ctx, attrs["axis"], 0, 1)
        return [TensorType(ctx.types[0].dtype, ctx.types[1].shape)]

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        operand, idx = inputs
        where = _elements_index(cls.name, operand, idx, attrs["axis"])
        if where is None:
            return np.zeros(idx.shape, operand.dtype)
        return operand[where]


class ScatterElementsAdd(OpDef):
    """The transpose of ``gather_elements`` (``torch.Tensor.scatter_add``)::

        result = operand; result[i0, ..., indices[i0, ..., ik, ...], ...] += updates[i0, ...]

    ``indices`` and ``updates`` have the same shape and the operand's rank (smaller than
    the operand off ``axis`` is allowed); duplicates accumulate. Operand and updates share
    a numeric dtype; the result has operand's type. Indices are clamped.
    """

    name = "scatter_elements_add"
    operands = ("operand", "indices", "updates")
    attrs = {"axis": Attr(INT, doc="the operand axis indexed")}
    traits = frozenset({"pure"})
    fusion = Fusion.SCATTER

    @classmethod
    def scatter_dims(cls, op: Op) -> tuple[int, list[int], list[int | None]]:
        axis = op.attrs["axis"]
        idims = list(range(op.operands[1].rank))
        xdims = [j if j != axis else None for j in range(op.operands[0].rank)]
        return axis, idims, xdims

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        ctx.dtype_in(0, NUMERIC_DTYPES, "a numeric dtype:")
        ctx.same_dtype(0, 2)
        _check_elements(ctx, attrs["axis"], 0, 1)
        ctx.same_shape([1, 2])
        return [ctx.types[0]]

    @classmethod
    def facts(cls, op: Op) -> Iterable[Fact]:
        for i, u in zip(op.operands[1].shape, op.operands[2].shape, strict=True):
            if i != u:
                yield Eq(i, u)

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        operand, idx, updates = inputs
        dt = dtype_of(operand.dtype)
        if updates.shape != idx.shape:
            raise InterpretError(f"scatter_elements_add: updates of shape {updates.shape} "
                                 f"differ from indices of shape {idx.shape}")
        where = _elements_index(cls.name, operand, idx, attrs["axis"])
        acc = operand.astype(acc_dtype(dt))
        if where is not None:
            np.add.at(acc, where, updates.astype(acc.dtype))
        with np.errstate(all="ignore"):
            return acc.astype(dt.np)
