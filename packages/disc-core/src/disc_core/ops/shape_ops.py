"""Shape and layout ops: reshape, broadcast_in_dim, transpose, their dynamic forms, and
get_dimension_size.

Semantics follow StableHLO. Every op accepts every dtype (``dtypes.ALL_DTYPES``); the
shape operands of the dynamic forms are 1-D ``i32``/``i64`` tensors.

Traits (queried by later passes, never by op name):

* ``"pure"``: no side effects (CSE may merge it, DCE may drop it).
* ``"broadcast"``: elements are replicated along new or size-1 dims.
* ``"dynamic_shape"``: operand #1 is a shape tensor whose run-time values are the result
  dims (the ``shape`` attribute states them symbolically; bridges pass fresh symbols for
  dims they cannot name, and the interpreter binds those from the actual result).
* ``"shape"``: reads only the operand's shape, never its elements.

What the native backend needs (``OpDef.fusion`` and its flags): reshape, broadcast_in_dim
and transpose are views (their elements are the operand's, read at other indices, given by
``index_map``).

Dims in ``shape`` attributes are sizes: a static negative dim is a verify error. No ``-1``
wildcard: bridges resolve it (to an expression or a fresh symbol) before building.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..dtypes import DType
from ..index_map import DimMap, Entry, OperandMap, Quot
from ..ir import Op, TensorType, Value
from ..opdef import (
    DIMS,
    INT,
    INTS,
    Attr,
    Ctx,
    Env,
    Fusion,
    InterpretError,
    KernelContext,
    OpDef,
    Rewriter,
    VerifyError,
)
from ..shape_facts import Divisible, Eq, Fact, ProductEq
from ..symbolic import Expr, UnboundSymbolError, as_expr, gcd_divisor, product

SHAPE_TENSOR_DTYPES = (DType.I32, DType.I64)


# -- shared helpers (also used by data_movement) ---------------------------------------

def check_dims_nonneg(ctx: Ctx, dims: Sequence[Expr], attr: str) -> None:
    """Fail if a static dim of attribute ``attr`` is negative."""
    for k, d in enumerate(dims):
        if d.is_const and d.value < 0:
            ctx.fail(f"attribute {attr}[{k}] = {d} is negative; dims are sizes (>= 0)")


def c_array(a: np.ndarray) -> np.ndarray:
    """A fresh C-contiguous copy (results never alias operands; keeps rank 0, unlike
    ``np.ascontiguousarray``)."""
    return np.array(a, order="C")


def provably_negative(e: Expr) -> bool:
    return e.is_const and e.value < 0


def _fmt_shape(shape: Iterable[Expr]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _check_element_count(ctx: Ctx, in_shape: Sequence[Expr], out_shape: Sequence[Expr],
                         attr: str = "shape") -> None:
    """Reject a reshape whose element counts provably differ; accept anything else."""
    diff = product(in_shape) - product(out_shape)
    if diff.is_const and diff.value != 0:
        ctx.fail(f"operand #0 'x' has {product(in_shape)} elements ({_fmt_shape(in_shape)}), "
                 f"but attribute {attr}={_fmt_shape(out_shape)} has {product(out_shape)}; "
                 f"a reshape must preserve the element count")


def _reshape_facts(in_shape: Sequence[Expr], out_shape: Sequence[Expr]) -> Iterable[Fact]:
    """Element count is preserved; each side's product is a multiple of what divides the
    other's (e.g. reshape [B, S] -> [B, S // 2, 2] implies B*S is even)."""
    n_in, n_out = product(in_shape), product(out_shape)
    if n_in == n_out:
        return
    yield ProductEq(tuple(in_shape), tuple(out_shape))
    for a, b in ((n_in, n_out), (n_out, n_in)):
        g = gcd_divisor(b)
        if a.is_const or g <= 1 or gcd_divisor(a) % g == 0:
            continue
        c = math.gcd(gcd_divisor(a), g)  # state it on a's non-constant part: B*S % 2
        yield Divisible(a // c, g // c)


def _check_shape_tensor(ctx: Ctx, rank: int) -> None:
    ctx.dtype_in(1, SHAPE_TENSOR_DTYPES)
    t = ctx.types[1]
    if t.rank != 1 or not t.shape[0].is_const or t.shape[0].value != rank:
        ctx.fail(f"{ctx.operand_name(1)} has type {t}, expected a 1-D tensor of static length "
                 f"{rank} (the rank of attribute shape)")


def target_shape(opname: str, tensor: np.ndarray, dims: Sequence[Expr], env: Env
                 ) -> tuple[int, ...]:
    """The result shape of a dynamic op: the shape tensor's values, checked against every
    dim of the ``shape`` attribute that the environment can evaluate."""
    t = np.asarray(tensor)
    if t.ndim != 1 or t.shape[0] != len(dims):
        raise InterpretError(f"{opname}: shape operand has shape {tuple(t.shape)}, expected "
                             f"({len(dims)},)")
    vals = tuple(int(v) for v in t)
    for k, (d, v) in enumerate(zip(dims, vals, strict=True)):
        if v < 0:
            raise InterpretError(f"{opname}: shape operand {list(vals)} has a negative dim {k}")
        faults: list = []
        try:
            want = as_expr(d).evaluate(env.values, faults)
        except UnboundSymbolError:
            continue  # a fresh symbol: the interpreter binds it from the result
        if faults and any(w == 0 for j, w in enumerate(vals) if j != k):
            continue  # divides by zero in an empty tensor: any size will do
        if faults:
            raise InterpretError(f"{opname}: shape operand {list(vals)} says dim {k} is {v}, "
                                 f"but attribute shape[{k}] = {d} divides by zero "
                                 f"({faults[0]}); expected {faults[0].divisor} != 0")
        if want != v:
            raise InterpretError(f"{opname}: shape operand {list(vals)} says dim {k} is {v}, "
                                 f"but attribute shape[{k}] = {d} = {want}")
    return vals


def _reshape_array(opname: str, x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if any(d < 0 for d in shape):
        raise InterpretError(f"{opname}: target shape {list(shape)} has a negative dim")
    if math.prod(shape) != x.size:
        raise InterpretError(f"{opname}: cannot reshape an array of shape {list(x.shape)} "
                             f"({x.size} elements) to {list(shape)} "
                             f"({math.prod(shape)} elements)")
    return c_array(x.reshape(shape))


def _check_broadcast(ctx: Ctx, shape: Sequence[Expr], bdims: Sequence[int]) -> None:
    x = ctx.types[0]
    check_dims_nonneg(ctx, shape, "shape")
    if len(bdims) != x.rank:
        ctx.fail(f"attribute broadcast_dimensions={list(bdims)} has {len(bdims)} entries, "
                 f"expected one per dim of operand #0 'x' ({x}, rank {x.rank})")
    ctx.axes(bdims, len(shape), "broadcast_dimensions")
    for i, (d, j) in enumerate(zip(x.shape, bdims, strict=True)):
        out = shape[j]
        if d.is_const and out.is_const and d.value != 1 and d.value != out.value:
            ctx.fail(f"operand #0 'x' dim {i} ({d}) cannot broadcast to result dim {j} "
                     f"({out}) of attribute shape={_fmt_shape(shape)}: expected 1 or {out}")


def _broadcast_facts(op: Op) -> Iterable[Fact]:
    """A static operand dim other than 1 must equal its result dim; a dim that could be 1
    implies nothing."""
    x = op.operands[0]
    out = op.results[0].shape
    for d, j in zip(x.shape, op.attrs["broadcast_dimensions"], strict=True):
        if d.is_const and d.value != 1 and d != out[j]:
            yield Eq(d, out[j])


def broadcast_array(opname: str, x: np.ndarray, shape: tuple[int, ...],
                    bdims: Sequence[int]) -> np.ndarray:
    if x.ndim != len(bdims):
        raise InterpretError(f"{opname}: operand has rank {x.ndim}, but "
                             f"broadcast_dimensions={list(bdims)} has {len(bdims)} entries")
    if any(d < 0 for d in shape):
        raise InterpretError(f"{opname}: target shape {list(shape)} has a negative dim")
    for i, j in enumerate(bdims):
        if x.shape[i] != 1 and x.shape[i] != shape[j]:
            raise InterpretError(f"{opname}: operand dim {i} is {x.shape[i]} (shape "
                                 f"{list(x.shape)}), cannot broadcast to result dim {j} = "
                                 f"{shape[j]} (shape {list(shape)}): expected 1 or {shape[j]}")
    order = sorted(range(x.ndim), key=lambda i: bdims[i])
    expanded = [1] * len(shape)
    for i in order:
        expanded[bdims[i]] = x.shape[i]
    xt = np.transpose(x, order).reshape(expanded)
    return c_array(np.broadcast_to(xt, shape))


def _constant_values(v: Value) -> np.ndarray | None:
    """The value of ``v`` if a ``constant`` op produces it."""
    p = v.producer
    if p is not None and p.opdef.has_trait("constant") and "value" in p.attrs:
        return np.asarray(p.attrs["value"].array)
    return None


def _static_matching(dims: Sequence[Expr], vals: np.ndarray | None) -> bool:
    """Whether every attr dim is static and equals the constant shape tensor's value."""
    if vals is None or vals.ndim != 1 or vals.shape[0] != len(dims):
        return False
    return all(d.is_const and d.value == int(v) for d, v in zip(dims, vals, strict=True))


# -- ops ---------------------------------------------------------------------------------

class Reshape(OpDef):
    """Row-major reshape of ``x`` to ``shape``; the element count must be preserved.

    Verification rejects only a provable mismatch (the difference of the two element
    counts is a non-zero constant); otherwise the equality is a ``ProductEq`` fact for the
    shape-constraint analysis and a run-time check.
    """

    name = "reshape"
    operands = ("x",)
    attrs = {"shape": Attr(DIMS, doc="result dims")}
    traits = frozenset({"pure"})
    summary = "row-major reshape"
    #: a kernel's root reshape shares its operand's buffer; one that only inserts or
    #: removes static size-1 dims is indexing inside a kernel (:func:`unit_reshape_pairs`)
    fusion = Fusion.ALIAS
    view = True

    @classmethod
    def fuses(cls, op: Op) -> bool:
        return unit_reshape_pairs(op) is not None or tile_merge_groups(op) is not None

    @classmethod
    def index_map(cls, op: Op, i: int, result_map: DimMap, kernel_rank: int
                  ) -> OperandMap | None:
        out: list[Entry] = [None] * op.operands[0].rank  # unit dims are read at index 0
        pairs = unit_reshape_pairs(op)
        if pairs is not None:
            for rd, od in pairs:
                out[od] = result_map[rd]
            return tuple(out), {}
        groups = tile_merge_groups(op)
        if groups is None:
            return None
        for rd, od, step in groups:
            out[od] = result_map[rd] if step == 1 else Quot(result_map[rd], step)
        return tuple(out), {}

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        shape = attrs["shape"]
        check_dims_nonneg(ctx, shape, "shape")
        _check_element_count(ctx, ctx.types[0].shape, shape)
        return [ctx.types[0].with_shape(shape)]

    @classmethod
    def facts(cls, op: Op) -> Iterable[Fact]:
        return _reshape_facts(op.operands[0].shape, op.attrs["shape"])

    @classmethod
    def canonicalize(cls, op: Op, rw: Rewriter) -> Value | None:
        x = op.operands[0]
        if x.type == op.results[0].type:
            return x
        inner = x.producer
        if inner is not None and inner.opdef is cls:
            src = inner.operands[0]
            if product(src.shape) != product(x.shape):
                # the inner reshape's element count is only a fact, checked when it runs
                # ([s0, 3] -> [2, s0 // 2, 3] fails for odd s0): folding it away would
                # turn that failure into an answer
                return None
            if src.type == op.results[0].type:
                return src
            try:
                return rw.op(cls.name, src, shape=op.attrs["shape"])
            except VerifyError:  # the pair provably fails at run time; keep it
                return None
        return None

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        return _reshape_array(cls.name, inputs[0], env.tensor_shape(attrs["shape"]))


class DynamicReshape(OpDef):
    """Reshape ``x`` to the dims held by ``shape_tensor`` (1-D i32/i64 of static length =
    result rank). ``shape`` states the same dims symbolically (fresh symbols where the
    bridge cannot name them); at run time every evaluable dim of ``shape`` must equal the
    tensor's value, and the element count must be preserved."""

    name = "dynamic_reshape"
    operands = ("x", "shape_tensor")
    attrs = {"shape": Attr(DIMS, doc="result dims, symbolically")}
    traits = frozenset({"pure", "dynamic_shape"})
    summary = "reshape to a run-time shape tensor"

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        shape = attrs["shape"]
        check_dims_nonneg(ctx, shape, "shape")
        _check_shape_tensor(ctx, len(shape))
        _check_element_count(ctx, ctx.types[0].shape, shape)
        return [ctx.types[0].with_shape(shape)]

    @classmethod
    def facts(cls, op: Op) -> Iterable[Fact]:
        return _reshape_facts(op.operands[0].shape, op.attrs["shape"])

    @classmethod
    def canonicalize(cls, op: Op, rw: Rewriter) -> Value | None:
        """With a constant shape tensor equal to a fully static ``shape``: a reshape."""
        if _static_matching(op.attrs["shape"], _constant_values(op.operands[1])):
            return rw.op("reshape", op.operands[0], shape=op.attrs["shape"])
        return None

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        shape = target_shape(cls.name, inputs[1], attrs["shape"], env)
        return _reshape_array(cls.name, inputs[0], shape)


class BroadcastInDim(OpDef):
    """Broadcast ``x`` to ``shape``: operand dim i maps to result dim
    ``broadcast_dimensions[i]`` (unique and in range, any order) and must be 1 or equal to
    it; result dims not mapped to are replicated. A static mismatch is a verify error; a
    symbolic one is checked at run time."""

    name = "broadcast_in_dim"
    operands = ("x",)
    attrs = {"shape": Attr(DIMS, doc="result dims"),
             "broadcast_dimensions": Attr(INTS, doc="result dim of each operand dim")}
    #: "broadcast": replicates its operand; fusion sees through it (a broadcast of a
    #: duplicable value is duplicable, of a row-level value is row-level)
    traits = frozenset({"pure", "broadcast"})
    summary = "replicate along new and size-1 dims"
    fusion = Fusion.INDEXING
    view = True

    @classmethod
    def index_map(cls, op: Op, i: int, result_map: DimMap, kernel_rank: int) -> OperandMap:
        """Mapped dims follow the result's; a static 1 is read at index 0; a symbolic
        operand dim that may be 1 at run time follows the result's dim and is reported as
        a possible implicit broadcast."""
        v = op.operands[0]
        out: list[Entry] = []
        maybe: dict[int, int] = {}
        res_shape = op.results[0].shape
        for j, d in enumerate(op.attrs["broadcast_dimensions"]):
            od, rd = v.shape[j], res_shape[d]
            if od == rd:
                out.append(result_map[d])
            elif od.is_const and od.value == 1:
                out.append(None)
            else:  # symbolic operand dim: equal or 1 at run time
                out.append(result_map[d])
                if result_map[d] is not None:
                    maybe[j] = result_map[d]  # type: ignore[assignment]
        return tuple(out), maybe

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        _check_broadcast(ctx, attrs["shape"], attrs["broadcast_dimensions"])
        return [ctx.types[0].with_shape(attrs["shape"])]

    @classmethod
    def facts(cls, op: Op) -> Iterable[Fact]:
        return _broadcast_facts(op)

    @classmethod
    def canonicalize(cls, op: Op, rw: Rewriter) -> Value | None:
        x = op.operands[0]
        if (x.type == op.results[0].type
                and op.attrs["broadcast_dimensions"] == tuple(range(x.rank))):
            return x
        return None

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        return broadcast_array(cls.name, inputs[0], env.tensor_shape(attrs["shape"]),
                               attrs["broadcast_dimensions"])


class DynamicBroadcastInDim(OpDef):
    """``broadcast_in_dim`` to the dims held by ``shape_tensor`` (1-D i32/i64 of static
    length = result rank); ``shape`` states them symbolically, as for dynamic_reshape."""

    name = "dynamic_broadcast_in_dim"
    operands = ("x", "shape_tensor")
    attrs = {"shape": Attr(DIMS, doc="result dims, symbolically"),
             "broadcast_dimensions": Attr(INTS, doc="result dim of each operand dim")}
    traits = frozenset({"pure", "broadcast", "dynamic_shape"})
    summary = "broadcast to a run-time shape tensor"

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        _check_broadcast(ctx, attrs["shape"], attrs["broadcast_dimensions"])
        _check_shape_tensor(ctx, len(attrs["shape"]))
        return [ctx.types[0].with_shape(attrs["shape"])]

    @classmethod
    def facts(cls, op: Op) -> Iterable[Fact]:
        return _broadcast_facts(op)

    @classmethod
    def canonicalize(cls, op: Op, rw: Rewriter) -> Value | None:
        """With a constant shape tensor equal to a fully static ``shape``: a broadcast."""
        if _static_matching(op.attrs["shape"], _constant_values(op.operands[1])):
            return rw.op("broadcast_in_dim", op.operands[0], shape=op.attrs["shape"],
                         broadcast_dimensions=op.attrs["broadcast_dimensions"])
        return None

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        shape = target_shape(cls.name, inputs[1], attrs["shape"], env)
        return broadcast_array(cls.name, inputs[0], shape, attrs["broadcast_dimensions"])


class GetDimensionSize(OpDef):
    """The size of dim ``dimension`` of ``x`` as an ``i64[]`` scalar."""

    name = "get_dimension_size"
    operands = ("x",)
    attrs = {"dimension": Attr(INT)}
    #: "shape": the native backend never computes or reads the operand's data
    traits = frozenset({"pure", "shape"})
    summary = "size of one dim as an i64 scalar"
    fusion = Fusion.DUPLICABLE

    @classmethod
    def c_kernel(cls, op: Op, ctx: KernelContext) -> str:
        """Shape arithmetic, evaluated from the kernel's symbol array."""
        return f"(int64_t){ctx.dim(op.operands[0].shape[op.attrs['dimension']])}"

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        ctx.axis(attrs["dimension"], ctx.types[0].rank, "dimension")
        return [TensorType(DType.I64, ())]

    @classmethod
    def canonicalize(cls, op: Op, rw: Rewriter) -> Value | None:
        """A static dim folds to a constant."""
        d = op.operands[0].shape[op.attrs["dimension"]]
        if d.is_const:
            return rw.op("constant", value=np.array(d.value, dtype=np.int64))
        return None

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        x, d = inputs[0], attrs["dimension"]
        if not 0 <= d < x.ndim:
            raise InterpretError(f"{cls.name}: dimension {d} is out of range for an operand "
                                 f"of shape {list(x.shape)}")
        return np.array(x.shape[d], dtype=np.int64)


class Transpose(OpDef):
    """Permute dims: result dim i is operand dim ``permutation[i]``."""

    name = "transpose"
    operands = ("x",)
    attrs = {"permutation": Attr(INTS)}
    traits = frozenset({"pure"})
    summary = "permute dims"
    fusion = Fusion.INDEXING
    view = True

    @classmethod
    def index_map(cls, op: Op, i: int, result_map: DimMap, kernel_rank: int) -> OperandMap:
        out: list[Entry] = [None] * op.operands[0].rank
        for k, p in enumerate(op.attrs["permutation"]):
            out[p] = result_map[k]
        return tuple(out), {}

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        x = ctx.types[0]
        perm = attrs["permutation"]
        ctx.permutation(perm, x.rank)
        return [x.with_shape(x.shape[p] for p in perm)]

    @classmethod
    def canonicalize(cls, op: Op, rw: Rewriter) -> Value | None:
        perm = op.attrs["permutation"]
        x = op.operands[0]
        if perm == tuple(range(len(perm))):
            return x
        inner = x.producer
        if inner is not None and inner.opdef is cls:
            p1 = inner.attrs["permutation"]
            composed = tuple(p1[p] for p in perm)
            src = inner.operands[0]
            if composed == tuple(range(len(composed))):
                return src
            return rw.op(cls.name, src, permutation=composed)
        return None

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        x, perm = inputs[0], attrs["permutation"]
        if sorted(perm) != list(range(x.ndim)):
            raise InterpretError(f"{cls.name}: permutation {list(perm)} does not fit an operand "
                                 f"of shape {list(x.shape)}")
        return c_array(np.transpose(x, perm))


def tile_merge_groups(op: Op) -> list[tuple[int, int, int]] | None:
    """(result dim, operand dim, step) of a reshape that merges runs of dims whose inner
    members are static broadcast dims of the operand's producer (``broadcast_in_dim``),
    None for any other reshape. Each element is repeated along such a run (an upsampling:
    ``g[..., o, None, w, None]`` broadcast to ``[..., o, k, w, k]`` and viewed as
    ``[..., o*k, w*k]``, a pooling's gradient), so result index ``e`` reads operand index
    ``e / step`` in the run's first dim (``step`` the product of the inner dims) and any
    index in the inner ones, which hold copies. Reading them at 0 is right whether the
    broadcast runs in the same kernel or was materialized, so inside a kernel the reshape
    is indexing and the upsampled tensor is never written."""
    v = op.operands[0]
    p = v.producer
    if p is None or p.name != "broadcast_in_dim":
        return None
    src_shape = p.operands[0].shape
    copies = set(range(v.rank)) - set(p.attrs["broadcast_dimensions"])
    copies |= {d for j, d in enumerate(p.attrs["broadcast_dimensions"])
               if src_shape[j].is_const and src_shape[j].value == 1}

    def non_unit(shape: tuple) -> list[int]:
        return [j for j, d in enumerate(shape) if not (d.is_const and d.value == 1)]

    src, res = v.shape, op.results[0].shape
    a, b = non_unit(src), non_unit(res)
    groups: list[tuple[int, int, int]] = []
    i = 0
    merged = False
    for rd in b:
        if i >= len(a):
            return None
        first, size, step = a[i], src[a[i]], 1
        i += 1
        while size != res[rd]:
            if i >= len(a):
                return None
            inner = src[a[i]]
            if not inner.is_const or a[i] not in copies:
                return None
            size, step = size * inner, step * inner.value
            i += 1
        merged |= step > 1
        groups.append((rd, first, step))
    if i != len(a) or not merged:
        return None
    return groups


def unit_reshape_pairs(op: Op) -> list[tuple[int, int]] | None:
    """(result dim, operand dim) pairs of a reshape that only inserts or removes dims of
    static size 1 (keepdim reductions, ``x[:, None]``, squeeze), None for any other reshape.

    Such a reshape moves no data: inside a kernel it is indexing (the unit dims read index
    0), so a keepdim statistic stays in the kernel that computes it instead of splitting
    the kernel at a zero-copy alias."""
    def non_unit(shape: tuple) -> list[int]:
        return [j for j, d in enumerate(shape) if not (d.is_const and d.value == 1)]

    src, res = op.operands[0].shape, op.results[0].shape
    a, b = non_unit(src), non_unit(res)
    if len(a) != len(b) or any(src[i] != res[j] for i, j in zip(a, b)):
        return None
    return list(zip(b, a))
