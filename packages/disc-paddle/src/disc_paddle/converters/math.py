"""Elementwise math, comparisons, casts, activations and their gradients.

Binary ops broadcast numpy-style (Paddle's rule for ``axis=-1``, the only one PIR emits).
Integer arithmetic on values known at compile time (shapes: ``shape64(x)[1] // 4``) is
folded to a known value rather than computed, since reshape targets and slice bounds are
built from it and DISC needs them as symbolic sizes. Gradients of broadcast operands are
summed back to each operand's shape (:func:`sum_to`).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from disc_core.bridge.known import as_object_array, normalize
from disc_core.dtypes import DType
from disc_core.ir import Value
from disc_core.symbolic import Expr, as_expr, floordiv, mod, smax, smin

from ..lowering import ConversionError, Lowering, core_dtype, dtype_code
from ..versions import paddle_version
from .registry import ALL_DTYPES, FLOAT_DTYPES, Known, converter

MAX_KNOWN = 64  # fold integer tensors up to this many elements (shapes, indices)
#: the integer dtypes taken: Paddle's CPU kernels of most of these ops lack int8, int16 and
#: uint8 (the casts take every dtype)
INTS = frozenset({dtype_code(DType.I32), dtype_code(DType.I64)})
NUMERIC = FLOAT_DTYPES | INTS
BOOL = frozenset({dtype_code(DType.BOOL)})


# -- helpers -------------------------------------------------------------------------------

def sum_to(ctx: Lowering, g: Value, shape: list[Any]) -> Value:
    """The gradient ``g`` of a broadcast result summed back to an operand's ``shape``
    (numpy broadcasting: leading dims dropped, static-1 dims kept as 1)."""
    lead = g.rank - len(shape)
    axes = list(range(lead))
    for i, d in enumerate(shape):
        gd = g.shape[lead + i]
        if d.is_const and d.value == 1 and not (gd.is_const and gd.value == 1):
            axes.append(lead + i)
    out = ctx.op("reduce", g, kind="sum", axes=axes) if axes else g
    return ctx.reshape(out, shape) if tuple(out.shape) != tuple(shape) else out


def _like(ctx: Lowering, value: Any, v: Value) -> Value:
    """``value`` broadcast to ``v``'s shape and dtype."""
    return ctx.full(value, v.dtype, v.shape)


def _wanted(op: Any, i: int) -> bool:
    """Whether result ``i`` is used (an unneeded gradient output is left unset)."""
    return op.result(i).initialized()


def _result_dtype(op: Any, i: int = 0) -> DType:
    return core_dtype(op.result(i).dtype)


def _check_axis(op: Any) -> None:
    axis = op.attrs().get("axis", -1)
    if int(axis) != -1:
        raise ConversionError(f"{op.name()}: axis={axis} (Paddle's old aligned broadcasting) "
                              "is not converted; only axis=-1 (numpy broadcasting)")


def _binary_operands(ctx: Lowering, op: Any, dtype: DType | None = None) -> list[Value]:
    """Operands 0 and 1 in ``dtype`` (default: both must agree), broadcast together."""
    a, b = ctx.input(op, 0), ctx.input(op, 1)
    if dtype is not None:
        a, b = ctx.cast(a, dtype), ctx.cast(b, dtype)
    elif a.dtype != b.dtype:
        raise ConversionError(f"{op.name()}: operands of different dtypes "
                              f"({a.dtype.value}, {b.dtype.value})")
    return ctx.broadcast_all(a, b)


def _known_int(ctx: Lowering, op: Any, i: int) -> np.ndarray | None:
    """Operand ``i``'s known value as an object array of int/Expr, when it is a small
    integer tensor known at compile time."""
    v = ctx.operand(op, i)
    k = ctx.known(v)
    if k is None or k.size > MAX_KNOWN or not core_dtype(v.dtype).is_int:
        return None
    if k.dtype != object and not np.issubdtype(k.dtype, np.integer):
        return None
    return as_object_array(k)


def _fits(values: np.ndarray, dtype: DType) -> bool:
    """Plain integers in ``dtype``'s range (a folded value must not differ from Paddle's
    wrapping arithmetic)."""
    info = np.iinfo(dtype.np)
    return all(isinstance(e, Expr) or info.min <= e <= info.max for e in values.reshape(-1))


def _fold_values(fn: Callable[..., Any], args: list[np.ndarray], dtype: DType
                 ) -> Known | None:
    """``fn`` elementwise on known values with numpy broadcasting, sizes as Exprs."""
    shape = np.broadcast_shapes(*[a.shape for a in args])
    out = np.empty(shape, dtype=object)
    try:
        for idx, vals in zip(np.ndindex(*shape),
                             zip(*[np.broadcast_to(a, shape).reshape(-1) for a in args])):
            out[idx] = normalize(fn(*[as_expr(x) for x in vals]))
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    return Known(out) if _fits(out, dtype) else None


def _fold_binary(ctx: Lowering, op: Any, fn: Callable[[Any, Any], Any]) -> Known | None:
    """Integer arithmetic on two known operands (size arithmetic), else None."""
    dtype = _result_dtype(op)
    if not dtype.is_int:
        return None
    a, b = _known_int(ctx, op, 0), _known_int(ctx, op, 1)
    if a is None or b is None:
        return None
    return _fold_values(fn, [a, b], dtype)


def _scalar_operand(ctx: Lowering, op: Any, index: int, attr: str, like: Value,
                    default: float | None = None) -> Value:
    """A scalar argument that PIR passes as a tensor operand (``pd_op.full``, known) or an
    attribute, as a value of ``like``'s dtype and shape. Paddle converts it to the op's
    dtype (truncating for integers)."""
    v = ctx.operand(op, index) if index < op.num_operands() else None
    if v is None:
        value = ctx.attr(op, attr, default)
        if value is None:
            raise ConversionError(f"{op.name()}: {attr} is not set")
        return _like(ctx, np.asarray(value).astype(like.dtype.np), like)
    k = ctx.known(v)
    if k is not None and k.size == 1 and not isinstance(k.reshape(-1)[0], Expr):
        return _like(ctx, np.asarray(k.reshape(-1)[0]).astype(like.dtype.np), like)
    t = ctx.value(v)  # computed at run time (a known size is materialized)
    if t.rank > 1 or (t.rank == 1 and not (t.shape[0].is_const and t.shape[0].value == 1)):
        raise ConversionError(f"{op.name()}: {attr} is a tensor of shape {list(t.shape)}, "
                              "not a single value")
    return ctx.broadcast_to(ctx.cast(ctx.reshape(t, []), like.dtype), like.shape)


