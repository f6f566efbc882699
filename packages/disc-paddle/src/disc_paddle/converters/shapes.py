"""Shape computations (folded at compile time), constants, data movement, creation and
indexing, and their gradients.

Paddle programs compute shapes at run time (``shape64 -> slice -> stack -> reshape``);
small integer values whose value is known at compile time (a :class:`Known`: numbers or
symbolic sizes) are folded here, so a reshape target or a slice bound is a list of
symbolic dims when the consumer reads it. Everything else is data movement expressed with
the core's ``slice``/``pad``/``concatenate``/``reshape``/``gather``/``scatter_add`` ops.

Two conventions of Paddle's that the converters follow:

* slice bounds are Python's: negative counts from the end, then clamped to the dim;
  ``2**31 - 1`` (what ``x[1:]`` passes as the end) means "to the end". A bound that is a
  symbolic size is taken as is when provably >= 0 (a sum of sizes) or as counting from
  the end when provably <= 0; any other symbolic bound (``S - 1`` may be -1, which
  Paddle would wrap) is refused.
* an IntArray operand (a shape, axes, sections) must be known at compile time;
  otherwise the op stays in Paddle (``data_dependent_shape``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from disc_core.bridge.known import as_object_array, known_array
from disc_core.bridge.windows import spread
from disc_core.dtypes import DType
from disc_core.ir import Value
from disc_core.symbolic import Expr, as_expr, ceildiv, floordiv, mod, product, smax, smin

from ..lowering import ConversionError, Lowering, core_dtype
from .registry import ALL_DTYPES, NUMERIC_DTYPES, Known, Vector, converter

MAX_KNOWN = 64  # fold integer tensors up to this many elements (shapes, indices)
#: a slice bound at least this large means "to the end" (Paddle's ``x[1:]`` passes
#: INT32_MAX; a dim is never that large)
_TO_END = 2**31 - 1
_INDEX_DTYPES = (DType.I32, DType.I64)


# -- helpers -------------------------------------------------------------------------------

def _small_known(ctx: Lowering, v: Any) -> np.ndarray | None:
    """The known value of ``v`` when it is small enough to fold."""
    k = ctx.known(v)
    return k if k is not None and k.size <= MAX_KNOWN else None


def _is_int_known(k: np.ndarray) -> bool:
    return k.dtype == object or np.issubdtype(k.dtype, np.integer)


def _fit(k: np.ndarray, op: Any) -> Known:
    """A folded value, numeric in the result's dtype when it holds no symbolic size."""
    if k.dtype == object and all(not isinstance(e, Expr) for e in k.reshape(-1)):
        k = np.asarray(k.tolist(), dtype=core_dtype(op.result(0).dtype).np).reshape(k.shape)
    return Known(k)


def _axis(a: int, rank: int, what: str = "axis") -> int:
    """A Paddle axis (negative counts from the end) checked against ``rank``."""
    if not -max(rank, 1) <= a < max(rank, 1):
        raise ConversionError(f"{what} {a} is out of range for rank {rank}")
    return a % max(rank, 1)


def _known_axis(ctx: Lowering, op: Any, index: int, rank: int) -> int:
    """An axis passed as a (one-element) operand."""
    a = ctx.known_scalar(ctx.operand(op, index), "the axis")
    if isinstance(a, Expr):
        raise ConversionError("the axis depends on dynamic sizes", code="data_dependent_shape")
    return _axis(int(a), rank)


def _one(op: Any, v: Any) -> Any:
    """``v`` for the op's first result, None for the others (``xshape`` of old ops)."""
    return v if op.num_results() == 1 else [v] + [None] * (op.num_results() - 1)


def _nonneg(e: Expr) -> bool:
    """Provably >= 0: sizes are, and so are sums with no negative coefficient of atoms
    built from such values."""
    for mono, coeff in e.terms:
        if coeff < 0:
            return False
        for atom in mono:
            fn = getattr(atom, "fn", None)
            if fn is None:
                continue
            args = [as_expr(a) for a in atom.args]
            ok = any(map(_nonneg, args)) if fn == "max" else all(map(_nonneg, args))
            if not ok:
                return False
    return True


def _dims(ctx: Lowering, values: Sequence[Any]) -> list[Expr]:
    return [as_expr(v) for v in values]


def _slice_axis(ctx: Lowering, x: Value, axis: int, start: Any, stop: Any) -> Value:
    starts = [as_expr(0)] * x.rank
    limits = list(x.shape)
    starts[axis], limits[axis] = as_expr(start), as_expr(stop)
    return ctx.op("slice", x, start=starts, limit=limits)


def _zero(ctx: Lowering, dtype: DType) -> Value:
    return ctx.const(0, dtype)


def _result_dtype(op: Any, index: int = 0) -> DType:
    return core_dtype(op.result(index).dtype)


# -- constants and shape values ------------------------------------------------------------

@converter("pd_op.full_int_array", dtypes=ALL_DTYPES)
def full_int_array(ctx: Lowering, op: Any) -> Known:
    vals = [int(x) for x in ctx.attr(op, "value")]
    return Known(np.asarray(vals, dtype=_result_dtype(op).np))


@converter("pd_op.full", dtypes=ALL_DTYPES)
def full(ctx: Lowering, op: Any) -> Any:
    shape = [int(d) for d in ctx.attr(op, "shape")]
    dtype = _result_dtype(op)
    value = ctx.attr(op, "value")
    if int(np.prod(shape, dtype=np.int64)) <= MAX_KNOWN:
        return Known(np.full(shape, value, dtype=dtype.np))
    return ctx.full(value, dtype, shape)


@converter("pd_op.assign", dtypes=ALL_DTYPES)
def assign(ctx: Lowering, op: Any) -> Any:
    k = ctx.known(ctx.operand(op, 0))
    return Known(k) if k is not None else ctx.input(op, 0)


@converter("pd_op.shape64", "pd_op.shape", dtypes=ALL_DTYPES)
def shape(ctx: Lowering, op: Any) -> Known:
    x = ctx.input(op, 0)
    return Known(known_array(list(x.shape)))


