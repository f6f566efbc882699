"""Shape computations (folded at compile time), data movement and tensor creation."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from disc_core.bridge.known import as_object_array, known_array, normalize
from disc_core.bridge.windows import spread
from disc_core.dtypes import DType
from disc_core.ir import Value
from disc_core.symbolic import Expr, as_expr, ceildiv, floordiv, mod, product, smax, smin

from ..lowering import ConversionError, Lowering, core_dtype
from .registry import ALL_DTYPES, NUMERIC_DTYPES, Known, converter

MAX_KNOWN = 64  # fold integer tensors up to this many elements (shapes, indices)
SIZE_DTYPES = frozenset({tf.int32, tf.int64})


def _known_int(ctx: Lowering, t: tf.Tensor) -> np.ndarray | None:
    k = ctx.known(t)
    if k is None or not t.dtype.is_integer or k.size > MAX_KNOWN:
        return None
    return k


def _fold(fn: Callable[[Any, Any], Any], ctx: Lowering, op: tf.Operation) -> Known | None:
    """Integer arithmetic on known values (sizes), elementwise with broadcasting."""
    ks = [_known_int(ctx, t) for t in op.inputs]
    if any(k is None for k in ks):
        return None
    args = [as_object_array(k) for k in ks]  # type: ignore[arg-type]
    try:
        out = np.frompyfunc(lambda a, b: normalize(fn(as_expr(a), as_expr(b))), 2, 1)(*args)
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    return Known(np.asarray(out, dtype=object))


_FOLDERS: dict[str, Callable[[Any, Any], Any]] = {
    "AddV2": operator.add, "Add": operator.add, "Sub": operator.sub, "Mul": operator.mul,
    "FloorDiv": floordiv, "FloorMod": mod, "Maximum": lambda a, b: smax(a, b),
    "Minimum": lambda a, b: smin(a, b),
}


def fold_integer_op(ctx: Lowering, op: tf.Operation) -> Known | None:
    """Fold integer size arithmetic; the driver tries this before the converter."""
    fn = _FOLDERS.get(op.type)
    if fn is None or not op.outputs or not op.outputs[0].dtype.is_integer:
        if op.type in ("Prod", "Sum") and op.outputs[0].dtype.is_integer:
            return _fold_reduce(ctx, op)
        return None
    return _fold(fn, ctx, op)


def _fold_reduce(ctx: Lowering, op: tf.Operation) -> Known | None:
    k, axes = _known_int(ctx, op.inputs[0]), ctx.known(op.inputs[1])
    if k is None or axes is None or k.ndim != 1 or op.get_attr("keep_dims"):
        return None
    if [int(a) % 1 for a in np.asarray(axes).reshape(-1)] != [0]:
        return None
    vals = [as_expr(e) for e in k]
    if op.type == "Prod":
        return Known(known_array([product(vals)]).reshape(()))
    total = Expr.const(0)
    for v in vals:
        total = total + v
    return Known(known_array([total]).reshape(()))


# -- identity and constants -------------------------------------------------------------

@converter("Identity", "StopGradient", "Snapshot", "PreventGradient", dtypes=ALL_DTYPES)
def identity(ctx: Lowering, op: tf.Operation) -> Any:
    k = ctx.known(op.inputs[0])
    return Known(k) if k is not None else ctx.value(op.inputs[0])


@converter("IdentityN", dtypes=ALL_DTYPES)
def identity_n(ctx: Lowering, op: tf.Operation) -> list[Any]:
    return [Known(ctx.known(t)) if ctx.known(t) is not None else ctx.value(t)
            for t in op.inputs]


@converter("Const", dtypes=ALL_DTYPES)
def const(ctx: Lowering, op: tf.Operation) -> Known:
    return Known(tf.make_ndarray(op.get_attr("value")))


@converter("Shape", "Size", "Rank", dtypes=ALL_DTYPES)
def shape_of(ctx: Lowering, op: tf.Operation) -> Known:
    x = ctx.value(op.inputs[0])
    if op.type == "Shape":
        return Known(known_array(list(x.shape)))
    if op.type == "Size":
        return Known(known_array([product(x.shape)]).reshape(()))
    return Known(np.asarray(x.rank, dtype=np.int64))


@converter("ShapeN", dtypes=ALL_DTYPES)
def shape_n(ctx: Lowering, op: tf.Operation) -> list[Known]:
    return [Known(known_array(list(ctx.value(t).shape))) for t in op.inputs]


@converter("BroadcastArgs", "BroadcastGradientArgs", dtypes=SIZE_DTYPES)
def broadcast_args(ctx: Lowering, op: tf.Operation) -> Any:
    a, b = (ctx.dims(t, "a shape") for t in op.inputs)
    if op.type == "BroadcastArgs":
        return Known(known_array(list(ctx.broadcast_shape(a, b))))
    # the axes each side was broadcast along (summed by the gradient)
    rank = max(len(a), len(b))
    ra: list[int] = []
    rb: list[int] = []
    for k in range(rank):
        da = a[k - (rank - len(a))] if k >= rank - len(a) else None
        db = b[k - (rank - len(b))] if k >= rank - len(b) else None
        one = Expr.const(1)
        if da is None or (da == one and db != one):
            ra.append(k)
        if db is None or (db == one and da != one):
            rb.append(k)
        if da is not None and db is not None and da != db and one not in (da, db):
            assume = getattr(ctx, "assume_equal", None)
            if assume is not None:
                assume(da, db)  # the analysis may redo itself with da == db
            raise ConversionError(f"cannot tell which side of {da} vs {db} broadcasts",
                                  code="data_dependent_shape")
    return [Known(np.asarray(ra, dtype=np.int64)), Known(np.asarray(rb, dtype=np.int64))]


# -- creation -----------------------------------------------------------------------------

@converter("Fill", dtypes=ALL_DTYPES)
def fill(ctx: Lowering, op: tf.Operation) -> Any:
    """A small integer fill of a known value and static size is folded (shape arithmetic,
    e.g. the ones of a reduction gradient's kept-dims shape)."""
    dims = ctx.dims(op.inputs[0], "Fill dims")
    value = _known_int(ctx, op.inputs[1])
    if value is not None and all(d.is_const for d in dims) and \
            int(np.prod([d.value for d in dims])) <= MAX_KNOWN:
        return Known(np.full([d.value for d in dims], value.reshape(()).item(), dtype=object))
    return ctx.broadcast_to(ctx.value(op.inputs[1]), dims)


@converter("ZerosLike", "OnesLike", dtypes=ALL_DTYPES)
def zeros_like(ctx: Lowering, op: tf.Operation) -> Value:
    x = ctx.value(op.inputs[0])
    return ctx.full(0 if op.type == "ZerosLike" else 1, x.dtype, x.shape)


@converter("Range", dtypes=NUMERIC_DTYPES)
def range_(ctx: Lowering, op: tf.Operation) -> Any:
    dtype = core_dtype(op.get_attr("Tidx"))
    start, limit, delta = (ctx.known(t) for t in op.inputs)
    if start is None or limit is None or delta is None:
        raise ConversionError("Range bounds computed at run time from tensor data",
                              code="data_dependent_shape")
    s, lim, d = (normalize(np.asarray(k).reshape(-1)[0]) for k in (start, limit, delta))
    if not isinstance(lim, Expr):
        return Known(np.arange(s, lim, d).astype(dtype.np))
    if isinstance(s, Expr) or isinstance(d, Expr) or not dtype.is_int or d <= 0:
        raise ConversionError("Range with a dynamic limit needs static integer start and a "
                              "positive static delta", code="data_dependent_shape")
    n = smax(ceildiv(lim - s, d), 0)
    iota = ctx.op("iota", shape=[n], dimension=0, dtype=dtype)
    out = ctx.op("mul", iota, ctx.full(d, dtype, [n])) if d != 1 else iota
    return ctx.op("add", out, ctx.full(s, dtype, [n])) if s != 0 else out


@converter("OneHot", dtypes=ALL_DTYPES)
def one_hot(ctx: Lowering, op: tf.Operation) -> Value:
    idx = ctx.value(op.inputs[0])
    depth = ctx.known_ints(op.inputs[1], "OneHot depth")[0]
    on, off = ctx.value(op.inputs[2]), ctx.value(op.inputs[3])
    axis = op.get_attr("axis")
    axis = idx.rank if axis == -1 else axis
    shape = list(idx.shape[:axis]) + [as_expr(depth)] + list(idx.shape[axis:])
    iota = ctx.op("iota", shape=shape, dimension=axis, dtype=idx.dtype)
    dims = [i for i in range(len(shape)) if i != axis]
    b = ctx.op("broadcast_in_dim", idx, shape=shape, broadcast_dimensions=dims)
    hit = ctx.op("compare", iota, b, direction="eq")
    return ctx.op("select", hit, ctx.broadcast_to(on, shape), ctx.broadcast_to(off, shape))


@converter("MatrixBandPart", dtypes=ALL_DTYPES)
def matrix_band_part(ctx: Lowering, op: tf.Operation) -> Value:
    """Zeros outside a band of the last two dims (``tf.linalg.band_part``: ``tril`` is
    (-1, 0)): element [i, j] is kept where ``lower < 0 or i - j <= lower`` and ``upper < 0
    or j - i <= upper``. The band limits must be known when compiling (run-time values
    would change which comparisons exist)."""
    x = ctx.value(op.inputs[0])
    if x.rank < 2:
        raise ConversionError("band_part of a tensor of rank < 2")
    lower = ctx.static_ints(op.inputs[1], "num_lower")[0]
    upper = ctx.static_ints(op.inputs[2], "num_upper")[0]
    if lower < 0 and upper < 0:
        return x
    mn = list(x.shape[-2:])
    i = ctx.op("iota", shape=mn, dimension=0, dtype=DType.I64)
    j = ctx.op("iota", shape=mn, dimension=1, dtype=DType.I64)
    keep = None
    for limit, a, b in ((lower, i, j), (upper, j, i)):
        if limit < 0:
            continue
        within = ctx.op("compare", ctx.op("sub", a, b), ctx.full(limit, DType.I64, mn),
                        direction="le")
        keep = within if keep is None else ctx.op("and", keep, within)
    keep = ctx.broadcast_to(keep, x.shape)
    return ctx.op("select", keep, x, ctx.full(0, x.dtype, x.shape))


# -- shape changes ------------------------------------------------------------------------

def resolve_reshape(x_shape: Any, dims: list[Any]) -> list[Expr]:
    """Reshape target dims with one ``-1`` resolved symbolically."""
    out = [as_expr(d) for d in dims]
    holes = [i for i, d in enumerate(out) if d.is_const and d.value == -1]
    if len(holes) > 1:
        raise ConversionError("more than one -1 in a reshape")
    if holes:
        rest = product([d for i, d in enumerate(out) if i != holes[0]])
        total = product(x_shape)
        if rest.is_const and rest.value == 0:
            raise ConversionError("reshape with -1 and a zero-size dim")
        exact = floordiv(total, rest)
        if rest.is_const or not _has_division(exact):
            out[holes[0]] = exact
        else:
            # rest may be 0 at run time (TF rejects that reshape): never divide by zero
            out[holes[0]] = floordiv(total, smax(rest, 1))
    return out


def _has_division(e: Expr) -> bool:
    return any(getattr(atom, "fn", None) is not None for mono, _ in e.terms for atom in mono)


@converter("Reshape", dtypes=ALL_DTYPES)
def reshape(ctx: Lowering, op: tf.Operation) -> Any:
    k = ctx.known(op.inputs[0])
    dims = ctx.known_ints(op.inputs[1], "the target shape")
    if k is not None and k.size <= MAX_KNOWN and all(not isinstance(d, Expr) for d in dims):
        try:
            return Known(k.reshape([int(d) for d in dims]))
        except ValueError:
            pass
    x = ctx.value(op.inputs[0])
    return ctx.reshape(x, resolve_reshape(x.shape, dims))


@converter("ExpandDims", dtypes=ALL_DTYPES)
def expand_dims(ctx: Lowering, op: tf.Operation) -> Any:
    axis = ctx.static_ints(op.inputs[1], "axis")[0]
    k = ctx.known(op.inputs[0])
    if k is not None and k.size <= MAX_KNOWN:
        return Known(np.expand_dims(k, axis))
    x = ctx.value(op.inputs[0])
    axis = axis % (x.rank + 1)
    return ctx.reshape(x, list(x.shape[:axis]) + [1] + list(x.shape[axis:]))


@converter("Squeeze", dtypes=ALL_DTYPES)
def squeeze(ctx: Lowering, op: tf.Operation) -> Any:
    x = ctx.value(op.inputs[0])
    axes = [a % max(x.rank, 1) for a in op.get_attr("squeeze_dims")]
    if not axes:
        axes = [i for i, d in enumerate(x.shape) if d.is_const and d.value == 1]
        if any(not d.is_const for d in x.shape):
            raise ConversionError("Squeeze without axes of a tensor with dynamic dims (which "
                                  "of them are 1 is only known at run time)",
                                  code="data_dependent_shape")
    for a in axes:
        d = x.shape[a]
        if d.is_const and d.value != 1:
            raise ConversionError(f"cannot squeeze dim {a} of size {d}")
    k = ctx.known(op.inputs[0])
    if k is not None and k.size <= MAX_KNOWN:
        return Known(np.squeeze(k, axis=tuple(axes)) if axes else k)
    return ctx.reshape(x, [d for i, d in enumerate(x.shape) if i not in axes])


@converter("Transpose", dtypes=ALL_DTYPES)
def transpose(ctx: Lowering, op: tf.Operation) -> Value:
    x = ctx.value(op.inputs[0])
    perm = [p % max(x.rank, 1) for p in ctx.static_ints(op.inputs[1], "the permutation")]
    if perm == list(range(x.rank)):
        return x
    return ctx.op("transpose", x, permutation=perm)


@converter("ConcatV2", dtypes=ALL_DTYPES)
def concat(ctx: Lowering, op: tf.Operation) -> Any:
    ts = list(op.inputs[:-1])
    axis = ctx.static_ints(op.inputs[-1], "axis")[0]
    ks = [ctx.known(t) for t in ts]
    if all(k is not None and k.size <= MAX_KNOWN for k in ks) and op.outputs[0].dtype.is_integer:
        return Known(np.concatenate([as_object_array(k) for k in ks], axis=axis))  # type: ignore
    vs = [ctx.value(t) for t in ts]
    axis = axis % vs[0].rank
    vs = [v for v in vs if not (v.shape[axis].is_const and v.shape[axis].value == 0)] or vs[:1]
    return vs[0] if len(vs) == 1 else ctx.op("concatenate", *vs, dimension=axis)


@converter("Pack", dtypes=ALL_DTYPES)
def pack(ctx: Lowering, op: tf.Operation) -> Any:
    axis = op.get_attr("axis")
    ks = [ctx.known(t) for t in op.inputs]
    if all(k is not None and k.size <= MAX_KNOWN for k in ks) and op.outputs[0].dtype.is_integer:
        return Known(np.stack([as_object_array(k) for k in ks], axis=axis))  # type: ignore
    vs = [ctx.value(t) for t in op.inputs]
    axis = axis % (vs[0].rank + 1)
    parts = [ctx.reshape(v, list(v.shape[:axis]) + [1] + list(v.shape[axis:])) for v in vs]
    return parts[0] if len(parts) == 1 else ctx.op("concatenate", *parts, dimension=axis)


def _slice_axis(ctx: Lowering, x: Value, axis: int, start: Any, stop: Any) -> Value:
    starts = [as_expr(0)] * x.rank
    limits = list(x.shape)
    starts[axis], limits[axis] = as_expr(start), as_expr(stop)
    return ctx.op("slice", x, start=starts, limit=limits)


@converter("Unpack", dtypes=ALL_DTYPES)
def unpack(ctx: Lowering, op: tf.Operation) -> list[Value]:
    x = ctx.value(op.inputs[0])
    axis = op.get_attr("axis") % x.rank
    n = op.get_attr("num")
    rest = [d for i, d in enumerate(x.shape) if i != axis]
    return [ctx.reshape(_slice_axis(ctx, x, axis, i, i + 1), rest) for i in range(n)]


def _split(ctx: Lowering, x: Value, axis: int, sizes: list[Expr]) -> list[Value]:
    out, at = [], as_expr(0)
    for s in sizes:
        out.append(_slice_axis(ctx, x, axis, at, at + s))
        at = at + s
    return out


@converter("Split", dtypes=ALL_DTYPES)
def split(ctx: Lowering, op: tf.Operation) -> list[Value]:
    axis = ctx.static_ints(op.inputs[0], "axis")[0]
    x = ctx.value(op.inputs[1])
    axis %= x.rank
    n = op.get_attr("num_split")
    d = x.shape[axis]
    if d.is_const and d.value % n:
        raise ConversionError(f"dim {d} does not split into {n}")
    return _split(ctx, x, axis, [floordiv(d, n)] * n)


@converter("SplitV", dtypes=ALL_DTYPES)
def split_v(ctx: Lowering, op: tf.Operation) -> list[Value]:
    x = ctx.value(op.inputs[0])
    sizes = [as_expr(s) for s in ctx.known_ints(op.inputs[1], "size_splits")]
    axis = ctx.static_ints(op.inputs[2], "axis")[0] % x.rank
    holes = [i for i, s in enumerate(sizes) if s.is_const and s.value == -1]
    if len(holes) > 1:
        raise ConversionError("more than one -1 in size_splits")
    if holes:
        rest = Expr.const(0)
        for i, s in enumerate(sizes):
            if i != holes[0]:
                rest = rest + s
        sizes[holes[0]] = x.shape[axis] - rest
    return _split(ctx, x, axis, sizes)


# -- slicing ------------------------------------------------------------------------------

def _clamp_index(i: Any, d: Expr, lo: int, hi_offset: int) -> Expr:
    """A Python-style index into a dim of size d, clamped to [lo, d + hi_offset]."""
    if isinstance(i, Expr):
        return smin(i, d + hi_offset)
    if i < 0:
        return smax(d + i, Expr.const(lo)) if not d.is_const else \
            as_expr(max(d.value + i, lo))
    return smin(Expr.const(i), d + hi_offset) if not d.is_const else \
        as_expr(min(i, d.value + hi_offset))


class _SliceSpec:
    """TF's strided-slice encoding (masks, ellipsis, new axes) resolved per dim."""

    def __init__(self, ctx: Lowering, op: tf.Operation, shape: tuple[Expr, ...],
                 first: int = 1):
        begin = ctx.known_ints(op.inputs[first], "slice begin")
        end = ctx.known_ints(op.inputs[first + 1], "slice end")
        strides = ctx.static_ints(op.inputs[first + 2], "slice strides")
        bits = {m: op.get_attr(m) for m in ("begin_mask", "end_mask", "ellipsis_mask",
                                           "new_axis_mask", "shrink_axis_mask")}
        n, r = len(begin), len(shape)
        if 0 in strides:
            raise ConversionError("zero stride")

        def bit(m: str, i: int) -> bool:
            return bool(bits[m] >> i & 1)

        self.entries: list[tuple] = []
        dim = 0
        seen_ellipsis = False
        for i in range(n):
            if bit("ellipsis_mask", i) and not seen_ellipsis:
                seen_ellipsis = True
                after = sum(1 for j in range(i + 1, n) if not bit("new_axis_mask", j))
                for _ in range(r - dim - after):
                    self.entries.append(("slice", dim, 0, shape[dim], 1))
                    dim += 1
            elif bit("new_axis_mask", i):
                self.entries.append(("new",))
            else:
                if dim >= r:
                    raise ConversionError("slice spec longer than the tensor's rank")
                d = shape[dim]
                s = strides[i]
                if bit("shrink_axis_mask", i):
                    b = begin[i]
                    if isinstance(b, Expr):
                        start = b
                    else:
                        start = as_expr(b) if b >= 0 else d + b
                    self.entries.append(("shrink", dim, start))
                elif s > 0:
                    start = as_expr(0) if bit("begin_mask", i) else _clamp_index(begin[i], d, 0, 0)
                    stop = d if bit("end_mask", i) else _clamp_index(end[i], d, 0, 0)
                    zero = isinstance(start, Expr) and start.is_const and start.value == 0
                    self.entries.append(("slice", dim, start,
                                         stop if zero else smax(stop, start), s))
                else:  # negative stride: slice the reversed dim with -stride
                    last = d - 1
                    start = last if bit("begin_mask", i) else _clamp_index(begin[i], d, -1, -1)
                    stop = as_expr(-1) if bit("end_mask", i) else _clamp_index(end[i], d, -1, -1)
                    rs, re = last - start, last - stop  # reversed coordinates
                    self.entries.append(("rslice", dim, rs, smax(re, rs), -s))
                dim += 1
        while dim < r:
            self.entries.append(("slice", dim, 0, shape[dim], 1))
            dim += 1

    def apply(self, ctx: Lowering, x: Value) -> Value:
        rev = [e[1] for e in self.entries if e[0] == "rslice"]
        if rev:
            x = ctx.op("reverse", x, dimensions=rev)
        starts, limits, strides = [as_expr(0)] * x.rank, list(x.shape), [1] * x.rank
        final: list[Expr] = []
        for e in self.entries:
            if e[0] == "new":
                final.append(as_expr(1))
            elif e[0] == "shrink":
                starts[e[1]], limits[e[1]] = e[2], e[2] + 1
            else:
                _, dim, start, stop, s = e
                starts[dim], limits[dim], strides[dim] = as_expr(start), as_expr(stop), s
                final.append(ceildiv(as_expr(stop) - as_expr(start), s))
        trivial = all(st.is_const and st.value == 0 for st in starts) and \
            tuple(limits) == tuple(x.shape) and all(s == 1 for s in strides)
        y = x if trivial else ctx.op("slice", x, start=starts, limit=limits, stride=strides)
        return ctx.reshape(y, final)


@converter("StridedSlice", dtypes=ALL_DTYPES)
def strided_slice(ctx: Lowering, op: tf.Operation) -> Any:
    k = _known_int(ctx, op.inputs[0])
    if k is not None and k.ndim == 1:
        try:
            begin, end, strides = (ctx.static_ints(t, "slice") for t in op.inputs[1:])
        except ConversionError:
            begin = []
        if begin and len(begin) == 1 and not op.get_attr("ellipsis_mask") and \
                not op.get_attr("new_axis_mask"):
            b = None if op.get_attr("begin_mask") & 1 else begin[0]
            e = None if op.get_attr("end_mask") & 1 else end[0]
            if op.get_attr("shrink_axis_mask") & 1:
                return Known(np.asarray(as_object_array(k)[begin[0]], dtype=object).reshape(()))
            return Known(as_object_array(k)[b:e:strides[0]])
    x = ctx.value(op.inputs[0])
    return _SliceSpec(ctx, op, tuple(x.shape)).apply(ctx, x)


@converter("StridedSliceGrad", dtypes=ALL_DTYPES)
def strided_slice_grad(ctx: Lowering, op: tf.Operation) -> Value:
    """Zeros of ``shape`` with ``dy`` written where the forward slice read: a pad."""
    shape = ctx.dims(op.inputs[0], "the forward input's shape")
    dy = ctx.value(op.inputs[4])
    spec = _SliceSpec(ctx, op, tuple(shape))
    if any(e[0] == "rslice" for e in spec.entries):
        raise ConversionError("gradient of a negative-stride slice")
    sliced: list[Expr] = []
    spans: list[tuple[int, Expr, int]] = []  # (dim, start, stride) per sliced dim
    for e in spec.entries:
        if e[0] == "new":
            continue
        if e[0] == "shrink":
            sliced.append(as_expr(1))
            spans.append((e[1], as_expr(e[2]), 1))
            continue
        _, dim, start, stop, st = e
        sliced.append(ceildiv(as_expr(stop) - as_expr(start), st))
        spans.append((dim, as_expr(start), st))
    dy = ctx.reshape(dy, sliced)
    zero = ctx.const(0, dy.dtype)
    low, high = [], []
    for axis, (dim, start, st) in enumerate(spans):
        room = shape[dim] - start
        dy = spread(ctx, dy, zero, axis, st, room)  # a stride: st - 1 zeros after each row
        low.append(start)
        high.append(room - dy.shape[axis])
    return ctx.op("pad", dy, zero, low=low, high=high)


@converter("Slice", dtypes=ALL_DTYPES)
def slice_(ctx: Lowering, op: tf.Operation) -> Any:
    begin = ctx.known_ints(op.inputs[1], "slice begin")
    size = ctx.known_ints(op.inputs[2], "slice size")
    k = _known_int(ctx, op.inputs[0])
    if k is not None and k.ndim == len(begin) == len(size) and k.ndim >= 1 and \
            not any(isinstance(e, Expr) for e in begin + size):
        # any rank: a Pad's gradient slices its [rank, 2] paddings constant, and folding
        # that keeps the gradient's crop static instead of a data-dependent Slice
        index = tuple(slice(b, None if n == -1 else b + n) for b, n in zip(begin, size))
        return Known(as_object_array(k)[index])
    x = ctx.value(op.inputs[0])
    starts = [as_expr(b) for b in begin]
    limits = [x.shape[i] if (not isinstance(s, Expr) and s == -1) else starts[i] + s
              for i, s in enumerate(size)]
    return ctx.op("slice", x, start=starts, limit=limits)


@converter("GatherV2", dtypes=ALL_DTYPES)
def gather(ctx: Lowering, op: tf.Operation) -> Any:
    axis = ctx.static_ints(op.inputs[2], "axis")[0]
    batch_dims = op.get_attr("batch_dims")
    k, ki = _known_int(ctx, op.inputs[0]), ctx.known(op.inputs[1])
    if k is not None and k.ndim == 1 and ki is not None and ki.dtype != object and not batch_dims:
        return Known(as_object_array(k)[np.asarray(ki)])
    x, idx = ctx.value(op.inputs[0]), ctx.value(op.inputs[1])
    if idx.dtype not in (DType.I32, DType.I64):
        raise ConversionError(f"indices of {idx.dtype}", code="unsupported_dtype")
    axis %= x.rank
    if batch_dims < 0:
        batch_dims += idx.rank
    return ctx.op("gather", x, idx, axis=axis, batch_dims=batch_dims)


@converter("Pad", "PadV2", dtypes=ALL_DTYPES)
def pad(ctx: Lowering, op: tf.Operation) -> Value:
    x = ctx.value(op.inputs[0])
    paddings = ctx.known_ints(op.inputs[1], "paddings")
    if len(paddings) != 2 * x.rank:
        raise ConversionError("paddings must be [rank, 2]")
    value = ctx.value(op.inputs[2]) if op.type == "PadV2" else ctx.const(0, x.dtype)
    return ctx.op("pad", x, value, low=[as_expr(p) for p in paddings[0::2]],
                  high=[as_expr(p) for p in paddings[1::2]])


@converter("Tile", dtypes=ALL_DTYPES)
def tile(ctx: Lowering, op: tf.Operation) -> Value:
    x = ctx.value(op.inputs[0])
    reps = [as_expr(m) for m in ctx.known_ints(op.inputs[1], "multiples")]
    if len(reps) != x.rank:
        raise ConversionError("multiples must have one entry per dim")
    if all(m.is_const and m.value == 1 for m in reps):
        return x
    wide: list[Expr] = []
    for m, d in zip(reps, x.shape):
        wide += [m, d]
    b = ctx.op("broadcast_in_dim", x, shape=wide,
               broadcast_dimensions=[2 * i + 1 for i in range(x.rank)])
    return ctx.reshape(b, [m * d for m, d in zip(reps, x.shape)])


@converter("BroadcastTo", dtypes=ALL_DTYPES)
def broadcast_to(ctx: Lowering, op: tf.Operation) -> Value:
    return ctx.broadcast_to(ctx.value(op.inputs[0]), ctx.dims(op.inputs[1], "the shape"))


@converter("Select", dtypes=ALL_DTYPES)
def select(ctx: Lowering, op: tf.Operation) -> Value:
    c, a, b = (ctx.value(t) for t in op.inputs)
    a, b = ctx.broadcast_all(a, b)
    if c.rank == 1 and a.rank > 1:
        c = ctx.op("broadcast_in_dim", c, shape=list(a.shape), broadcast_dimensions=[0])
    elif c.rank:
        c = ctx.broadcast_to(c, a.shape)
    return ctx.op("select", c, a, b)


@converter("SelectV2", dtypes=ALL_DTYPES)
def select_v2(ctx: Lowering, op: tf.Operation) -> Value:
    c, a, b = ctx.broadcast_all(*(ctx.value(t) for t in op.inputs))
    return ctx.op("select", c, a, b)




@converter("InvertPermutation", dtypes=SIZE_DTYPES)
def invert_permutation(ctx: Lowering, op: tf.Operation) -> Known:
    """Folded: the permutation of a transpose's gradient is known when the forward's is."""
    perm = ctx.static_ints(op.inputs[0], "the permutation")
    if sorted(perm) != list(range(len(perm))):
        raise ConversionError(f"{perm} is not a permutation")
    return Known(np.argsort(np.asarray(perm)).astype(op.outputs[0].dtype.as_numpy_dtype))


@converter("UnsortedSegmentSum", dtypes=NUMERIC_DTYPES)
def unsorted_segment_sum(ctx: Lowering, op: tf.Operation) -> Value:
    """``scatter_add`` into zeros of ``[num_segments, ...]``. TensorFlow drops ids outside
    ``[0, num_segments)``; scatter_add clamps them, so their rows are zeroed first."""
    data, ids = ctx.value(op.inputs[0]), ctx.value(op.inputs[1])
    n = ctx.known_ints(op.inputs[2], "num_segments")
    if len(n) != 1:
        raise ConversionError("num_segments must be a scalar")
    if ids.rank > data.rank or any(
            a != b and not ((a.is_const or a.is_symbol) and (b.is_const or b.is_symbol))
            for a, b in zip(data.shape[:ids.rank], ids.shape)):
        # different plain symbols are taken as equal (TF requires it; the module checks)
        raise ConversionError(f"segment ids {ids.shape} do not prefix data {data.shape}")
    ids = ctx.reshape(ids, list(data.shape[:ids.rank])) if ids.rank else ids
    rest = list(data.shape[ids.rank:])
    out_shape = [as_expr(n[0])] + rest
    count = ctx.size_value(as_expr(n[0]), ids.dtype)
    ok = ctx.op("and", ctx.op("compare", ids, ctx.full(0, ids.dtype, ids.shape),
                              direction="ge"),
                ctx.op("compare", ids, ctx.broadcast_to(count, ids.shape), direction="lt"))
    ok = ctx.op("broadcast_in_dim", ok, shape=list(data.shape),
                broadcast_dimensions=list(range(ids.rank)))
    data = ctx.op("select", ok, data, ctx.full(0, data.dtype, data.shape))
    return ctx.op("scatter_add", ctx.full(0, data.dtype, out_shape), ids, data, axis=0)


@converter("DynamicStitch", "ParallelDynamicStitch", dtypes=SIZE_DTYPES)
def dynamic_stitch(ctx: Lowering, op: tf.Operation) -> Known:
    """Folded on known values only: TF's gradient of a reduction builds the kept-dims
    shape with it (``merged[indices[m][i]] = data[m][i]``, later pieces winning)."""
    n = len(op.inputs) // 2
    merged: dict[int, Any] = {}
    for idx_t, data_t in zip(op.inputs[:n], op.inputs[n:]):
        idx = ctx.static_ints(idx_t, "DynamicStitch indices")
        data = ctx.known_ints(data_t, "DynamicStitch data")
        if len(idx) != len(data):
            raise ConversionError("DynamicStitch with non-scalar pieces")
        merged.update(zip(idx, data))
    if sorted(merged) != list(range(len(merged))):
        raise ConversionError(f"DynamicStitch indices {sorted(merged)} leave gaps")
    return Known(known_array([merged[i] for i in range(len(merged))]))


@converter("ConcatOffset", dtypes=SIZE_DTYPES)
def concat_offset(ctx: Lowering, op: tf.Operation) -> list[Known]:
    """Where each concatenated piece starts (the gradient of ``ConcatV2`` slices its
    pieces back out at these offsets): zeros but along the axis, where piece ``i`` starts
    at the sum of the earlier pieces' sizes. Folded, so those slices stay static."""
    axis = ctx.static_ints(op.inputs[0], "ConcatOffset concat_dim")[0]
    shapes = [ctx.known_ints(t, "ConcatOffset shape") for t in op.inputs[1:]]
    rank = len(shapes[0])
    if not -rank <= axis < rank or any(len(s) != rank for s in shapes):
        raise ConversionError(f"ConcatOffset of shapes {shapes} along {axis}")
    axis %= rank
    out, start = [], Expr.const(0)
    for s in shapes:
        offset: list[Any] = [0] * rank
        offset[axis] = start
        out.append(Known(known_array(offset)))
        start = start + as_expr(s[axis])
    return out