def _to_bool(ctx: Lowering, v: Value) -> Value:
    """Paddle's truth of a value: ``x != 0`` (NaN is true)."""
    return v if v.dtype is DType.BOOL else ctx.op("compare", v, _like(ctx, 0, v),
                                                  direction="ne")


def _select(ctx: Lowering, pred: Value, a: Value, b: Value) -> Value:
    return ctx.op("select", pred, a, b)


def _cmp(ctx: Lowering, a: Value, b: Value | float, direction: str) -> Value:
    if not isinstance(b, Value):
        b = _like(ctx, b, a)
    return ctx.op("compare", a, b, direction=direction)


def _mul(ctx: Lowering, *vs: Value) -> Value:
    out = vs[0]
    for v in vs[1:]:
        out = ctx.op("mul", out, v)
    return out


def _scale(ctx: Lowering, v: Value, c: float) -> Value:
    return ctx.op("mul", v, _like(ctx, c, v))


# -- binary arithmetic -----------------------------------------------------------------

_CORE_BINARY = {"pd_op.add": "add", "pd_op.subtract": "sub", "pd_op.multiply": "mul",
                "pd_op.maximum": "max", "pd_op.minimum": "min"}
_FOLDERS: dict[str, Callable[[Any, Any], Any]] = {
    "pd_op.add": operator.add, "pd_op.subtract": operator.sub, "pd_op.multiply": operator.mul,
    "pd_op.maximum": smax, "pd_op.minimum": smin, "pd_op.floor_divide": floordiv,
    "pd_op.remainder": mod,
}


def _binary(core: str) -> Callable[[Lowering, Any], Any]:
    def fn(ctx: Lowering, op: Any) -> Any:
        folded = _fold_binary(ctx, op, _FOLDERS[op.name()])
        if folded is not None:
            return folded
        a, b = _binary_operands(ctx, op, _result_dtype(op))
        if core in ("max", "min") and a.dtype.is_float and paddle_version() < (3, 1):
            # Paddle 3.0's maximum/minimum are ``x > y ? x : y`` (``<`` for minimum): a
            # NaN in x gives y; from 3.1 on a NaN on either side propagates
            return _select(ctx, _cmp(ctx, a, b, "gt" if core == "max" else "lt"), a, b)
        return ctx.op(core, a, b)

    fn.__doc__ = (f"numpy-broadcast ``{core}``; integer sizes known at compile time fold "
                  "(float max/min follow the installed Paddle's NaN rule).")
    return fn


for _pd, _core in _CORE_BINARY.items():
    converter(_pd, dtypes=NUMERIC)(_binary(_core))


@converter("pd_op.divide", dtypes=FLOAT_DTYPES)
def divide(ctx: Lowering, op: Any) -> Value:
    """True division. Paddle's Python API casts integer operands to float first, so an
    integer ``pd_op.divide`` (C truncation) is not taken: it could not be tested."""
    a, b = _binary_operands(ctx, op, _result_dtype(op))
    return ctx.op("div", a, b)


def _floor_div(ctx: Lowering, a: Value, b: Value) -> Value:
    """Python's ``//``: floor of the quotient (Paddle's floor_divide, ints and floats)."""
    if a.dtype.is_float:
        return ctx.op("floor", ctx.op("div", a, b))
    q = ctx.op("div", a, b)
    if not a.dtype.is_signed:
        return q
    r = ctx.op("rem", a, b)
    fix = ctx.op("and", _cmp(ctx, r, 0, "ne"),
                 ctx.op("xor", _cmp(ctx, r, 0, "lt"), _cmp(ctx, b, 0, "lt")))
    return _select(ctx, fix, ctx.op("sub", q, _like(ctx, 1, q)), q)


@converter("pd_op.floor_divide", dtypes=NUMERIC)
def floor_divide(ctx: Lowering, op: Any) -> Any:
    """Python's ``//`` (Paddle rounds toward -inf for ints too). An integer division by
    zero is an error in Paddle; here it is 0 (core ``div``)."""
    folded = _fold_binary(ctx, op, floordiv)
    if folded is not None:
        return folded
    a, b = _binary_operands(ctx, op, _result_dtype(op))
    return _floor_div(ctx, a, b)


@converter("pd_op.remainder", dtypes=NUMERIC)
def remainder(ctx: Lowering, op: Any) -> Any:
    """Python's ``%``: the remainder takes the divisor's sign (C's ``fmod`` corrected)."""
    folded = _fold_binary(ctx, op, mod)
    if folded is not None:
        return folded
    a, b = _binary_operands(ctx, op, _result_dtype(op))
    r = ctx.op("rem", a, b)
    if not a.dtype.is_signed and not a.dtype.is_float:
        return r
    fix = ctx.op("and", _cmp(ctx, r, 0, "ne"),
                 ctx.op("xor", _cmp(ctx, r, 0, "lt"), _cmp(ctx, b, 0, "lt")))
    return _select(ctx, fix, ctx.op("add", r, b), r)


def _int_pow(ctx: Lowering, a: Value, b: Value) -> Value:
    """Integer ``a ** b`` as Paddle computes it on CPU: ``pow`` in double, converted back
    (exact while the result fits; ``0 ** -n`` is 0, a negative power of another integer
    truncates toward 0). Paddle 3.0 converts the infinite ``0 ** -n`` as x86 does, to
    the dtype's minimum; from 3.1 on it is 0."""
    out = ctx.cast(ctx.op("pow", ctx.cast(a, DType.F64), ctx.cast(b, DType.F64)), a.dtype)
    if paddle_version() < (3, 1) and a.dtype.is_signed:
        pole = ctx.op("and", _cmp(ctx, a, 0, "eq"), _cmp(ctx, b, 0, "lt"))
        out = _select(ctx, pole, _like(ctx, int(np.iinfo(a.dtype.np).min), out), out)
    return out