@converter("pd_op.cast", dtypes=ALL_DTYPES)
def cast(ctx: Lowering, op: Any) -> Any:
    """A known value stays known (an integer size cast to int32/int64 keeps its symbols;
    numbers are converted now); anything else is a ``convert``."""
    dtype = _result_dtype(op)
    k = _small_known(ctx, ctx.operand(op, 0))
    if k is not None:
        if k.dtype != object:
            with np.errstate(all="ignore"):
                return Known(k.astype(dtype.np))
        if all(not isinstance(e, Expr) for e in k.reshape(-1)):
            return Known(np.asarray(k.tolist()).astype(dtype.np).reshape(k.shape))
        if dtype in _INDEX_DTYPES:
            return Known(k)
    return ctx.cast(ctx.input(op, 0), dtype)


# -- reshapes ------------------------------------------------------------------------------

def _has_division(e: Expr) -> bool:
    return any(getattr(atom, "fn", None) is not None for mono, _ in e.terms for atom in mono)


def resolve_reshape(x_shape: Sequence[Expr], dims: list[Any]) -> list[Expr]:
    """Paddle's reshape target: ``0`` copies the input dim at that index, one ``-1`` is
    inferred from the element count."""
    out: list[Expr] = []
    for i, d in enumerate(dims):
        if not isinstance(d, Expr) and d == 0:
            if i >= len(x_shape):
                raise ConversionError(f"reshape target {dims}: 0 at index {i} has no input dim")
            out.append(x_shape[i])
        elif not isinstance(d, Expr) and d < -1:
            raise ConversionError(f"reshape target {dims} has a negative size")
        else:
            out.append(as_expr(d))
    holes = [i for i, d in enumerate(out) if d.is_const and d.value == -1]
    if len(holes) > 1:
        raise ConversionError(f"reshape target {dims} has more than one -1")
    if holes:
        rest = product([d for i, d in enumerate(out) if i != holes[0]])
        if rest.is_const and rest.value == 0:
            raise ConversionError(f"reshape target {dims}: -1 next to a zero-size dim")
        exact = floordiv(product(x_shape), rest)
        # rest may be 0 at run time (Paddle rejects that reshape): never divide by zero
        out[holes[0]] = exact if rest.is_const or not _has_division(exact) else \
            floordiv(product(x_shape), smax(rest, 1))
    return out


@converter("pd_op.reshape", dtypes=ALL_DTYPES)
def reshape(ctx: Lowering, op: Any) -> Any:
    dims = ctx.int_list(op, 1, "shape", "the reshape target")
    k = _small_known(ctx, ctx.operand(op, 0))
    if k is not None and all(not isinstance(d, Expr) for d in dims):
        target = [k.shape[i] if d == 0 else d for i, d in enumerate(dims)]
        try:
            return _one(op, Known(k.reshape(target)))
        except ValueError:
            pass
    x = ctx.input(op, 0)
    return _one(op, ctx.reshape(x, resolve_reshape(x.shape, dims)))


def _to_shape_of(ctx: Lowering, op: Any, x_index: int, g_index: int) -> Value:
    """A reshape gradient: the output gradient in the forward input's shape."""
    return ctx.reshape(ctx.input(op, g_index), list(ctx.input(op, x_index).shape))


@converter("pd_op.reshape_grad", "pd_op.flatten_grad", "pd_op.squeeze_grad",
           "pd_op.unsqueeze_grad", dtypes=ALL_DTYPES)
