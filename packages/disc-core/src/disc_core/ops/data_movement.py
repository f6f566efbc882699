"""Data movement ops: slice, dynamic_slice, dynamic_update_slice, concatenate, pad, reverse.

Semantics follow StableHLO. Every op accepts every dtype (``dtypes.ALL_DTYPES``); start
indices of the dynamic ops are rank-0 tensors of any integer dtype (each may differ).

Traits: ``"pure"``. The result's elements are copies of operand elements or of a padding
value, at positions an index map determines: slice, concatenate, pad and reverse state
that map for the native backend (``index_map``, see
``disc_core.index_map``).

Static bounds are checked when a violation is provable (the relevant difference of dims is
a negative constant); everything else is checked by the reference at run time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..dtypes import INT_DTYPES
from ..index_map import DimMap, OperandMap, Quot, compose, sized
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
from ..shape_facts import Eq, Fact
from ..symbolic import Expr, ceildiv, product, smax
from .shape_ops import c_array, check_dims_nonneg, provably_negative

TRAITS = frozenset({"pure"})


def _check_lengths(ctx: Ctx, attrs: Mapping[str, Any], names: Sequence[str]) -> None:
    rank = ctx.types[0].rank
    for n in names:
        if len(attrs[n]) != rank:
            ctx.fail(f"attribute {n}={_fmt(attrs[n])} has {len(attrs[n])} entries, expected "
                     f"one per dim of operand #0 'x' ({ctx.types[0]}, rank {rank})")


def _fmt(vals: Iterable[Any]) -> str:
    return "[" + ", ".join(str(v) for v in vals) + "]"


def _check_indices(ctx: Ctx, first: int, rank: int, label: str) -> None:
    """Operands ``first..`` are rank-0 integer start indices, one per dim of ``label``."""
    n = len(ctx.types) - first
    if n != rank:
        ctx.fail(f"expected {rank} start indices (one per dim of {label}, "
                 f"{ctx.types[0]}), got {n}")
    for i in range(first, len(ctx.types)):
        ctx.dtype_in(i, INT_DTYPES, "an integer dtype:")
        if ctx.types[i].rank != 0:
            ctx.fail(f"{ctx.operand_name(i)} has type {ctx.types[i]}, expected a rank-0 "
                     f"integer scalar")


def _clamped_starts(opname: str, x: np.ndarray, idx: Sequence[np.ndarray],
                    sizes: Sequence[int]) -> list[int]:
    if len(idx) != x.ndim:
        raise InterpretError(f"{opname}: got {len(idx)} start indices for an operand of shape "
                             f"{list(x.shape)}")
    starts = []
    for k, (i, d, s) in enumerate(zip(idx, x.shape, sizes, strict=True)):
        if not 0 <= s <= d:
            raise InterpretError(f"{opname}: size {s} of dim {k} is not within [0, {d}] "
                                 f"(operand shape {list(x.shape)})")
        starts.append(min(max(int(np.asarray(i)), 0), d - s))
    return starts


class Slice(OpDef):
    """Static-stride slice: result dim k holds ``x[start[k] : limit[k] : stride[k]]`` and
    has size ``ceildiv(limit[k] - start[k], stride[k])``. Requires
    ``0 <= start <= limit <= dim`` and ``stride >= 1``; ``start``/``limit`` may be
    symbolic. ``stride`` defaults to all ones (normalized to the explicit list)."""

    name = "slice"
    operands = ("x",)
    attrs = {"start": Attr(DIMS), "limit": Attr(DIMS),
             "stride": Attr(INTS, default=None, doc="defaults to all ones",
                            fill_like=("start", 1))}
    traits = TRAITS
    summary = "x[start:limit:stride]"
    fusion = Fusion.INDEXING
    view = True

    @classmethod
    def index_map(cls, op: Op, i: int, result_map: DimMap, kernel_rank: int) -> OperandMap:
        a, v, res = op.attrs, op.operands[0], op.results[0].shape
        return tuple(sized(compose(result_map[j], a["stride"][j], a["start"][j]),
                           v.shape[j] == res[j]) for j in range(v.rank)), {}

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        _check_lengths(ctx, attrs, ("start", "limit", "stride"))
        x = ctx.types[0]
        out = []
        for k, (d, s, lim, st) in enumerate(zip(x.shape, attrs["start"], attrs["limit"],
                                                attrs["stride"], strict=True)):
            if st < 1:
                ctx.fail(f"attribute stride[{k}] = {st} must be >= 1")
            if provably_negative(s):
                ctx.fail(f"attribute start[{k}] = {s} is negative")
            if provably_negative(lim - s):
                ctx.fail(f"attribute start[{k}] = {s} exceeds limit[{k}] = {lim}")
            if provably_negative(d - lim):
                ctx.fail(f"attribute limit[{k}] = {lim} exceeds dim {k} of operand #0 'x' "
                         f"({x})")
            out.append(ceildiv(lim - s, st))
        return [x.with_shape(out)]

    @classmethod
    def canonicalize(cls, op: Op, rw: Rewriter) -> Value | None:
        """The identity slice is its operand; a slice of a transpose slices first
        (``transpose(slice(x))``), so the slice and its transpose read the transpose's
        source in one kernel and a transpose whose users are all slices (a fused QKV
        projection split into heads) is never written out whole."""
        x = op.operands[0]
        a = op.attrs
        if (all(s == 0 for s in a["start"]) and tuple(a["limit"]) == x.shape
                and all(st == 1 for st in a["stride"])):
            return x
        inner = x.producer
        if inner is not None and inner.name == "transpose":
            perm = inner.attrs["permutation"]
            start, limit, stride = ([None] * len(perm) for _ in range(3))
            for i, p in enumerate(perm):  # result dim i of the transpose is source dim p
                start[p], limit[p], stride[p] = a["start"][i], a["limit"][i], a["stride"][i]
            sliced = rw.op(cls.name, inner.operands[0], start=start, limit=limit,
                           stride=stride)
            return rw.op("transpose", sliced, permutation=list(perm))
        return None

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        x = inputs[0]
        start, limit = env.shape(attrs["start"]), env.shape(attrs["limit"])
        stride = attrs["stride"] or (1,) * len(start)
        if not len(start) == len(limit) == len(stride) == x.ndim:
            raise InterpretError(f"{cls.name}: start/limit/stride do not match the operand "
                                 f"rank {x.ndim}")
        for k, (s, lim, d) in enumerate(zip(start, limit, x.shape, strict=True)):
            if not 0 <= s <= lim <= d:
                raise InterpretError(f"{cls.name}: dim {k} needs 0 <= start <= limit <= dim, "
                                     f"got start={s}, limit={lim}, dim={d} (operand shape "
                                     f"{list(x.shape)})")
        idx = tuple(slice(s, lim, st) for s, lim, st in zip(start, limit, stride, strict=True))
        return c_array(x[idx])


class DynamicSlice(OpDef):
    """A ``sizes``-shaped window of ``x`` at run-time start indices (one rank-0 integer
    tensor per dim). Each start is clamped to ``[0, dim - size]`` (HLO), so the window is
    always in bounds; ``0 <= size <= dim`` is required."""

    name = "dynamic_slice"
    operands = ("x", "*start_indices")
    attrs = {"sizes": Attr(DIMS)}
    traits = TRAITS
    summary = "window at run-time (clamped) offsets"

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        x = ctx.types[0]
        sizes = attrs["sizes"]
        _check_lengths(ctx, attrs, ("sizes",))
        check_dims_nonneg(ctx, sizes, "sizes")
        for k, (d, s) in enumerate(zip(x.shape, sizes, strict=True)):
            if provably_negative(d - s):
                ctx.fail(f"attribute sizes[{k}] = {s} exceeds dim {k} of operand #0 'x' ({x})")
        _check_indices(ctx, 1, x.rank, "operand #0 'x'")
        return [x.with_shape(sizes)]

    @classmethod
    def canonicalize(cls, op: Op, rw: Rewriter) -> Value | None:
        """A full-size window is ``x``: every start clamps to 0."""
        x = op.operands[0]
        return x if op.results[0].type == x.type else None

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        x, idx = inputs[0], inputs[1:]
        sizes = env.tensor_shape(attrs["sizes"])
        if len(sizes) != x.ndim:
            raise InterpretError(f"{cls.name}: sizes {list(sizes)} do not match the operand "
                                 f"shape {list(x.shape)}")
        starts = _clamped_starts(cls.name, x, idx, sizes)
        window = tuple(slice(s, s + n) for s, n in zip(starts, sizes, strict=True))
        return c_array(x[window])


class DynamicUpdateSlice(OpDef):
    """``x`` with the window at run-time start indices replaced by ``update``. Starts are
    clamped to ``[0, dim - update_dim]`` (HLO); update dims must not exceed ``x``'s. The
    result has ``x``'s type."""

    name = "dynamic_update_slice"
    operands = ("x", "update", "*start_indices")
    traits = TRAITS
    summary = "overwrite a window at run-time (clamped) offsets"

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        x, u = ctx.types[0], ctx.types[1]
        ctx.same_dtype(0, 1)
        ctx.rank(1, x.rank)
        for k, (d, s) in enumerate(zip(x.shape, u.shape, strict=True)):
            if provably_negative(d - s):
                ctx.fail(f"operand #1 'update' dim {k} ({s}) exceeds dim {k} of operand #0 "
                         f"'x' ({x})")
        _check_indices(ctx, 2, x.rank, "operand #0 'x'")
        return [x]

    @classmethod
    def canonicalize(cls, op: Op, rw: Rewriter) -> Value | None:
        """An update covering all of ``x`` is the result (every start clamps to 0)."""
        u = op.operands[1]
        return u if u.type == op.results[0].type else None

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        x, u, idx = inputs[0], inputs[1], inputs[2:]
        if u.ndim != x.ndim:
            raise InterpretError(f"{cls.name}: update shape {list(u.shape)} and operand shape "
                                 f"{list(x.shape)} differ in rank")
        if any(a > b for a, b in zip(u.shape, x.shape, strict=True)):
            raise InterpretError(f"{cls.name}: update shape {list(u.shape)} exceeds the operand "
                                 f"shape {list(x.shape)}")
        starts = _clamped_starts(cls.name, x, idx, u.shape)
        out = np.array(x, copy=True, order="C")
        out[tuple(slice(s, s + n) for s, n in zip(starts, u.shape, strict=True))] = u
        return out