@converter("pd_op.elementwise_pow", dtypes=NUMERIC)
def elementwise_pow(ctx: Lowering, op: Any) -> Value:
    a, b = _binary_operands(ctx, op, _result_dtype(op))
    return ctx.op("pow", a, b) if a.dtype.is_float else _int_pow(ctx, a, b)


# -- binary gradients ------------------------------------------------------------------

def _xy_grads(ctx: Lowering, op: Any, x: Value, y: Value, dx: Callable[[], Value],
              dy: Callable[[], Value]) -> list[Value | None]:
    """The two operand gradients (each summed back to its operand's shape), computed only
    when the program reads them."""
    return [sum_to(ctx, dx(), list(x.shape)) if _wanted(op, 0) else None,
            sum_to(ctx, dy(), list(y.shape)) if _wanted(op, 1) else None]


@converter("pd_op.add_grad", dtypes=NUMERIC)
def add_grad(ctx: Lowering, op: Any) -> list[Value | None]:
    _check_axis(op)
    x, y, dout = ctx.input(op, 0), ctx.input(op, 1), ctx.input(op, 2)
    return _xy_grads(ctx, op, x, y, lambda: dout, lambda: dout)


@converter("pd_op.subtract_grad", dtypes=NUMERIC)
def subtract_grad(ctx: Lowering, op: Any) -> list[Value | None]:
    _check_axis(op)
    x, y, dout = ctx.input(op, 0), ctx.input(op, 1), ctx.input(op, 2)
    return _xy_grads(ctx, op, x, y, lambda: dout, lambda: ctx.op("neg", dout))


@converter("pd_op.multiply_grad", dtypes=NUMERIC)
def multiply_grad(ctx: Lowering, op: Any) -> list[Value | None]:
    _check_axis(op)
    x, y, dout = ctx.input(op, 0), ctx.input(op, 1), ctx.input(op, 2)
    return _xy_grads(ctx, op, x, y,
                     lambda: ctx.op("mul", dout, ctx.broadcast_to(y, dout.shape)),
                     lambda: ctx.op("mul", dout, ctx.broadcast_to(x, dout.shape)))


@converter("pd_op.divide_grad", dtypes=FLOAT_DTYPES)
def divide_grad(ctx: Lowering, op: Any) -> list[Value | None]:
    """dx = dout / y; dy = -dout * out / y."""
    _check_axis(op)
    x, y, out, dout = (ctx.input(op, i) for i in range(4))
    yb = ctx.broadcast_to(y, dout.shape)
    return _xy_grads(ctx, op, x, y, lambda: ctx.op("div", dout, yb),
                     lambda: ctx.op("div", ctx.op("neg", ctx.op(
                         "mul", dout, ctx.broadcast_to(out, dout.shape))), yb))


def _minmax_grad(direction: str) -> Callable[[Lowering, Any], list[Value | None]]:
    """Ties follow the installed Paddle: from 3.1 on each operand gets half of ``dout``
    where x == y; Paddle 3.0 gives all of it to y."""
    def fn(ctx: Lowering, op: Any) -> list[Value | None]:
        x, y, dout = ctx.input(op, 0), ctx.input(op, 1), ctx.input(op, 2)
        xb, yb = ctx.broadcast_to(x, dout.shape), ctx.broadcast_to(y, dout.shape)
        zero, half = _like(ctx, 0, dout), _scale(ctx, dout, 0.5)
        tie = _cmp(ctx, xb, yb, "eq")
        if paddle_version() < (3, 1):
            return _xy_grads(
                ctx, op, x, y,
                lambda: _select(ctx, _cmp(ctx, xb, yb, direction), dout, zero),
                lambda: _select(ctx, ctx.op("or", _cmp(ctx, yb, xb, direction), tie),
                                dout, zero))

        def part(first: Value, second: Value) -> Value:
            return _select(ctx, _cmp(ctx, first, second, direction), dout,
                           _select(ctx, tie, half, zero))

        return _xy_grads(ctx, op, x, y, lambda: part(xb, yb), lambda: part(yb, xb))

    return fn


converter("pd_op.maximum_grad", dtypes=FLOAT_DTYPES)(_minmax_grad("gt"))
converter("pd_op.minimum_grad", dtypes=FLOAT_DTYPES)(_minmax_grad("lt"))


def _pow_dx(ctx: Lowering, x: Value, y: Value, dout: Value) -> Value:
    """dout * y * x**(y - 1), and 0 where y == 0 (Paddle's kernel from 3.1 on; the formula
    gives NaN at x == 0 there, as Paddle 3.0 does)."""
    d = _mul(ctx, dout, y, ctx.op("pow", x, ctx.op("sub", y, _like(ctx, 1, y))))
    if paddle_version() < (3, 1):  # Paddle 3.0's kernel is the bare formula
        return d
    return _select(ctx, _cmp(ctx, y, 0, "eq"), _like(ctx, 0, d), d)


@converter("pd_op.elementwise_pow_grad", dtypes=FLOAT_DTYPES)
def elementwise_pow_grad(ctx: Lowering, op: Any) -> list[Value | None]:
    """dx as :func:`_pow_dx`; dy = dout * log(x) * x**y, and 0 where x == 0 and y >= 0
    (Paddle's kernel from 3.1 on; the formula, as Paddle 3.0, gives NaN or -inf there)."""
    x, y, dout = ctx.input(op, 0), ctx.input(op, 1), ctx.input(op, 2)
    xb, yb = ctx.broadcast_to(x, dout.shape), ctx.broadcast_to(y, dout.shape)

    def dy() -> Value:
        d = _mul(ctx, dout, ctx.op("log", xb), ctx.op("pow", xb, yb))
        if paddle_version() < (3, 1):  # Paddle 3.0's kernel is the bare formula
            return d
        at_zero = ctx.op("and", _cmp(ctx, xb, 0, "eq"), _cmp(ctx, yb, 0, "ge"))
        return _select(ctx, at_zero, _like(ctx, 0, d), d)

    return _xy_grads(ctx, op, x, y, lambda: _pow_dx(ctx, xb, yb, dout), dy)