def reshape_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, out_grad, ...): x is the forward input."""
    return _to_shape_of(ctx, op, 0, 1)


def squeeze_dims(shape: Sequence[Expr], axes: list[Any]) -> list[int]:
    """The dims Paddle's squeeze removes: with no axes, the static size-1 dims (a dynamic
    dim that is 1 at run time would be removed too: refused); listed axes that are 1, or
    dynamic (PIR's type assumes they are removed; the reshape checks it at run time)."""
    rank = len(shape)
    if not axes:
        if any(not d.is_const for d in shape):
            raise ConversionError("squeeze without axes of a tensor with dynamic dims (which "
                                  "of them are 1 is only known at run time)",
                                  code="data_dependent_shape")
        return [i for i, d in enumerate(shape) if d.value == 1]
    if any(isinstance(a, Expr) for a in axes):
        raise ConversionError("squeeze axes depend on dynamic sizes")
    out = set()
    for a in axes:
        i = _axis(int(a), rank)
        d = shape[i]
        if not d.is_const or d.value == 1:
            out.add(i)
    return sorted(out)


@converter("pd_op.squeeze", dtypes=ALL_DTYPES)
def squeeze(ctx: Lowering, op: Any) -> Any:
    axes = ctx.int_list(op, 1, "axis", "squeeze axes")
    k = _small_known(ctx, ctx.operand(op, 0))
    if k is not None:
        drop = squeeze_dims([as_expr(d) for d in k.shape], axes)
        return _one(op, Known(k.reshape([d for i, d in enumerate(k.shape) if i not in drop])))
    x = ctx.input(op, 0)
    drop = squeeze_dims(x.shape, axes)
    return _one(op, ctx.reshape(x, [d for i, d in enumerate(x.shape) if i not in drop]))


def unsqueeze_shape(shape: Sequence[Any], axes: list[Any]) -> list[Any]:
    """Paddle's unsqueeze: each axis is inserted in turn into the growing shape (negative
    counts from the end of the shape so far, plus one); earlier new dims move right."""
    if any(isinstance(a, Expr) for a in axes):
        raise ConversionError("unsqueeze axes depend on dynamic sizes")
    rank = len(shape) + len(axes)
    marks = [0] * (rank + 1)
    cur = len(shape)
    for a in axes:
        a = int(a)
        pos = a + cur + 1 if a < 0 else a
        if not 0 <= pos <= cur:
            raise ConversionError(f"unsqueeze axis {a} is out of range for rank {cur}")
        for i in range(cur, pos - 1, -1):
            if marks[i]:
                marks[i + 1], marks[i] = 1, 0
        marks[pos] = 1
        cur += 1
    src = iter(shape)
    return [1 if marks[i] else next(src) for i in range(rank)]


@converter("pd_op.unsqueeze", dtypes=ALL_DTYPES)
def unsqueeze(ctx: Lowering, op: Any) -> Any:
    axes = ctx.int_list(op, 1, "axis", "unsqueeze axes")
    k = _small_known(ctx, ctx.operand(op, 0))
    if k is not None:
        return _one(op, Known(k.reshape(unsqueeze_shape(list(k.shape), axes))))
    x = ctx.input(op, 0)
    return _one(op, ctx.reshape(x, unsqueeze_shape(list(x.shape), axes)))


@converter("pd_op.flatten", dtypes=ALL_DTYPES)
def flatten(ctx: Lowering, op: Any) -> Any:
    x = ctx.input(op, 0)
    if x.rank == 0:
        return _one(op, ctx.reshape(x, [1]))
    start = _axis(int(ctx.attr(op, "start_axis", 0)), x.rank, "start_axis")
    stop = _axis(int(ctx.attr(op, "stop_axis", -1)), x.rank, "stop_axis")
    if start > stop:
        raise ConversionError(f"flatten start_axis {start} > stop_axis {stop}")
    dims = list(x.shape[:start]) + [product(x.shape[start:stop + 1])] + list(x.shape[stop + 1:])
    return _one(op, ctx.reshape(x, dims))


@converter("pd_op.transpose", dtypes=ALL_DTYPES)
def transpose(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    perm = [_axis(int(p), x.rank, "perm entry") for p in ctx.attr(op, "perm")]
    if sorted(perm) != list(range(x.rank)):
        raise ConversionError(f"transpose perm {perm} is not a permutation of rank {x.rank}")
    return x if perm == list(range(x.rank)) else ctx.op("transpose", x, permutation=perm)


@converter("pd_op.transpose_grad", dtypes=ALL_DTYPES)
def transpose_grad(ctx: Lowering, op: Any) -> Value:
    g = ctx.input(op, 0)
    perm = [_axis(int(p), g.rank, "perm entry") for p in ctx.attr(op, "perm")]
    if sorted(perm) != list(range(g.rank)):
        raise ConversionError(f"transpose perm {perm} is not a permutation of rank {g.rank}")
    inv = [int(i) for i in np.argsort(perm)]
    return g if inv == list(range(g.rank)) else ctx.op("transpose", g, permutation=inv)


# -- slicing -------------------------------------------------------------------------------

def _forward_bound(i: Any, d: Expr) -> Expr:
    """A Python slice bound for a positive step, clamped to ``[0, d]``."""
    if isinstance(i, Expr):
        if _nonneg(i):
            return smin(i, d)
        if _nonneg(-i):
            return smax(d + i, 0)
        raise ConversionError(f"slice bound {i} may be negative at run time (Paddle counts a "
                              "negative bound from the end)", code="data_dependent_shape")
    i = int(i)
    if i >= _TO_END:
        return d
    if i <= -_TO_END or i == 0:
        return as_expr(0)
    return smax(d + i, 0) if i < 0 else smin(as_expr(i), d)


def _backward_bound(i: Any, d: Expr) -> Expr:
    """A Python slice bound for a negative step, clamped to ``[-1, d - 1]``."""
    if isinstance(i, Expr):
        raise ConversionError("a negative-step slice with symbolic bounds",
                              code="data_dependent_shape")
    i = int(i)
    if i >= _TO_END:
        return d - 1
    if i <= -_TO_END:
        return as_expr(-1)
    return smax(d + i, -1) if i < 0 else smin(as_expr(i), d - 1)


class _Slicing:
    """A slice of every dim: ``(start, limit, step)`` in the coordinates of ``x`` with the
    ``reversed`` dims flipped (a negative step is a positive one on the flipped dim)."""

    def __init__(self, shape: Sequence[Expr], axes: Sequence[int], starts: Sequence[Any],
                 ends: Sequence[Any], steps: Sequence[int] | None = None):
        rank = len(shape)
        steps = list(steps) if steps is not None else [1] * len(axes)
        if not len(axes) == len(starts) == len(ends) == len(steps):
            raise ConversionError(f"slice axes {list(axes)}, starts {list(starts)}, ends "
                                  f"{list(ends)} and steps {steps} differ in length")
        self.shape = list(shape)
        self.start = [as_expr(0)] * rank
        self.limit = list(shape)
        self.step = [1] * rank
        self.reversed: list[int] = []
        for a, s, e, st in zip(axes, starts, ends, steps):
            a = _axis(int(a), rank)
            d = shape[a]
            st = int(st)
            if st == 0:
                raise ConversionError("slice step 0")
            if st > 0:
                lo, hi = _forward_bound(s, d), _forward_bound(e, d)
            else:  # reversed coordinates: element j of the flipped dim is d - 1 - j
                lo, hi = d - 1 - _backward_bound(s, d), d - 1 - _backward_bound(e, d)
                self.reversed.append(a)
            span = hi - lo
            if span.is_const:
                hi = lo if span.value < 0 else hi
            else:
                hi = smax(hi, lo)
            self.start[a], self.limit[a], self.step[a] = lo, hi, abs(st)

    def sliced_shape(self) -> list[Expr]:
        return [ceildiv(hi - lo, st) for lo, hi, st in zip(self.start, self.limit, self.step)]

    def apply(self, ctx: Lowering, x: Value) -> Value:
        if self.reversed:
            x = ctx.op("reverse", x, dimensions=sorted(self.reversed))
        trivial = all(s.is_const and s.value == 0 for s in self.start) and \
            tuple(self.limit) == tuple(x.shape) and all(s == 1 for s in self.step)
        if trivial:
            return x
        return ctx.op("slice", x, start=self.start, limit=self.limit, stride=self.step)

    def grad(self, ctx: Lowering, dy: Value) -> Value:
        """Zeros of the input's shape with ``dy`` (in the sliced shape) where the slice
        read. A step ``s`` spreads each row to ``s`` rows (s - 1 zeros after it), cropped
        to what fits; no interior padding, whose size rule assumes a non-empty operand."""
        zero = _zero(ctx, dy.dtype)
        low, high = [], []
        for axis in range(dy.rank):
            st, start = self.step[axis], self.start[axis]
            room = self.shape[axis] - start
            dy = spread(ctx, dy, zero, axis, st, room)
            low.append(start)
            high.append(room - dy.shape[axis])
        if any(not e.is_const or e.value for e in low + high):
            dy = ctx.op("pad", dy, zero, low=low, high=high)
        if self.reversed:
            dy = ctx.op("reverse", dy, dimensions=sorted(self.reversed))
        return dy


def _known_slice(k: np.ndarray, axes: Sequence[int], starts: Sequence[Any],
                 ends: Sequence[Any], steps: Sequence[int], decrease: Sequence[int]
                 ) -> np.ndarray | None:
    """A slice of a known value folded (static bounds only)."""
    if any(isinstance(e, Expr) for e in list(starts) + list(ends)) or k.ndim == 0:
        return None
    index = [slice(None)] * k.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        index[_axis(int(a), k.ndim)] = slice(int(s), int(e), int(st))
    out = as_object_array(k)[tuple(index)]
    if decrease:
        drop = {_axis(int(a), k.ndim) for a in decrease}
        out = out.reshape([d for i, d in enumerate(out.shape) if i not in drop])
    return out


def _decrease(ctx: Lowering, v: Value, decrease: Sequence[int], rank: int) -> Value:
    if not decrease:
        return v
    drop = {_axis(int(a), rank) for a in decrease}
    for a in drop:
        d = v.shape[a]
        if d.is_const and d.value != 1:
            raise ConversionError(f"slice decrease_axis {a} has size {d}, not 1")
    return ctx.reshape(v, [d for i, d in enumerate(v.shape) if i not in drop])


def _slice_args(ctx: Lowering, op: Any, first: int, strided: bool
                ) -> tuple[list[int], list[Any], list[Any], list[int]]:
    axes = [int(a) for a in ctx.attr(op, "axes")]
    starts = ctx.int_list(op, first, "starts", "slice starts")
    ends = ctx.int_list(op, first + 1, "ends", "slice ends")
    steps = [1] * len(axes)
    if strided:
        steps = [int(s) for s in ctx.static_ints(ctx.operand(op, first + 2), "slice strides")] \
            if ctx.operand(op, first + 2) is not None else \
            [int(s) for s in ctx.attr(op, "strides")]
    return axes, starts, ends, steps


@converter("pd_op.slice", "pd_op.strided_slice", dtypes=ALL_DTYPES)
def slice_(ctx: Lowering, op: Any) -> Any:
    strided = op.name() == "pd_op.strided_slice"
    axes, starts, ends, steps = _slice_args(ctx, op, 1, strided)
    decrease = [] if strided else [int(a) for a in ctx.attr(op, "decrease_axis", [])]
    k = _small_known(ctx, ctx.operand(op, 0))
    if k is not None:
        out = _known_slice(k, axes, starts, ends, steps, decrease)
        if out is not None:
            return _fit(out, op)
    x = ctx.input(op, 0)
    y = _Slicing(x.shape, axes, starts, ends, steps).apply(ctx, x)
    return _decrease(ctx, y, decrease, x.rank)


@converter("pd_op.slice_grad", "pd_op.strided_slice_grad", dtypes=ALL_DTYPES)
def slice_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, out_grad, starts, ends[, strides])."""
    strided = op.name() == "pd_op.strided_slice_grad"
    axes, starts, ends, steps = _slice_args(ctx, op, 2, strided)
    x, dy = ctx.input(op, 0), ctx.input(op, 1)
    spec = _Slicing(x.shape, axes, starts, ends, steps)
    return spec.grad(ctx, ctx.reshape(dy, spec.sliced_shape()))


# -- joining and splitting -----------------------------------------------------------------

def _known_parts(ctx: Lowering, items: Sequence[Any]) -> list[np.ndarray] | None:
    ks = [_small_known(ctx, v) for v in items]
    if any(k is None or not _is_int_known(k) for k in ks):
        return None
    return [as_object_array(k) for k in ks]  # type: ignore[arg-type]


@converter("pd_op.concat", dtypes=ALL_DTYPES)
def concat(ctx: Lowering, op: Any) -> Any:
    items = ctx.vector(ctx.operand(op, 0))
    rank = len(items[0].shape)
    axis = _known_axis(ctx, op, 1, rank)
    ks = _known_parts(ctx, items)
    if ks is not None and rank:
        return _fit(np.concatenate(ks, axis=axis), op)
    vs = [ctx.value(v) for v in items]
    keep = [v for v in vs if not (v.shape[axis].is_const and v.shape[axis].value == 0)]
    keep = keep or vs[:1]
    return keep[0] if len(keep) == 1 else ctx.op("concatenate", *keep, dimension=axis)


@converter("pd_op.stack", dtypes=ALL_DTYPES)
def stack(ctx: Lowering, op: Any) -> Any:
    items = ctx.vector(ctx.operand(op, 0))
    rank = len(items[0].shape)
    axis = _axis(int(ctx.attr(op, "axis", 0)), rank + 1)
    ks = _known_parts(ctx, items)
    if ks is not None:
        return _fit(np.stack(ks, axis=axis), op)
    vs = [ctx.value(v) for v in items]
    parts = [ctx.reshape(v, list(v.shape[:axis]) + [1] + list(v.shape[axis:])) for v in vs]
    return parts[0] if len(parts) == 1 else ctx.op("concatenate", *parts, dimension=axis)


@converter("pd_op.concat_grad", dtypes=ALL_DTYPES)
def concat_grad(ctx: Lowering, op: Any) -> Vector:
    """Operands (x vector, out_grad, axis): out_grad cut at each input's extent."""
    xs = [ctx.value(v) for v in ctx.vector(ctx.operand(op, 0))]
    g = ctx.input(op, 1)
    axis = _known_axis(ctx, op, 2, g.rank)
    at = as_expr(0)
    out = []
    for x in xs:
        out.append(_slice_axis(ctx, g, axis, at, at + x.shape[axis]))
        at = at + x.shape[axis]
    return Vector(tuple(out))


@converter("pd_op.stack_grad", dtypes=ALL_DTYPES)
def stack_grad(ctx: Lowering, op: Any) -> Vector:
    """Operands (x vector, out_grad): one slice per stacked input, the axis removed."""
    n = len(ctx.vector(ctx.operand(op, 0)))
    g = ctx.input(op, 1)
    axis = _axis(int(ctx.attr(op, "axis", 0)), g.rank)
    rest = [d for i, d in enumerate(g.shape) if i != axis]
    return Vector(tuple(ctx.reshape(_slice_axis(ctx, g, axis, i, i + 1), rest)
                        for i in range(n)))


def _split_sizes(ctx: Lowering, x: Value, axis: int, sizes: list[Expr]) -> Vector:
    out, at = [], as_expr(0)
    for s in sizes:
        out.append(_slice_axis(ctx, x, axis, at, at + s))
        at = at + s
    return Vector(tuple(out))


@converter("pd_op.split", dtypes=ALL_DTYPES)
def split(ctx: Lowering, op: Any) -> Vector:
    """Operands (x, sections, axis); one section may be -1 (the rest)."""
    x = ctx.input(op, 0)
    sections = ctx.int_list(op, 1, "sections", "split sections")
    axis = _known_axis(ctx, op, 2, x.rank)
    sizes = [as_expr(s) for s in sections]
    holes = [i for i, s in enumerate(sizes) if s.is_const and s.value == -1]
    if len(holes) > 1:
        raise ConversionError(f"split sections {sections} have more than one -1")
    if any(s.is_const and s.value < -1 for s in sizes):
        raise ConversionError(f"split sections {sections} are negative")
    if holes:
        rest = Expr.const(0)
        for i, s in enumerate(sizes):
            if i != holes[0]:
                rest = rest + s
        sizes[holes[0]] = x.shape[axis] - rest
    total = Expr.const(0)
    for s in sizes:
        total = total + s
    if (total - x.shape[axis]).is_const and (total - x.shape[axis]).value != 0:
        raise ConversionError(f"split sections {sections} do not add up to dim "
                              f"{x.shape[axis]}")
    return _split_sizes(ctx, x, axis, sizes)


@converter("pd_op.split_with_num", dtypes=ALL_DTYPES)
def split_with_num(ctx: Lowering, op: Any) -> Vector:
    """``num`` equal parts. A dynamic dim is split through a reshape to ``[.., num,
    d / num, ..]``, whose element count check rejects a dim ``num`` does not divide at run
    time (slices alone would silently drop the remainder)."""
    x = ctx.input(op, 0)
    axis = _known_axis(ctx, op, 1, x.rank)
    n = int(ctx.attr(op, "num"))
    d = x.shape[axis]
    if n <= 0:
        raise ConversionError(f"split_with_num num={n}")
    if d.is_const:
        if d.value % n:
            raise ConversionError(f"dim {d} does not split into {n}")
        return _split_sizes(ctx, x, axis, [as_expr(d.value // n)] * n)
    q = floordiv(d, n)
    wide = ctx.reshape(x, list(x.shape[:axis]) + [as_expr(n), q] + list(x.shape[axis + 1:]))
    rest = list(x.shape[:axis]) + [q] + list(x.shape[axis + 1:])
    return Vector(tuple(ctx.reshape(_slice_axis(ctx, wide, axis, i, i + 1), rest)
                        for i in range(n)))


@converter("pd_op.unbind", dtypes=ALL_DTYPES)
def unbind(ctx: Lowering, op: Any) -> Vector:
    x = ctx.input(op, 0)
    axis = _axis(int(ctx.attr(op, "axis", 0)), x.rank)
    d = x.shape[axis]
    if not d.is_const:
        raise ConversionError("unbind along a dynamic dim", code="data_dependent_shape")
    rest = [e for i, e in enumerate(x.shape) if i != axis]
    return Vector(tuple(ctx.reshape(_slice_axis(ctx, x, axis, i, i + 1), rest)
                        for i in range(d.value)))


# -- broadcasting and repetition -----------------------------------------------------------

def _expand_target(x: Value, dims: list[Any]) -> list[Expr]:
    """Paddle's expand shape: as many dims as the result; ``-1`` keeps the input dim."""
    lead = len(dims) - x.rank
    if lead < 0:
        raise ConversionError(f"expand shape {dims} has fewer dims than the input ({x.rank})")
    out = []
    for i, d in enumerate(dims):
        if not isinstance(d, Expr) and d == -1:
            if i < lead:
                raise ConversionError(f"expand shape {dims}: -1 for a new leading dim")
            out.append(x.shape[i - lead])
        elif not isinstance(d, Expr) and d < 0:
            raise ConversionError(f"expand shape {dims} has a negative size")
        else:
            out.append(as_expr(d))
    return out


@converter("pd_op.expand", dtypes=ALL_DTYPES)
def expand(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    dims = ctx.int_list(op, 1, "shape", "the expand shape")
    return ctx.broadcast_to(x, _expand_target(x, dims))


@converter("pd_op.expand_as", dtypes=ALL_DTYPES)
def expand_as(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    y = ctx.optional(op, 1)
    dims = list(y.shape) if y is not None else [int(d) for d in ctx.attr(op, "target_shape")]
    return ctx.broadcast_to(x, _expand_target(x, dims))


def sum_to(ctx: Lowering, g: Value, shape: Sequence[Expr]) -> Value:
    """The gradient of a broadcast back to the operand's ``shape``: leading dims and dims
    stretched from a static 1 are summed. A dynamic dim that differs from the result's
    could be a stretched 1 or not, which only the run time knows: refused."""
    lead = g.rank - len(shape)
    if lead < 0:
        raise ConversionError(f"gradient of rank {g.rank} for an input of rank {len(shape)}")
    axes = list(range(lead))
    for i, d in enumerate(shape):
        gd = g.shape[lead + i]
        if d == gd:
            continue
        if d.is_const and d.value == 1:
            axes.append(lead + i)
        else:
            raise ConversionError(f"cannot tell whether dim {d} was broadcast to {gd}",
                                  code="data_dependent_shape")
    out = ctx.op("reduce", g, kind="sum", axes=axes) if axes else g
    return ctx.reshape(out, list(shape))


@converter("pd_op.expand_grad", "pd_op.expand_as_grad", dtypes=NUMERIC_DTYPES)
def expand_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, out_grad, ...)."""
    return sum_to(ctx, ctx.input(op, 1), list(ctx.input(op, 0).shape))


def _tile_layout(x: Value, reps: list[Any]) -> tuple[list[Expr], list[Expr]]:
    """(input dims, repeats) of equal length: the shorter side gets leading 1s."""
    reps_e = [as_expr(r) for r in reps]
    if any(r.is_const and r.value < 0 for r in reps_e):
        raise ConversionError(f"tile repeat_times {reps} are negative")
    dims = list(x.shape)
    n = max(len(dims), len(reps_e))
    return [as_expr(1)] * (n - len(dims)) + dims, [as_expr(1)] * (n - len(reps_e)) + reps_e


@converter("pd_op.tile", dtypes=ALL_DTYPES)
def tile(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    dims, reps = _tile_layout(x, ctx.int_list(op, 1, "repeat_times", "tile repeat_times"))
    x = ctx.reshape(x, dims)
    if all(r.is_const and r.value == 1 for r in reps):
        return x
    wide: list[Expr] = []
    for r, d in zip(reps, dims):
        wide += [r, d]
    b = ctx.op("broadcast_in_dim", x, shape=wide,
               broadcast_dimensions=[2 * i + 1 for i in range(len(dims))])
    return ctx.reshape(b, [r * d for r, d in zip(reps, dims)])


@converter("pd_op.tile_grad", dtypes=NUMERIC_DTYPES)
def tile_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, out_grad, repeat_times): the sum over the repeats."""
    x, g = ctx.input(op, 0), ctx.input(op, 1)
    dims, reps = _tile_layout(x, ctx.int_list(op, 2, "repeat_times", "tile repeat_times"))
    wide: list[Expr] = []
    for r, d in zip(reps, dims):
        wide += [r, d]
    g = ctx.reshape(g, wide)
    axes = [2 * i for i, r in enumerate(reps) if not (r.is_const and r.value == 1)]
    if axes:
        g = ctx.op("reduce", g, kind="sum", axes=axes)
    return ctx.reshape(g, list(x.shape))


# -- creation ------------------------------------------------------------------------------

def _fill_value(ctx: Lowering, op: Any, index: int, dtype: DType) -> Value:
    """A rank-0 fill value: a known number is a constant, anything else is read."""
    v = ctx.operand(op, index)
    k = ctx.known(v)
    if k is not None and k.size == 1 and k.dtype != object:
        return ctx.scalar(k.reshape(-1)[0].item(), dtype)
    val = ctx.value(v)
    if val.rank and any(not (d.is_const and d.value == 1) for d in val.shape):
        raise ConversionError(f"fill value of shape {list(val.shape)} is not a scalar")
    return ctx.cast(ctx.reshape(val, []), dtype)


@converter("pd_op.full_like", dtypes=ALL_DTYPES)
def full_like(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    dtype = _result_dtype(op)
    return ctx.broadcast_to(_fill_value(ctx, op, 1, dtype), list(x.shape))


@converter("pd_op.full_with_tensor", dtypes=ALL_DTYPES)
def full_with_tensor(ctx: Lowering, op: Any) -> Any:
    """Operands (value, shape). A small static fill of a known number is folded."""
    dims = ctx.int_list(op, 1, "shape", "the fill shape")
    dtype = _result_dtype(op)
    k = ctx.known(ctx.operand(op, 0))
    if k is not None and k.size == 1 and k.dtype != object and \
            all(not isinstance(d, Expr) for d in dims) and int(np.prod(dims)) <= MAX_KNOWN:
        return Known(np.full([int(d) for d in dims], k.reshape(-1)[0], dtype=dtype.np))
    if any(not isinstance(d, Expr) and d < 0 for d in dims):
        raise ConversionError(f"fill shape {dims} has a negative size")
    return ctx.broadcast_to(_fill_value(ctx, op, 0, dtype), _dims(ctx, dims))


@converter("pd_op.arange", dtypes=NUMERIC_DTYPES)
def arange(ctx: Lowering, op: Any) -> Any:
    """Static bounds: folded exactly as Paddle computes it (each value the previous one
    plus ``step``, in the result dtype). A dynamic ``end`` (a size) needs integer static
    ``start`` and ``step``: an ``iota``."""
    dtype = _result_dtype(op)
    start, end, step = (ctx.known_scalar(ctx.operand(op, i), "arange bounds")
                        for i in range(3))
    if not isinstance(end, Expr) and not isinstance(start, Expr) and \
            not isinstance(step, Expr):
        if float(step) == 0:
            raise ConversionError("arange step 0")
        n = max(int(np.ceil((float(end) - float(start)) / float(step))), 0)
        vals = np.full(n, step, dtype=dtype.np)
        if n:
            vals[0] = start
        vals = np.add.accumulate(vals, dtype=dtype.np) if n else vals
        return Known(vals) if n <= MAX_KNOWN else ctx.const(vals, dtype)
    if isinstance(start, Expr) or isinstance(step, Expr) or not dtype.is_int or \
            float(start) != int(start) or float(step) != int(step) or int(step) == 0:
        raise ConversionError("arange with a dynamic bound needs an integer dtype and static "
                              "integer start and step", code="data_dependent_shape")
    s, st = int(start), int(step)
    n = smax(ceildiv(end - s, st), 0) if st > 0 else smax(ceildiv(s - end, -st), 0)
    iota = ctx.op("iota", shape=[n], dimension=0, dtype=dtype)
    out = ctx.op("mul", iota, ctx.full(st, dtype, [n])) if st != 1 else iota
    return ctx.op("add", out, ctx.full(s, dtype, [n])) if s != 0 else out


def _triangle(ctx: Lowering, op: Any, g: Value, lower: bool) -> Value:
    """``g`` where the column minus the row is <= diagonal (lower) or >= (upper), else 0."""
    if g.rank < 2:
        raise ConversionError(f"{op.name()} needs rank >= 2, got {g.rank}")
    k = int(ctx.attr(op, "diagonal", 0))
    rc = [g.shape[-2], g.shape[-1]]
    row = ctx.op("iota", shape=rc, dimension=0, dtype=DType.I64)
    col = ctx.op("iota", shape=rc, dimension=1, dtype=DType.I64)
    diff = ctx.op("sub", col, row)
    keep = ctx.op("compare", diff, ctx.full(k, DType.I64, rc), direction="le" if lower else "ge")
    keep = ctx.op("broadcast_in_dim", keep, shape=list(g.shape),
                  broadcast_dimensions=[g.rank - 2, g.rank - 1])
    return ctx.op("select", keep, g, ctx.full(0, g.dtype, list(g.shape)))


@converter("pd_op.tril", "pd_op.tril_grad", dtypes=ALL_DTYPES)
def tril(ctx: Lowering, op: Any) -> Value:
    return _triangle(ctx, op, ctx.input(op, 0), lower=True)


@converter("pd_op.triu", "pd_op.triu_grad", dtypes=ALL_DTYPES)
def triu(ctx: Lowering, op: Any) -> Value:
    return _triangle(ctx, op, ctx.input(op, 0), lower=False)


@converter("pd_op.one_hot", dtypes=ALL_DTYPES)
def one_hot(ctx: Lowering, op: Any) -> Value:
    idx = ctx.input(op, 0)
    if idx.dtype not in _INDEX_DTYPES:
        raise ConversionError(f"one_hot of {idx.dtype} indices", code="unsupported_dtype")
    depth = ctx.known_scalar(ctx.operand(op, 1), "one_hot num_classes")
    shape = list(idx.shape) + [as_expr(depth)]
    iota = ctx.op("iota", shape=shape, dimension=idx.rank, dtype=idx.dtype)
    b = ctx.op("broadcast_in_dim", idx, shape=shape, broadcast_dimensions=list(range(idx.rank)))
    hit = ctx.op("compare", iota, b, direction="eq")
    dtype = _result_dtype(op)
    return ctx.op("select", hit, ctx.full(1, dtype, shape), ctx.full(0, dtype, shape))


# -- indexing ------------------------------------------------------------------------------

def _index(ctx: Lowering, op: Any, i: int) -> Value:
    idx = ctx.input(op, i)
    if idx.dtype not in _INDEX_DTYPES:
        raise ConversionError(f"{op.name()}: indices of {idx.dtype}", code="unsupported_dtype")
    return idx


@converter("pd_op.gather", dtypes=ALL_DTYPES)
def gather(ctx: Lowering, op: Any) -> Value:
    """Operands (x, index, axis); index of rank 0 or 1."""
    x, idx = ctx.input(op, 0), _index(ctx, op, 1)
    if idx.rank > 1:
        raise ConversionError(f"gather index of rank {idx.rank} (Paddle takes rank 0 or 1)")
    axis = _known_axis(ctx, op, 2, x.rank) if ctx.operand(op, 2) is not None else 0
    return ctx.op("gather", x, idx, axis=axis)


@converter("pd_op.index_select", dtypes=ALL_DTYPES)
def index_select(ctx: Lowering, op: Any) -> Value:
    x, idx = ctx.input(op, 0), _index(ctx, op, 1)
    if idx.rank != 1:
        raise ConversionError(f"index_select index of rank {idx.rank}")
    return ctx.op("gather", x, idx, axis=_axis(int(ctx.attr(op, "axis", 0)), x.rank))


def _scatter_grad(ctx: Lowering, x: Value, idx: Value, g: Value, axis: int) -> Value:
    """Transpose of a gather along ``axis``: repeated indices accumulate."""
    return ctx.op("scatter_add", ctx.full(0, g.dtype, list(x.shape)), idx, g, axis=axis)


@converter("pd_op.gather_grad", dtypes=NUMERIC_DTYPES)
def gather_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, index, out_grad, axis)."""
    x, idx, g = ctx.input(op, 0), _index(ctx, op, 1), ctx.input(op, 2)
    axis = _known_axis(ctx, op, 3, x.rank) if ctx.operand(op, 3) is not None else 0
    if idx.rank > 1:
        raise ConversionError(f"gather index of rank {idx.rank}")
    return _scatter_grad(ctx, x, idx, g, axis)


@converter("pd_op.index_select_grad", dtypes=NUMERIC_DTYPES)
def index_select_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, index, out_grad)."""
    x, idx, g = ctx.input(op, 0), _index(ctx, op, 1), ctx.input(op, 2)
    return _scatter_grad(ctx, x, idx, g, _axis(int(ctx.attr(op, "axis", 0)), x.rank))


def _padding_mask(ctx: Lowering, ids: Value, rows: Value, padding_idx: int) -> Value:
    """``rows`` (ids.shape + [D]) with the rows of ``padding_idx`` zeroed; Paddle's -1
    means no padding row."""
    if padding_idx == -1:
        return rows
    pad = ctx.op("compare", ids, ctx.full(padding_idx, ids.dtype, list(ids.shape)),
                 direction="eq")
    pad = ctx.op("broadcast_in_dim", pad, shape=list(rows.shape),
                 broadcast_dimensions=list(range(ids.rank)))
    return ctx.op("select", pad, ctx.full(0, rows.dtype, list(rows.shape)), rows)


@converter("pd_op.embedding", dtypes=NUMERIC_DTYPES)
def embedding(ctx: Lowering, op: Any) -> Value:
    """Operands (x: ids, weight): rows of weight; the padding row reads as zeros."""
    ids, w = _index(ctx, op, 0), ctx.input(op, 1)
    if w.rank != 2:
        raise ConversionError(f"embedding weight of rank {w.rank}")
    rows = ctx.op("gather", w, ids, axis=0)
    return _padding_mask(ctx, ids, rows, int(ctx.attr(op, "padding_idx", -1)))


@converter("pd_op.embedding_grad", dtypes=NUMERIC_DTYPES)
def embedding_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x: ids, weight, out_grad): out_grad rows summed into their ids' rows; the
    padding row gets none."""
    ids, w, g = _index(ctx, op, 0), ctx.input(op, 1), ctx.input(op, 2)
    if w.rank != 2:
        raise ConversionError(f"embedding weight of rank {w.rank}")
    if ctx.attr(op, "sparse", False):
        raise ConversionError("sparse embedding gradient (a SelectedRows)")
    g = _padding_mask(ctx, ids, g, int(ctx.attr(op, "padding_idx", -1)))
    return _scatter_grad(ctx, w, ids, g, 0)


# -- padding, flips, rolls, scans ----------------------------------------------------------

def _pad_value(ctx: Lowering, op: Any, index: int | None, dtype: DType) -> Value:
    if index is None:
        return ctx.scalar(float(ctx.attr(op, "pad_value", 0.0)), dtype)
    return _fill_value(ctx, op, index, dtype)


@converter("pd_op.pad", dtypes=ALL_DTYPES)
def pad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, pad_value); ``paddings`` [before0, after0, before1, ...]."""
    x = ctx.input(op, 0)
    p = [int(v) for v in ctx.attr(op, "paddings")]
    if len(p) != 2 * x.rank:
        raise ConversionError(f"pad paddings {p} for rank {x.rank}")
    return ctx.op("pad", x, _pad_value(ctx, op, 1, x.dtype), low=_dims(ctx, p[0::2]),
                  high=_dims(ctx, p[1::2]))


@converter("pd_op.pad_grad", dtypes=ALL_DTYPES)
def pad_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, out_grad, pad_value): the padding cut off (a negative pad)."""
    x, g = ctx.input(op, 0), ctx.input(op, 1)
    p = [int(v) for v in ctx.attr(op, "paddings")]
    if len(p) != 2 * x.rank:
        raise ConversionError(f"pad paddings {p} for rank {x.rank}")
    return ctx.op("pad", g, _zero(ctx, g.dtype), low=_dims(ctx, [-v for v in p[0::2]]),
                  high=_dims(ctx, [-v for v in p[1::2]]))


def _pad3d_edges(ctx: Lowering, op: Any, x: Value) -> tuple[list[Expr], list[Expr]]:
    """(low, high) per dim of pad3d's ``paddings`` [left, right, top, bottom, front, back]
    (W, H, D) in its data format; constant mode only."""
    mode = ctx.attr(op, "mode", "constant")
    if mode != "constant":
        raise ConversionError(f"pad3d mode {mode!r} (only constant padding is converted)")
    if x.rank != 5:
        raise ConversionError(f"pad3d of rank {x.rank}")
    p = ctx.int_list(op, 1 if op.name() == "pd_op.pad3d" else 2, "paddings", "pad3d paddings")
    if len(p) != 6:
        raise ConversionError(f"pad3d paddings {p}")
    fmt = ctx.attr(op, "data_format", "NCDHW")
    if fmt not in ("NCDHW", "NDHWC"):
        raise ConversionError(f"pad3d data_format {fmt!r}")
    low, high = [as_expr(0)] * 5, [as_expr(0)] * 5
    for j, ch in enumerate("WHD"):
        low[fmt.index(ch)], high[fmt.index(ch)] = as_expr(p[2 * j]), as_expr(p[2 * j + 1])
    return low, high


@converter("pd_op.pad3d", dtypes=ALL_DTYPES)
def pad3d(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    low, high = _pad3d_edges(ctx, op, x)
    return ctx.op("pad", x, _pad_value(ctx, op, None, x.dtype), low=low, high=high)


@converter("pd_op.pad3d_grad", dtypes=ALL_DTYPES)
def pad3d_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, out_grad, paddings)."""
    x, g = ctx.input(op, 0), ctx.input(op, 1)
    low, high = _pad3d_edges(ctx, op, x)
    return ctx.op("pad", g, _zero(ctx, g.dtype), low=[-e for e in low],
                  high=[-e for e in high])


@converter("pd_op.flip", dtypes=ALL_DTYPES)
def flip(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    axes = sorted({_axis(int(a), x.rank) for a in ctx.attr(op, "axis")})
    return ctx.op("reverse", x, dimensions=axes) if axes and x.rank else x


def _roll(ctx: Lowering, x: Value, shifts: list[int], axes: list[int]) -> Value:
    """Each element moves ``shift`` places along its axis, wrapping around: the last
    ``shift mod d`` elements come first. With no axes, the flattened tensor rolls."""
    if not axes:
        if len(shifts) != 1:
            raise ConversionError(f"roll shifts {shifts} without axes")
        flat = ctx.reshape(x, [product(x.shape)])
        return ctx.reshape(_roll(ctx, flat, shifts, [0]), list(x.shape))
    if len(shifts) != len(axes):
        raise ConversionError(f"roll shifts {shifts} and axes {axes} differ in length")
    for s, a in zip(shifts, axes):
        a = _axis(a, x.rank)
        d = x.shape[a]
        if d.is_const:
            if d.value == 0 or s % d.value == 0:
                continue
            cut = as_expr(d.value - s % d.value)
        else:  # max(d, 1): a size-0 dim has nothing to roll, and no division by zero
            cut = d - mod(as_expr(s), smax(d, 1))
        x = ctx.op("concatenate", _slice_axis(ctx, x, a, cut, d),
                   _slice_axis(ctx, x, a, 0, cut), dimension=a)
    return x


def _roll_args(ctx: Lowering, op: Any, index: int) -> tuple[list[int], list[int]]:
    shifts = ctx.static_ints(ctx.operand(op, index), "roll shifts") \
        if ctx.operand(op, index) is not None else [int(s) for s in ctx.attr(op, "shifts")]
    return [int(s) for s in shifts], [int(a) for a in ctx.attr(op, "axis", [])]


@converter("pd_op.roll", dtypes=ALL_DTYPES)
def roll(ctx: Lowering, op: Any) -> Value:
    shifts, axes = _roll_args(ctx, op, 1)
    return _roll(ctx, ctx.input(op, 0), shifts, axes)


@converter("pd_op.roll_grad", dtypes=ALL_DTYPES)
def roll_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, out_grad, shifts): rolled back."""
    shifts, axes = _roll_args(ctx, op, 2)
    return _roll(ctx, ctx.input(op, 1), [-s for s in shifts], axes)


def _cumsum(ctx: Lowering, x: Value, axis: int, exclusive: bool, reverse: bool) -> Value:
    """Inclusive scan, reversed around the scan for ``reverse``; ``exclusive`` scans the
    input shifted by one (so no subtraction rounds the result)."""
    if reverse:
        x = ctx.op("reverse", x, dimensions=[axis])
    if exclusive:
        low, high = [as_expr(0)] * x.rank, [as_expr(0)] * x.rank
        low[axis], high[axis] = as_expr(1), as_expr(-1)
        x = ctx.op("pad", x, _zero(ctx, x.dtype), low=low, high=high)
    out = ctx.op("cumulative", x, kind="sum", axis=axis)
    return ctx.op("reverse", out, dimensions=[axis]) if reverse else out


def _cumsum_axis(ctx: Lowering, op: Any, x: Value, index: int) -> tuple[Value, int]:
    """(the scanned value, its axis): flattened when the op says so or for rank 0."""
    if ctx.attr(op, "flatten", False) or x.rank == 0:
        return ctx.reshape(x, [product(x.shape)]), 0
    return x, _known_axis(ctx, op, index, x.rank)


@converter("pd_op.cumsum", dtypes=NUMERIC_DTYPES)
def cumsum(ctx: Lowering, op: Any) -> Value:
    x, axis = _cumsum_axis(ctx, op, ctx.input(op, 0), 1)
    return _cumsum(ctx, x, axis, bool(ctx.attr(op, "exclusive", False)),
                   bool(ctx.attr(op, "reverse", False)))


@converter("pd_op.cumsum_grad", dtypes=NUMERIC_DTYPES)
def cumsum_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, out_grad, axis): the scan in the other direction."""
    x = ctx.input(op, 0)
    g, axis = _cumsum_axis(ctx, op, ctx.input(op, 1), 2)
    out = _cumsum(ctx, g, axis, bool(ctx.attr(op, "exclusive", False)),
                  not ctx.attr(op, "reverse", False))
    return ctx.reshape(out, list(x.shape))