class Concatenate(OpDef):
    """Join ``inputs`` (at least one, same dtype and rank >= 1) along ``dimension``; the
    other dims must be equal, and the result's ``dimension`` is the sum."""

    name = "concatenate"
    operands = ("*inputs",)
    min_variadic = 1
    attrs = {"dimension": Attr(INT)}
    traits = TRAITS
    summary = "join along one dim"
    fusion = Fusion.INDEXING
    guarded = True

    @classmethod
    def split_axis(cls, op: Op) -> int:
        return op.attrs["dimension"]

    @classmethod
    def index_map(cls, op: Op, i: int, result_map: DimMap, kernel_rank: int) -> OperandMap:
        axis, v = op.attrs["dimension"], op.operands[i]
        start = sum((w.shape[axis] for w in op.operands[:i]), start=v.shape[axis] * 0)
        res = op.results[0].shape
        return tuple(sized(compose(e, 1, -start), v.shape[axis] == res[axis]) if j == axis
                     else e for j, e in enumerate(result_map)), {}

    @classmethod
    def c_kernel(cls, op: Op, ctx: KernelContext) -> str:
        """A select chain on the index along the axis (each operand read in range only)."""
        args = [ctx.operand(i) for i in range(len(op.operands))]
        axis = op.attrs["dimension"]
        e = ctx.index(axis)
        out = args[-1]
        end = product([]) * 0
        ends = []
        for w in op.operands[:-1]:
            end = end + w.shape[axis]
            ends.append(end)
        for end, arg in reversed(list(zip(ends, args[:-1]))):
            out = f"(({e}) < {ctx.dim(end)} ? ({arg}) : {out})"
        return out

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        first = ctx.types[0]
        axis = attrs["dimension"]
        ctx.axis(axis, first.rank, "dimension")
        shape = list(first.shape)
        total = Expr.const(0)
        for i, t in enumerate(ctx.types):
            if i:
                ctx.same_dtype(0, i)
                ctx.rank(i, first.rank)
            for k, d in enumerate(t.shape):
                if k != axis:
                    shape[k] = ctx.unify(shape[k], d, f"{ctx.operand_name(i)} ({t}) dim {k}")
            total = total + t.shape[axis]
        shape[axis] = total
        return [first.with_shape(shape)]

    @classmethod
    def facts(cls, op: Op) -> Iterable[Fact]:
        axis = op.attrs["dimension"]
        out = op.results[0].shape
        for v in op.operands:
            for k, (a, b) in enumerate(zip(v.shape, out, strict=True)):
                if k != axis and a != b:
                    yield Eq(a, b)

    @classmethod
    def canonicalize(cls, op: Op, rw: Rewriter) -> Value | None:
        """One input is the result; inputs statically empty along the axis are dropped."""
        if len(op.operands) == 1:
            return op.operands[0]
        axis = op.attrs["dimension"]
        keep = [v for v in op.operands if v.shape[axis] != 0]
        if not keep or len(keep) == len(op.operands):
            return None
        if len(keep) == 1:
            return keep[0] if keep[0].type == op.results[0].type else None
        try:
            new = cls.build(keep, op.attrs)
        except VerifyError:
            return None
        if new.results[0].type != op.results[0].type:
            return None
        rw.created.append(new)
        return new.results[0]

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        axis = attrs["dimension"]
        first = inputs[0]
        for i, a in enumerate(inputs):
            if a.ndim != first.ndim or any(
                    k != axis and a.shape[k] != first.shape[k] for k in range(a.ndim)):
                raise InterpretError(f"{cls.name}: input #{i} has shape {list(a.shape)}, which "
                                     f"differs from input #0 {list(first.shape)} outside "
                                     f"dimension {axis}")
        return np.concatenate(inputs, axis=axis)