@converter("pd_op.remainder_grad", dtypes=FLOAT_DTYPES)
def remainder_grad(ctx: Lowering, op: Any) -> list[Value | None]:
    """dx = dout; dy = -dout * floor(x / y)."""
    x, y, dout = ctx.input(op, 0), ctx.input(op, 1), ctx.input(op, 2)
    xb, yb = ctx.broadcast_to(x, dout.shape), ctx.broadcast_to(y, dout.shape)
    return _xy_grads(ctx, op, x, y, lambda: dout,
                     lambda: ctx.op("mul", ctx.op("neg", dout),
                                    ctx.op("floor", ctx.op("div", xb, yb))))


# -- comparisons and logic ---------------------------------------------------------------

_COMPARE = {"pd_op.equal": "eq", "pd_op.not_equal": "ne", "pd_op.less_than": "lt",
            "pd_op.less_equal": "le", "pd_op.greater_than": "gt",
            "pd_op.greater_equal": "ge"}


def _compare(direction: str) -> Callable[[Lowering, Any], Value]:
    def fn(ctx: Lowering, op: Any) -> Value:
        a, b = _binary_operands(ctx, op)
        return ctx.op("compare", a, b, direction=direction)

    fn.__doc__ = f"numpy-broadcast ``compare`` ({direction}); NaN compares unequal."
    return fn


for _pd, _dir in _COMPARE.items():
    converter(_pd, dtypes=NUMERIC | BOOL)(_compare(_dir))


def _logical(core: str) -> Callable[[Lowering, Any], Value]:
    def fn(ctx: Lowering, op: Any) -> Value:
        a, b = ctx.broadcast_all(_to_bool(ctx, ctx.input(op, 0)),
                                 _to_bool(ctx, ctx.input(op, 1)))
        return ctx.op(core, a, b)

    fn.__doc__ = f"``{core}`` of the operands' truth (``x != 0``), a bool result."
    return fn


for _pd, _core in {"pd_op.logical_and": "and", "pd_op.logical_or": "or",
                   "pd_op.logical_xor": "xor"}.items():
    converter(_pd, dtypes=NUMERIC | BOOL)(_logical(_core))


@converter("pd_op.logical_not", dtypes=NUMERIC | BOOL)
def logical_not(ctx: Lowering, op: Any) -> Value:
    return ctx.op("not", _to_bool(ctx, ctx.input(op, 0)))


def _bitwise(core: str) -> Callable[[Lowering, Any], Value]:
    def fn(ctx: Lowering, op: Any) -> Value:
        a, b = _binary_operands(ctx, op)
        return ctx.op(core, a, b)

    fn.__doc__ = f"bitwise ``{core}`` of integers, logical of bools."
    return fn


_BOOL_AND_INT = INTS | BOOL
for _pd, _core in {"pd_op.bitwise_and": "and", "pd_op.bitwise_or": "or",
                   "pd_op.bitwise_xor": "xor"}.items():
    converter(_pd, dtypes=_BOOL_AND_INT)(_bitwise(_core))


@converter("pd_op.bitwise_not", dtypes=_BOOL_AND_INT)
def bitwise_not(ctx: Lowering, op: Any) -> Value:
    """``~x`` of integers, logical not of bools (core ``not`` does both)."""
    return ctx.op("not", ctx.input(op, 0))


# -- unary -------------------------------------------------------------------------------

_CORE_UNARY_FLOAT = {
    "pd_op.exp": "exp", "pd_op.expm1": "expm1", "pd_op.log": "log", "pd_op.log1p": "log1p",
    "pd_op.sqrt": "sqrt", "pd_op.rsqrt": "rsqrt", "pd_op.sin": "sin", "pd_op.cos": "cos",
    "pd_op.tan": "tan", "pd_op.tanh": "tanh", "pd_op.sigmoid": "logistic", "pd_op.erf": "erf",
    "pd_op.floor": "floor", "pd_op.ceil": "ceil",
}


def _unary(core: str) -> Callable[[Lowering, Any], Value]:
    def fn(ctx: Lowering, op: Any) -> Value:
        return ctx.op(core, ctx.input(op, 0))

    fn.__doc__ = f"core ``{core}``."
    return fn


for _pd, _core in _CORE_UNARY_FLOAT.items():
    converter(_pd, dtypes=FLOAT_DTYPES)(_unary(_core))
for _pd, _core in {"pd_op.abs": "abs", "pd_op.sign": "sign"}.items():
    converter(_pd, dtypes=NUMERIC)(_unary(_core))


@converter("pd_op.round", dtypes=FLOAT_DTYPES)
def round_(ctx: Lowering, op: Any) -> Value:
    """Paddle from 3.1 on rounds half to even (``round(2.5) == 2``); Paddle 3.0 rounds half
    away from zero (``round(2.5) == 3``): a tie (``|x - rint(x)| == 0.5``, exact) then
    moves x by half away from zero. ``decimals != 0`` scales by a power of ten whose exact
    float steps are not pinned down here: refused."""
    decimals = int(ctx.attr(op, "decimals", 0))
    if decimals != 0:
        raise ConversionError(f"pd_op.round with decimals={decimals} is not converted")
    x = ctx.input(op, 0)
    r = ctx.op("round_even", x)
    if paddle_version() >= (3, 1):
        return r
    tie = _cmp(ctx, ctx.op("abs", ctx.op("sub", x, r)), 0.5, "eq")
    half = _select(ctx, _cmp(ctx, x, 0, "lt"), _like(ctx, -0.5, x), _like(ctx, 0.5, x))
    return _select(ctx, tie, ctx.op("add", x, half), r)


@converter("pd_op.square", dtypes=NUMERIC)
def square(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    return ctx.op("mul", x, x)


@converter("pd_op.reciprocal", dtypes=FLOAT_DTYPES)
def reciprocal(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    return ctx.op("div", _like(ctx, 1, x), x)


@converter("pd_op.isnan", dtypes=NUMERIC)
def isnan(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    if not x.dtype.is_float:
        return ctx.full(False, DType.BOOL, x.shape)
    return _cmp(ctx, x, x, "ne")


@converter("pd_op.isinf", dtypes=NUMERIC)
def isinf(ctx: Lowering, op: Any) -> Value:
    """Not finite and not NaN (no infinity constant needed)."""
    x = ctx.input(op, 0)
    if not x.dtype.is_float:
        return ctx.full(False, DType.BOOL, x.shape)
    return ctx.op("and", ctx.op("not", ctx.op("is_finite", x)), _cmp(ctx, x, x, "eq"))


@converter("pd_op.isfinite", dtypes=NUMERIC)
def isfinite(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    if not x.dtype.is_float:
        return ctx.full(True, DType.BOOL, x.shape)
    return ctx.op("is_finite", x)


@converter("pd_op.pow", dtypes=FLOAT_DTYPES)
def pow_(ctx: Lowering, op: Any) -> Value:
    """``x ** y`` with the exponent an attribute (float)."""
    x = ctx.input(op, 0)
    return ctx.op("pow", x, _like(ctx, float(ctx.attr(op, "y")), x))


def _fold_scale(ctx: Lowering, op: Any) -> Known | None:
    """``scale`` of a known integer (``-n`` and ``n * 3`` of sizes are scale ops): Paddle
    converts scale and bias to the integer type (truncating)."""
    k = _known_int(ctx, op, 0)
    sv = ctx.operand(op, 1) if op.num_operands() > 1 else None
    if k is None:
        return None
    if sv is None:
        s = ctx.attr(op, "scale", 1.0)
    else:
        sk = ctx.known(sv)
        if sk is None or sk.size != 1 or isinstance(sk.reshape(-1)[0], Expr):
            return None
        s = sk.reshape(-1)[0]
    s, bias = int(float(s)), int(float(ctx.attr(op, "bias", 0.0)))
    after = bool(ctx.attr(op, "bias_after_scale", True))

    def fn(x: Expr) -> Expr:
        return x * s + bias if after else (x + bias) * s

    return _fold_values(fn, [k], _result_dtype(op))


@converter("pd_op.scale", dtypes=NUMERIC)
def scale(ctx: Lowering, op: Any) -> Any:
    """``scale * x + bias`` (``bias_after_scale``) or ``scale * (x + bias)``; ``scale`` is
    an operand (a ``full``, or a one-element tensor) or the attribute. Integer inputs use
    the truncated scale and bias, as Paddle does. The gradient of scale is scale."""
    folded = _fold_scale(ctx, op)
    if folded is not None:
        return folded
    x = ctx.input(op, 0)
    s = _scalar_operand(ctx, op, 1, "scale", x, 1.0)
    b = _like(ctx, np.asarray(float(ctx.attr(op, "bias", 0.0))).astype(x.dtype.np), x)
    if bool(ctx.attr(op, "bias_after_scale", True)):
        return ctx.op("add", ctx.op("mul", s, x), b)
    return ctx.op("mul", s, ctx.op("add", x, b))


@converter("pd_op.clip", dtypes=NUMERIC)
def clip(ctx: Lowering, op: Any) -> Value:
    """``min(max(x, lo), hi)``; NaN stays NaN. Bounds are operands (or attributes)."""
    x = ctx.input(op, 0)
    lo = _scalar_operand(ctx, op, 1, "min", x)
    hi = _scalar_operand(ctx, op, 2, "max", x)
    return ctx.op("min", ctx.op("max", x, lo), hi)


@converter("pd_op.clip_grad", dtypes=FLOAT_DTYPES)
def clip_grad(ctx: Lowering, op: Any) -> Value:
    """dout where lo <= x <= hi (bounds included, as Paddle from 3.1 on; Paddle 3.0
    excludes them: lo < x < hi), else 0."""
    x, dout = ctx.broadcast_all(ctx.input(op, 0), ctx.input(op, 1))
    lo = _scalar_operand(ctx, op, 2, "min", x)
    hi = _scalar_operand(ctx, op, 3, "max", x)
    strict = paddle_version() < (3, 1)
    inside = ctx.op("and", _cmp(ctx, x, lo, "gt" if strict else "ge"),
                    _cmp(ctx, x, hi, "lt" if strict else "le"))
    return _select(ctx, inside, dout, _like(ctx, 0, dout))


@converter("pd_op.where", dtypes=ALL_DTYPES)
def where(ctx: Lowering, op: Any) -> Value:
    """``condition ? x : y``, all three broadcast together."""
    c, x, y = ctx.input(op, 0), ctx.input(op, 1), ctx.input(op, 2)
    if x.dtype != y.dtype:
        raise ConversionError(f"pd_op.where of {x.dtype.value} and {y.dtype.value}")
    c, x, y = ctx.broadcast_all(_to_bool(ctx, c), x, y)
    return _select(ctx, c, x, y)


@converter("pd_op.where_grad", dtypes=ALL_DTYPES)
def where_grad(ctx: Lowering, op: Any) -> list[Value | None]:
    c, x, y, dout = (ctx.input(op, i) for i in range(4))
    c = ctx.broadcast_to(_to_bool(ctx, c), dout.shape)
    zero = _like(ctx, 0, dout)
    return _xy_grads(ctx, op, x, y, lambda: _select(ctx, c, dout, zero),
                     lambda: _select(ctx, c, zero, dout))


@converter("pd_op.assign_value", dtypes=ALL_DTYPES)
def assign_value(ctx: Lowering, op: Any) -> Any:
    """A constant tensor from the ``values`` attribute (small ones stay known)."""
    dtype = _result_dtype(op)
    shape = [int(d) for d in ctx.attr(op, "shape")]
    vals = np.asarray(list(ctx.attr(op, "values")), dtype=dtype.np).reshape(shape)
    return Known(vals) if vals.size <= MAX_KNOWN else ctx.const(vals, dtype)


# -- activations -------------------------------------------------------------------------

_SQRT1_2 = 1 / math.sqrt(2)
_GELU_K = math.sqrt(2 / math.pi)
_GELU_C = 0.044715


@converter("pd_op.relu", dtypes=FLOAT_DTYPES)
def relu(ctx: Lowering, op: Any) -> Value:
    """x where x > 0, else 0 (NaN gives 0, as Paddle's kernel)."""
    x = ctx.input(op, 0)
    return _select(ctx, _cmp(ctx, x, 0, "gt"), x, _like(ctx, 0, x))


@converter("pd_op.relu_grad", dtypes=FLOAT_DTYPES)
def relu_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (out, out_grad): dout where out > 0."""
    out, dout = ctx.broadcast_all(ctx.input(op, 0), ctx.input(op, 1))
    return _select(ctx, _cmp(ctx, out, 0, "gt"), dout, _like(ctx, 0, dout))


@converter("pd_op.relu6", dtypes=FLOAT_DTYPES)
def relu6(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    return ctx.op("min", ctx.op("max", x, _like(ctx, 0, x)), _like(ctx, 6, x))


@converter("pd_op.relu6_grad", dtypes=FLOAT_DTYPES)
def relu6_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (out, out_grad): dout where 0 < out < 6."""
    out, dout = ctx.input(op, 0), ctx.input(op, 1)
    inside = ctx.op("and", _cmp(ctx, out, 0, "gt"), _cmp(ctx, out, 6, "lt"))
    return _select(ctx, inside, dout, _like(ctx, 0, dout))


def _gelu_tanh_inner(ctx: Lowering, x: Value) -> Value:
    """tanh(sqrt(2/pi) * (x + 0.044715 x**3))."""
    x3 = _mul(ctx, x, x, x)
    return ctx.op("tanh", _scale(ctx, ctx.op("add", x, _scale(ctx, x3, _GELU_C)), _GELU_K))


@converter("pd_op.gelu", dtypes=FLOAT_DTYPES)
def gelu(ctx: Lowering, op: Any) -> Value:
    """``approximate``: the tanh form, else the exact erf form."""
    x = ctx.input(op, 0)
    if bool(ctx.attr(op, "approximate", False)):
        t = _gelu_tanh_inner(ctx, x)
    else:
        t = ctx.op("erf", _scale(ctx, x, _SQRT1_2))
    return _mul(ctx, _scale(ctx, x, 0.5), ctx.op("add", _like(ctx, 1, x), t))


@converter("pd_op.gelu_grad", dtypes=FLOAT_DTYPES)
def gelu_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, out_grad)."""
    x, dout = ctx.input(op, 0), ctx.input(op, 1)
    one = _like(ctx, 1, x)
    if bool(ctx.attr(op, "approximate", False)):
        t = _gelu_tanh_inner(ctx, x)
        dinner = _scale(ctx, ctx.op("add", one, _scale(ctx, _mul(ctx, x, x), 3 * _GELU_C)),
                        _GELU_K)
        d = ctx.op("add", _scale(ctx, ctx.op("add", one, t), 0.5),
                   _mul(ctx, _scale(ctx, x, 0.5), ctx.op("sub", one, _mul(ctx, t, t)), dinner))
    else:
        cdf = _scale(ctx, ctx.op("add", one, ctx.op("erf", _scale(ctx, x, _SQRT1_2))), 0.5)
        pdf = _scale(ctx, ctx.op("exp", _scale(ctx, _mul(ctx, x, x), -0.5)),
                     1 / math.sqrt(2 * math.pi))
        d = ctx.op("add", cdf, _mul(ctx, x, pdf))
    return ctx.op("mul", dout, d)


@converter("pd_op.silu", "pd_op.swish", dtypes=FLOAT_DTYPES)
def silu(ctx: Lowering, op: Any) -> Value:
    """x * sigmoid(x) (Paddle's swish in PIR has no beta: the same)."""
    x = ctx.input(op, 0)
    return ctx.op("mul", x, ctx.op("logistic", x))


@converter("pd_op.silu_grad", "pd_op.swish_grad", dtypes=FLOAT_DTYPES)
def silu_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, [out,] out_grad): dout * s * (1 + x * (1 - s)), s = sigmoid(x)."""
    x, dout = ctx.input(op, 0), ctx.input(op, op.num_operands() - 1)
    s = ctx.op("logistic", x)
    one = _like(ctx, 1, x)
    return _mul(ctx, dout, s, ctx.op("add", one, ctx.op("mul", x, ctx.op("sub", one, s))))


@converter("pd_op.leaky_relu", dtypes=FLOAT_DTYPES)
def leaky_relu(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    alpha = float(ctx.attr(op, "negative_slope", 0.02))
    return _select(ctx, _cmp(ctx, x, 0, "lt"), _scale(ctx, x, alpha), x)


@converter("pd_op.leaky_relu_grad", dtypes=FLOAT_DTYPES)
def leaky_relu_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, out_grad): dout * slope where x < 0, dout at and above 0."""
    x, dout = ctx.input(op, 0), ctx.input(op, 1)
    alpha = float(ctx.attr(op, "negative_slope", 0.02))
    return _select(ctx, _cmp(ctx, x, 0, "lt"), _scale(ctx, dout, alpha), dout)


@converter("pd_op.elu", dtypes=FLOAT_DTYPES)
def elu(ctx: Lowering, op: Any) -> Value:
    """x where x > 0, else alpha * (e**x - 1) (any sign of alpha)."""
    x = ctx.input(op, 0)
    alpha = float(ctx.attr(op, "alpha", 1.0))
    neg = _scale(ctx, ctx.op("expm1", x), alpha)
    return _select(ctx, _cmp(ctx, x, 0, "gt"), x, neg)


@converter("pd_op.elu_grad", dtypes=FLOAT_DTYPES)
def elu_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, out, out_grad): dout where x > 0, else dout * alpha * e**x."""
    x, dout = ctx.input(op, 0), ctx.input(op, 2)
    alpha = float(ctx.attr(op, "alpha", 1.0))
    neg = _mul(ctx, dout, _scale(ctx, ctx.op("exp", x), alpha))
    return _select(ctx, _cmp(ctx, x, 0, "gt"), dout, neg)


@converter("pd_op.hardswish", dtypes=FLOAT_DTYPES)
def hardswish(ctx: Lowering, op: Any) -> Value:
    """x * min(max(x + 3, 0), 6) / 6."""
    x = ctx.input(op, 0)
    r = ctx.op("min", ctx.op("max", ctx.op("add", x, _like(ctx, 3, x)), _like(ctx, 0, x)),
               _like(ctx, 6, x))
    return ctx.op("div", ctx.op("mul", x, r), _like(ctx, 6, x))


@converter("pd_op.hardswish_grad", dtypes=FLOAT_DTYPES)
def hardswish_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, out_grad): 0 for x + 3 <= 0, dout for x + 3 >= 6, else
    dout * (2x + 3) / 6."""
    x, dout = ctx.input(op, 0), ctx.input(op, 1)
    t = ctx.op("add", x, _like(ctx, 3, x))
    mid = ctx.op("div", ctx.op("add", _scale(ctx, x, 2), _like(ctx, 3, x)), _like(ctx, 6, x))
    d = _select(ctx, _cmp(ctx, t, 6, "lt"),
                _select(ctx, _cmp(ctx, t, 0, "gt"), mid, _like(ctx, 0, x)), _like(ctx, 1, x))
    return ctx.op("mul", dout, d)


@converter("pd_op.hardsigmoid", dtypes=FLOAT_DTYPES)
def hardsigmoid(ctx: Lowering, op: Any) -> Value:
    """max(0, min(1, slope * x + offset))."""
    x = ctx.input(op, 0)
    slope = float(ctx.attr(op, "slope", 1 / 6))
    offset = float(ctx.attr(op, "offset", 0.5))
    y = ctx.op("add", _scale(ctx, x, slope), _like(ctx, offset, x))
    return ctx.op("max", ctx.op("min", y, _like(ctx, 1, x)), _like(ctx, 0, x))


@converter("pd_op.hardsigmoid_grad", dtypes=FLOAT_DTYPES)
def hardsigmoid_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (out, out_grad): dout * slope where 0 < out < 1."""
    out, dout = ctx.input(op, 0), ctx.input(op, 1)
    slope = float(ctx.attr(op, "slope", 1 / 6))
    inside = ctx.op("and", _cmp(ctx, out, 0, "gt"), _cmp(ctx, out, 1, "lt"))
    return _select(ctx, inside, _scale(ctx, dout, slope), _like(ctx, 0, dout))


@converter("pd_op.hardtanh", dtypes=FLOAT_DTYPES)
def hardtanh(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    lo, hi = float(ctx.attr(op, "t_min", -1.0)), float(ctx.attr(op, "t_max", 1.0))
    return ctx.op("min", ctx.op("max", x, _like(ctx, lo, x)), _like(ctx, hi, x))


@converter("pd_op.hardtanh_grad", dtypes=FLOAT_DTYPES)
def hardtanh_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, out_grad): dout where t_min < x < t_max."""
    x, dout = ctx.input(op, 0), ctx.input(op, 1)
    lo, hi = float(ctx.attr(op, "t_min", -1.0)), float(ctx.attr(op, "t_max", 1.0))
    inside = ctx.op("and", _cmp(ctx, x, lo, "gt"), _cmp(ctx, x, hi, "lt"))
    return _select(ctx, inside, dout, _like(ctx, 0, dout))


def _softplus_parts(ctx: Lowering, op: Any, x: Value) -> tuple[Value, Value, float]:
    """(beta * x, beta * x > threshold, beta)."""
    beta = float(ctx.attr(op, "beta", 1.0))
    threshold = float(ctx.attr(op, "threshold", 20.0))
    xb = _scale(ctx, x, beta)
    return xb, _cmp(ctx, xb, threshold, "gt"), beta


@converter("pd_op.softplus", dtypes=FLOAT_DTYPES)
def softplus(ctx: Lowering, op: Any) -> Value:
    """x where beta * x > threshold, else log(1 + e**(beta x)) / beta."""
    x = ctx.input(op, 0)
    xb, big, beta = _softplus_parts(ctx, op, x)
    soft = ctx.op("div", ctx.op("log1p", ctx.op("exp", xb)), _like(ctx, beta, x))
    return _select(ctx, big, x, soft)


@converter("pd_op.softplus_grad", dtypes=FLOAT_DTYPES)
def softplus_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, out_grad): dout where beta * x > threshold, else dout * sigmoid(beta x)."""
    x, dout = ctx.input(op, 0), ctx.input(op, 1)
    xb, big, _ = _softplus_parts(ctx, op, x)
    return _select(ctx, big, dout, ctx.op("mul", dout, ctx.op("logistic", xb)))


def _mish_softplus(ctx: Lowering, op: Any, x: Value) -> Value:
    """Mish's softplus: x above ``lambda``, e**x below ``-lambda``, else log1p(e**x)."""
    th = float(ctx.attr(op, "lambda", 20.0))
    ex = ctx.op("exp", x)
    return _select(ctx, _cmp(ctx, x, th, "gt"), x,
                   _select(ctx, _cmp(ctx, x, -th, "lt"), ex, ctx.op("log1p", ex)))


@converter("pd_op.mish", dtypes=FLOAT_DTYPES)
def mish(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    return ctx.op("mul", x, ctx.op("tanh", _mish_softplus(ctx, op, x)))


@converter("pd_op.mish_grad", dtypes=FLOAT_DTYPES)
def mish_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, out_grad): dout * (tanh(sp) + x * (1 - tanh(sp)**2) * (1 - e**-sp))."""
    x, dout = ctx.input(op, 0), ctx.input(op, 1)
    sp = _mish_softplus(ctx, op, x)
    t = ctx.op("tanh", sp)
    one = _like(ctx, 1, x)
    gsp = ctx.op("sub", one, ctx.op("exp", ctx.op("neg", sp)))
    d = ctx.op("add", t, _mul(ctx, x, ctx.op("sub", one, ctx.op("mul", t, t)), gsp))
    return ctx.op("mul", dout, d)


@converter("pd_op.logsigmoid", dtypes=FLOAT_DTYPES)
def logsigmoid(ctx: Lowering, op: Any) -> Value:
    """min(x, 0) - log1p(e**-|x|): no overflow for large |x|."""
    x = ctx.input(op, 0)
    tail = ctx.op("log1p", ctx.op("exp", ctx.op("neg", ctx.op("abs", x))))
    return ctx.op("sub", ctx.op("min", x, _like(ctx, 0, x)), tail)


@converter("pd_op.logsigmoid_grad", dtypes=FLOAT_DTYPES)
def logsigmoid_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, out_grad): dout * sigmoid(-x)."""
    x, dout = ctx.input(op, 0), ctx.input(op, 1)
    return ctx.op("mul", dout, ctx.op("logistic", ctx.op("neg", x)))


@converter("pd_op.tanh_shrink", dtypes=FLOAT_DTYPES)
def tanh_shrink(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    return ctx.op("sub", x, ctx.op("tanh", x))


@converter("pd_op.tanh_shrink_grad", dtypes=FLOAT_DTYPES)
def tanh_shrink_grad(ctx: Lowering, op: Any) -> Value:
    x, dout = ctx.input(op, 0), ctx.input(op, 1)
    t = ctx.op("tanh", x)
    return _mul(ctx, dout, t, t)


# -- unary gradients -------------------------------------------------------------------
# Operands are (x, out_grad) or (out, out_grad) as the forward's kernel needs (the
# operand names in the PIR op say which); the formulas are Paddle's.

def _unary_grad(fn: Callable[[Lowering, Value, Value], Value]
                ) -> Callable[[Lowering, Any], Value]:
    def conv(ctx: Lowering, op: Any) -> Value:
        return fn(ctx, ctx.input(op, 0), ctx.input(op, 1))

    conv.__doc__ = fn.__doc__
    return conv


def _exp_grad(ctx: Lowering, out: Value, dout: Value) -> Value:
    """dout * out."""
    return ctx.op("mul", dout, out)


def _log_grad(ctx: Lowering, x: Value, dout: Value) -> Value:
    """dout / x."""
    return ctx.op("div", dout, x)


def _log1p_grad(ctx: Lowering, x: Value, dout: Value) -> Value:
    """dout / (1 + x)."""
    return ctx.op("div", dout, ctx.op("add", x, _like(ctx, 1, x)))


def _sqrt_grad(ctx: Lowering, out: Value, dout: Value) -> Value:
    """0.5 * dout / out."""
    return ctx.op("div", _scale(ctx, dout, 0.5), out)


def _rsqrt_grad(ctx: Lowering, out: Value, dout: Value) -> Value:
    """-0.5 * dout * out**3."""
    return _mul(ctx, _scale(ctx, dout, -0.5), out, out, out)


def _square_grad(ctx: Lowering, x: Value, dout: Value) -> Value:
    """dout * 2 * x."""
    return ctx.op("mul", dout, _scale(ctx, x, 2))


def _abs_grad(ctx: Lowering, x: Value, dout: Value) -> Value:
    """dout * sign(x) (0 at 0)."""
    return ctx.op("mul", dout, ctx.op("sign", x))


def _tanh_grad(ctx: Lowering, out: Value, dout: Value) -> Value:
    """dout * (1 - out**2)."""
    return ctx.op("mul", dout, ctx.op("sub", _like(ctx, 1, out), ctx.op("mul", out, out)))


def _sigmoid_grad(ctx: Lowering, out: Value, dout: Value) -> Value:
    """dout * out * (1 - out)."""
    return _mul(ctx, dout, out, ctx.op("sub", _like(ctx, 1, out), out))


def _erf_grad(ctx: Lowering, x: Value, dout: Value) -> Value:
    """dout * 2 / sqrt(pi) * e**(-x**2)."""
    e = ctx.op("exp", ctx.op("neg", ctx.op("mul", x, x)))
    return ctx.op("mul", dout, _scale(ctx, e, 2 / math.sqrt(math.pi)))


def _sin_grad(ctx: Lowering, x: Value, dout: Value) -> Value:
    """dout * cos(x)."""
    return ctx.op("mul", dout, ctx.op("cos", x))


def _cos_grad(ctx: Lowering, x: Value, dout: Value) -> Value:
    """-dout * sin(x)."""
    return ctx.op("mul", ctx.op("neg", dout), ctx.op("sin", x))


def _reciprocal_grad(ctx: Lowering, out: Value, dout: Value) -> Value:
    """-dout * out**2."""
    return _mul(ctx, ctx.op("neg", dout), out, out)


for _pd, _fn in {"pd_op.exp_grad": _exp_grad, "pd_op.log_grad": _log_grad,
                 "pd_op.log1p_grad": _log1p_grad, "pd_op.sqrt_grad": _sqrt_grad,
                 "pd_op.rsqrt_grad": _rsqrt_grad, "pd_op.square_grad": _square_grad,
                 "pd_op.abs_grad": _abs_grad, "pd_op.tanh_grad": _tanh_grad,
                 "pd_op.sigmoid_grad": _sigmoid_grad, "pd_op.erf_grad": _erf_grad,
                 "pd_op.sin_grad": _sin_grad, "pd_op.cos_grad": _cos_grad,
                 "pd_op.reciprocal_grad": _reciprocal_grad}.items():
    converter(_pd, dtypes=FLOAT_DTYPES)(_unary_grad(_fn))


@converter("pd_op.floor_grad", "pd_op.ceil_grad", "pd_op.round_grad", dtypes=FLOAT_DTYPES)
def zero_grad(ctx: Lowering, op: Any) -> Value:
    """Piecewise-constant ops: a zero gradient of dout's shape."""
    dout = ctx.input(op, 0)
    return _like(ctx, 0, dout)


@converter("pd_op.pow_grad", dtypes=FLOAT_DTYPES)
def pow_grad(ctx: Lowering, op: Any) -> Value:
    """Operands (x, out_grad): dout * y * x**(y - 1)."""
    x, dout = ctx.input(op, 0), ctx.input(op, 1)
    y = float(ctx.attr(op, "y"))
    if y == 0:  # Paddle: 0 (the formula gives NaN at x == 0)
        return _like(ctx, 0, dout)
    return _mul(ctx, dout, _like(ctx, y, x), ctx.op("pow", x, _like(ctx, y - 1, x)))