def pad_dim(d: Expr, low: Expr, high: Expr, interior: int) -> Expr:
    """Result dim of pad: ``low + high + d + max(d - 1, 0) * interior`` (XLA's and
    StableHLO's rule). The ``max`` matters for an empty operand: ``d = 0`` has no gaps to
    fill, and ``(d - 1) * interior`` would make the result smaller than ``low + high``, even
    negative. A symbolic ``d`` keeps the ``max`` as an opaque atom, so the rule holds for
    every run-time size."""
    if interior == 0:
        return low + high + d
    return low + high + d + smax(d - 1, 0) * interior


class Pad(OpDef):
    """Pad ``x`` with the rank-0 ``padding_value`` (same dtype): ``interior[k]`` values
    between neighbouring elements of dim k, then ``low[k]`` before and ``high[k]`` after.
    Negative ``low``/``high`` remove elements (HLO). Result dim k is
    ``low + high + d + max(d - 1, 0) * interior`` and must be >= 0 (:func:`pad_dim`).
    ``interior`` defaults to all zeros."""

    name = "pad"
    operands = ("x", "padding_value")
    attrs = {"low": Attr(DIMS), "high": Attr(DIMS),
             "interior": Attr(INTS, default=None, doc="defaults to all zeros",
                              fill_like=("low", 0))}
    traits = TRAITS
    summary = "edge and interior padding"
    fusion = Fusion.INDEXING
    guarded = True

    @classmethod
    def index_map(cls, op: Op, i: int, result_map: DimMap, kernel_rank: int) -> OperandMap:
        if i == 1:
            return (), {}
        a = op.attrs
        return tuple(compose(e, 1, -a["low"][j]) if not a["interior"][j] else
                     Quot(compose(e, 1, -a["low"][j]), a["interior"][j] + 1)
                     for j, e in enumerate(result_map)), {}

    @classmethod
    def c_kernel(cls, op: Op, ctx: KernelContext) -> str:
        """x where the index is inside the operand's placed elements, else the padding."""
        args = [ctx.operand(0), ctx.operand(1)]
        conds = []
        for j, (lo, d) in enumerate(zip(op.attrs["low"], op.operands[0].shape)):
            step = op.attrs["interior"][j] + 1
            if lo == 0 and op.attrs["high"][j] == 0 and step == 1:
                continue
            e = ctx.index(j)
            # interior padding: operand element k sits at lo + k * step
            conds.append(f"({e}) >= {ctx.dim(lo)} && ({e}) < {ctx.dim(lo + (d - 1) * step + 1)}"
                         + (f" && (({e}) - {ctx.dim(lo)}) % INT64_C({step}) == 0"
                            if step > 1 else ""))
        if not conds:
            return args[0]
        return f"(({' && '.join(conds)}) ? ({args[0]}) : ({args[1]}))"

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        x = ctx.types[0]
        ctx.same_dtype(0, 1)
        ctx.rank(1, 0)
        _check_lengths(ctx, attrs, ("low", "high", "interior"))
        out = []
        for k, (d, lo, hi, it) in enumerate(zip(x.shape, attrs["low"], attrs["high"],
                                                attrs["interior"], strict=True)):
            if it < 0:
                ctx.fail(f"attribute interior[{k}] = {it} is negative")
            r = pad_dim(d, lo, hi, it)
            if provably_negative(r):
                ctx.fail(f"dim {k} of operand #0 'x' ({x}) padded by low={lo}, high={hi}, "
                         f"interior={it} has negative size {r}")
            out.append(r)
        return [x.with_shape(out)]

    @classmethod
    def canonicalize(cls, op: Op, rw: Rewriter) -> Value | None:
        x = op.operands[0]
        a = op.attrs
        if (all(v == 0 for v in a["low"]) and all(v == 0 for v in a["high"])
                and all(v == 0 for v in a["interior"])):
            return x
        return None

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        x, pv = inputs
        low, high = env.shape(attrs["low"]), env.shape(attrs["high"])
        interior = attrs["interior"] or (0,) * len(low)
        if np.ndim(pv) != 0:
            raise InterpretError(f"{cls.name}: padding_value has shape {list(np.shape(pv))}, "
                                 f"expected a scalar")
        if not len(low) == len(high) == len(interior) == x.ndim:
            raise InterpretError(f"{cls.name}: low/high/interior do not match the operand "
                                 f"rank {x.ndim}")
        shape, dst, src = [], [], []
        for k, (d, lo, hi, it) in enumerate(zip(x.shape, low, high, interior, strict=True)):
            n = d + max(d - 1, 0) * it  # length after interior padding
            r = lo + hi + n
            if r < 0:
                raise InterpretError(f"{cls.name}: dim {k} (size {d}) padded by low={lo}, "
                                     f"high={hi}, interior={it} has negative size {r}")
            # result index j reads interior-padded position p = j - low
            p = np.arange(r) - lo
            ok = (p >= 0) & (p < n) & (p % (it + 1) == 0)
            shape.append(r)
            dst.append(np.nonzero(ok)[0])
            src.append(p[ok] // (it + 1))
        out = np.full(shape, np.asarray(pv, dtype=x.dtype), dtype=x.dtype)
        out[np.ix_(*dst)] = x[np.ix_(*src)]
        return out


class Reverse(OpDef):
    """Reverse the order of elements along each of ``dimensions`` (unique, in range)."""

    name = "reverse"
    operands = ("x",)
    attrs = {"dimensions": Attr(INTS)}
    traits = TRAITS
    summary = "flip along dims"
    fusion = Fusion.INDEXING
    view = True

    @classmethod
    def index_map(cls, op: Op, i: int, result_map: DimMap, kernel_rank: int) -> OperandMap:
        dims, v = op.attrs["dimensions"], op.operands[0]
        return tuple(compose(e, -1, v.shape[j] - 1) if j in dims else e
                     for j, e in enumerate(result_map)), {}

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        ctx.axes(attrs["dimensions"], ctx.types[0].rank, "dimensions")
        return [ctx.types[0]]

    @classmethod
    def canonicalize(cls, op: Op, rw: Rewriter) -> Value | None:
        """No dims (or only static size-1 dims): ``x``; reverse of reverse: the symmetric
        difference of their dims."""
        x = op.operands[0]
        dims = {k for k in op.attrs["dimensions"] if x.shape[k] != 1}
        if not dims:
            return x
        inner = x.producer
        if inner is not None and inner.opdef is cls:
            rest = tuple(sorted(dims ^ set(inner.attrs["dimensions"])))
            src = inner.operands[0]
            return rw.op(cls.name, src, dimensions=rest) if rest else src
        if len(dims) != len(op.attrs["dimensions"]):
            return rw.op(cls.name, x, dimensions=tuple(sorted(dims)))
        return None

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        x, dims = inputs[0], attrs["dimensions"]
        if any(not 0 <= k < x.ndim for k in dims):
            raise InterpretError(f"{cls.name}: dimensions {list(dims)} out of range for an "
                                 f"operand of shape {list(x.shape)}")
        return c_array(np.flip(x, axis=tuple(dims)))
