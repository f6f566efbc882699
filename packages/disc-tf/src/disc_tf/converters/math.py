"""Elementwise math, activations and their gradients, softmax and the cross-entropy losses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from disc_core.dtypes import DType
from disc_core.ir import Value

from ..lowering import ConversionError, Lowering, core_dtype
from .registry import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, NUMERIC_DTYPES, converter

LOGICAL = frozenset({tf.bool})


def reduce(ctx: Lowering, x: Value, kind: str, axes: list[int], keep: bool = False) -> Value:
    """``reduce`` over ``axes``; ``keep`` leaves them as size-1 dims."""
    axes = sorted({a % x.rank for a in axes}) if x.rank else []
    if not axes:
        return x
    out = ctx.op("reduce", x, kind=kind, axes=axes)
    if keep:
        out = ctx.reshape(out, [1 if i in axes else d for i, d in enumerate(x.shape)])
    return out


def _ins(ctx: Lowering, op: tf.Operation) -> list[Value]:
    return [ctx.value(t) for t in op.inputs]


# -- binary -------------------------------------------------------------------------------

def _binary(core: str) -> Callable[[Lowering, tf.Operation], Value]:
    def fn(ctx: Lowering, op: tf.Operation) -> Value:
        a, b = ctx.broadcast_all(*_ins(ctx, op))
        return ctx.op(core, a, b)

    return fn


for _tf, _core in {"AddV2": "add", "Add": "add", "Sub": "sub", "Mul": "mul",
                   "Maximum": "max", "Minimum": "min"}.items():
    converter(_tf, dtypes=NUMERIC_DTYPES)(_binary(_core))
converter("RealDiv", dtypes=FLOAT_DTYPES)(_binary("div"))
converter("Pow", dtypes=NUMERIC_DTYPES)(_binary("pow"))
converter("LogicalAnd", dtypes=LOGICAL)(_binary("and"))
converter("LogicalOr", dtypes=LOGICAL)(_binary("or"))


@converter("TruncateDiv", dtypes=INT_DTYPES)
def truncate_div(ctx: Lowering, op: tf.Operation) -> Value:
    a, b = ctx.broadcast_all(*_ins(ctx, op))
    return ctx.op("div", a, b)


def _compare(direction: str) -> Callable[[Lowering, tf.Operation], Value]:
    def fn(ctx: Lowering, op: tf.Operation) -> Value:
        a, b = ctx.broadcast_all(*_ins(ctx, op))
        return ctx.op("compare", a, b, direction=direction)

    return fn


for _tf, _dir in {"Equal": "eq", "NotEqual": "ne", "Less": "lt", "LessEqual": "le",
                  "Greater": "gt", "GreaterEqual": "ge"}.items():
    converter(_tf, dtypes=ALL_DTYPES)(_compare(_dir))


def _zero_like(ctx: Lowering, v: Value) -> Value:
    return ctx.full(0, v.dtype, v.shape)


@converter("FloorDiv", dtypes=NUMERIC_DTYPES)
def floor_div(ctx: Lowering, op: tf.Operation) -> Value:
    a, b = ctx.broadcast_all(*_ins(ctx, op))
    if a.dtype.is_float:
        return ctx.op("floor", ctx.op("div", a, b))
    q = ctx.op("div", a, b)
    if a.dtype is DType.U8:
        return q
    zero = _zero_like(ctx, a)
    inexact = ctx.op("compare", ctx.op("rem", a, b), zero, direction="ne")
    differ = ctx.op("xor", ctx.op("compare", a, zero, direction="lt"),
                    ctx.op("compare", b, zero, direction="lt"))
    return ctx.op("select", ctx.op("and", inexact, differ),
                  ctx.op("sub", q, ctx.full(1, a.dtype, a.shape)), q)


@converter("FloorMod", dtypes=NUMERIC_DTYPES)
def floor_mod(ctx: Lowering, op: tf.Operation) -> Value:
    """The remainder with the divisor's sign (Python's %)."""
    a, b = ctx.broadcast_all(*_ins(ctx, op))
    r = ctx.op("rem", a, b)
    if a.dtype is DType.U8:
        return r
    zero = _zero_like(ctx, a)
    fix = ctx.op("and", ctx.op("compare", r, zero, direction="ne"),
                 ctx.op("xor", ctx.op("compare", r, zero, direction="lt"),
                        ctx.op("compare", b, zero, direction="lt")))
    return ctx.op("select", fix, ctx.op("add", r, b), r)


@converter("SquaredDifference", dtypes=NUMERIC_DTYPES)
def squared_difference(ctx: Lowering, op: tf.Operation) -> Value:
    a, b = ctx.broadcast_all(*_ins(ctx, op))
    d = ctx.op("sub", a, b)
    return ctx.op("mul", d, d)


@converter("DivNoNan", dtypes=FLOAT_DTYPES)
def div_no_nan(ctx: Lowering, op: tf.Operation) -> Value:
    a, b = ctx.broadcast_all(*_ins(ctx, op))
    zero = _zero_like(ctx, b)
    return ctx.op("select", ctx.op("compare", b, zero, direction="eq"), zero,
                  ctx.op("div", a, b))


@converter("BiasAdd", "BiasAddV1", dtypes=NUMERIC_DTYPES)
def bias_add(ctx: Lowering, op: tf.Operation) -> Value:
    x, bias = _ins(ctx, op)
    fmt = op.get_attr("data_format").decode() if op.type == "BiasAdd" else "NHWC"
    if fmt == "NHWC" or x.rank <= 2:
        return ctx.op("add", x, ctx.broadcast_to(bias, x.shape))
    bias = ctx.op("broadcast_in_dim", bias, shape=list(x.shape), broadcast_dimensions=[1])
    return ctx.op("add", x, bias)


@converter("AddN", dtypes=NUMERIC_DTYPES)
def add_n(ctx: Lowering, op: tf.Operation) -> Value:
    vs = _ins(ctx, op)
    out = vs[0]
    for v in vs[1:]:
        out = ctx.op("add", out, v)
    return out


# -- unary --------------------------------------------------------------------------------

def _unary(core: str) -> Callable[[Lowering, tf.Operation], Value]:
    return lambda ctx, op: ctx.op(core, ctx.value(op.inputs[0]))


for _tf, _core in {"Exp": "exp", "Expm1": "expm1", "Log": "log", "Log1p": "log1p",
                   "Sqrt": "sqrt", "Rsqrt": "rsqrt", "Tanh": "tanh", "Sigmoid": "logistic",
                   "Erf": "erf", "Sin": "sin", "Cos": "cos", "Floor": "floor",
                   "Ceil": "ceil", "Rint": "round_even"}.items():
    converter(_tf, dtypes=FLOAT_DTYPES)(_unary(_core))
for _tf, _core in {"Neg": "neg", "Abs": "abs", "Sign": "sign"}.items():
    converter(_tf, dtypes=NUMERIC_DTYPES)(_unary(_core))
converter("LogicalNot", dtypes=LOGICAL)(_unary("not"))
converter("IsFinite", dtypes=FLOAT_DTYPES)(_unary("is_finite"))


@converter("Round", dtypes=NUMERIC_DTYPES)
def round_(ctx: Lowering, op: tf.Operation) -> Value:
    x = ctx.value(op.inputs[0])
    return ctx.op("round_even", x) if x.dtype.is_float else x


@converter("Square", dtypes=NUMERIC_DTYPES)
def square(ctx: Lowering, op: tf.Operation) -> Value:
    x = ctx.value(op.inputs[0])
    return ctx.op("mul", x, x)


@converter("Reciprocal", "Inv", dtypes=FLOAT_DTYPES)
def reciprocal(ctx: Lowering, op: tf.Operation) -> Value:
    x = ctx.value(op.inputs[0])
    return ctx.op("div", ctx.full(1, x.dtype, x.shape), x)


def _scalar(ctx: Lowering, value: float, like: Value) -> Value:
    return ctx.full(value, like.dtype, like.shape)


def _gt0(ctx: Lowering, x: Value) -> Value:
    return ctx.op("compare", x, _scalar(ctx, 0, x), direction="gt")


@converter("Relu", dtypes=NUMERIC_DTYPES)
def relu(ctx: Lowering, op: tf.Operation) -> Value:
    x = ctx.value(op.inputs[0])
    return ctx.op("max", x, _scalar(ctx, 0, x))


@converter("Relu6", dtypes=NUMERIC_DTYPES)
def relu6(ctx: Lowering, op: tf.Operation) -> Value:
    x = ctx.value(op.inputs[0])
    return ctx.op("min", ctx.op("max", x, _scalar(ctx, 0, x)), _scalar(ctx, 6, x))


@converter("Elu", dtypes=FLOAT_DTYPES)
def elu(ctx: Lowering, op: tf.Operation) -> Value:
    x = ctx.value(op.inputs[0])
    return ctx.op("select", _gt0(ctx, x), x, ctx.op("expm1", x))


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


@converter("Selu", dtypes=FLOAT_DTYPES)
def selu(ctx: Lowering, op: tf.Operation) -> Value:
    x = ctx.value(op.inputs[0])
    neg = ctx.op("mul", _scalar(ctx, _SELU_ALPHA, x), ctx.op("expm1", x))
    return ctx.op("mul", _scalar(ctx, _SELU_SCALE, x), ctx.op("select", _gt0(ctx, x), x, neg))


@converter("LeakyRelu", dtypes=FLOAT_DTYPES)
def leaky_relu(ctx: Lowering, op: tf.Operation) -> Value:
    x = ctx.value(op.inputs[0])
    alpha = op.get_attr("alpha")
    return ctx.op("select", _gt0(ctx, x), x, ctx.op("mul", x, _scalar(ctx, alpha, x)))


@converter("Softplus", dtypes=FLOAT_DTYPES)
def softplus(ctx: Lowering, op: tf.Operation) -> Value:
    """log(1 + e**x) = max(x, 0) + log1p(e**-|x|): no overflow for large |x|."""
    x = ctx.value(op.inputs[0])
    tail = ctx.op("log1p", ctx.op("exp", ctx.op("neg", ctx.op("abs", x))))
    return ctx.op("add", ctx.op("max", x, _scalar(ctx, 0, x)), tail)


@converter("Softsign", dtypes=FLOAT_DTYPES)
def softsign(ctx: Lowering, op: tf.Operation) -> Value:
    x = ctx.value(op.inputs[0])
    return ctx.op("div", x, ctx.op("add", _scalar(ctx, 1, x), ctx.op("abs", x)))


# -- gradients of activations -----------------------------------------------------------

def _two(ctx: Lowering, op: tf.Operation) -> tuple[Value, Value]:
    a, b = ctx.broadcast_all(ctx.value(op.inputs[0]), ctx.value(op.inputs[1]))
    return a, b


@converter("ReluGrad", dtypes=NUMERIC_DTYPES)
def relu_grad(ctx: Lowering, op: tf.Operation) -> Value:
    g, f = _two(ctx, op)
    return ctx.op("select", _gt0(ctx, f), g, _scalar(ctx, 0, g))


@converter("Relu6Grad", dtypes=NUMERIC_DTYPES)
def relu6_grad(ctx: Lowering, op: tf.Operation) -> Value:
    g, f = _two(ctx, op)
    inside = ctx.op("and", _gt0(ctx, f),
                    ctx.op("compare", f, _scalar(ctx, 6, f), direction="lt"))
    return ctx.op("select", inside, g, _scalar(ctx, 0, g))


@converter("EluGrad", dtypes=FLOAT_DTYPES)
def elu_grad(ctx: Lowering, op: tf.Operation) -> Value:
    g, y = _two(ctx, op)  # y = elu(x): for x < 0, d/dx = e**x = y + 1
    neg = ctx.op("compare", y, _scalar(ctx, 0, y), direction="lt")
    return ctx.op("select", neg, ctx.op("mul", g, ctx.op("add", y, _scalar(ctx, 1, y))), g)


@converter("SeluGrad", dtypes=FLOAT_DTYPES)
def selu_grad(ctx: Lowering, op: tf.Operation) -> Value:
    g, y = _two(ctx, op)  # for x < 0: d/dx = scale * alpha * e**x = y + scale * alpha
    neg = ctx.op("compare", y, _scalar(ctx, 0, y), direction="lt")
    return ctx.op("select", neg,
                  ctx.op("mul", g, ctx.op("add", y, _scalar(ctx, _SELU_ALPHA * _SELU_SCALE, y))),
                  ctx.op("mul", g, _scalar(ctx, _SELU_SCALE, g)))


@converter("LeakyReluGrad", dtypes=FLOAT_DTYPES)
def leaky_relu_grad(ctx: Lowering, op: tf.Operation) -> Value:
    g, f = _two(ctx, op)
    alpha = op.get_attr("alpha")
    return ctx.op("select", _gt0(ctx, f), g, ctx.op("mul", g, _scalar(ctx, alpha, g)))


@converter("SoftplusGrad", dtypes=FLOAT_DTYPES)
def softplus_grad(ctx: Lowering, op: tf.Operation) -> Value:
    g, f = _two(ctx, op)
    return ctx.op("mul", g, ctx.op("logistic", f))


def _y_dy(ctx: Lowering, op: tf.Operation) -> tuple[Value, Value]:
    return _two(ctx, op)  # these grads take (y, dy): y is the forward op's output


@converter("TanhGrad", dtypes=FLOAT_DTYPES)
def tanh_grad(ctx: Lowering, op: tf.Operation) -> Value:
    y, dy = _y_dy(ctx, op)
    return ctx.op("mul", dy, ctx.op("sub", _scalar(ctx, 1, y), ctx.op("mul", y, y)))


@converter("SigmoidGrad", dtypes=FLOAT_DTYPES)
def sigmoid_grad(ctx: Lowering, op: tf.Operation) -> Value:
    y, dy = _y_dy(ctx, op)
    return ctx.op("mul", dy, ctx.op("mul", y, ctx.op("sub", _scalar(ctx, 1, y), y)))


@converter("RsqrtGrad", dtypes=FLOAT_DTYPES)
def rsqrt_grad(ctx: Lowering, op: tf.Operation) -> Value:
    y, dy = _y_dy(ctx, op)  # d(x**-0.5) = -0.5 * y**3
    y3 = ctx.op("mul", ctx.op("mul", y, y), y)
    return ctx.op("mul", dy, ctx.op("mul", y3, _scalar(ctx, -0.5, y)))


@converter("SqrtGrad", dtypes=FLOAT_DTYPES)
def sqrt_grad(ctx: Lowering, op: tf.Operation) -> Value:
    y, dy = _y_dy(ctx, op)
    return ctx.op("div", ctx.op("mul", dy, _scalar(ctx, 0.5, dy)), y)


@converter("ReciprocalGrad", "InvGrad", dtypes=FLOAT_DTYPES)
def reciprocal_grad(ctx: Lowering, op: tf.Operation) -> Value:
    y, dy = _y_dy(ctx, op)
    return ctx.op("neg", ctx.op("mul", dy, ctx.op("mul", y, y)))


# -- softmax and losses -----------------------------------------------------------------

def _log_softmax_parts(ctx: Lowering, x: Value) -> tuple[Value, Value]:
    """(x - max, log(sum(exp(x - max)))) along the last axis, the second keeping its dim."""
    last = x.rank - 1
    shifted = ctx.op("sub", x, ctx.broadcast_to(reduce(ctx, x, "max", [last], True), x.shape))
    lse = ctx.op("log", reduce(ctx, ctx.op("exp", shifted), "sum", [last], True))
    return shifted, lse


@converter("Softmax", dtypes=FLOAT_DTYPES)
def softmax(ctx: Lowering, op: tf.Operation) -> Value:
    x = ctx.value(op.inputs[0])
    if x.rank < 1:
        raise ConversionError("softmax of a scalar")
    last = x.rank - 1
    e = ctx.op("exp", ctx.op("sub", x, ctx.broadcast_to(reduce(ctx, x, "max", [last], True),
                                                        x.shape)))
    return ctx.op("div", e, ctx.broadcast_to(reduce(ctx, e, "sum", [last], True), x.shape))


@converter("LogSoftmax", dtypes=FLOAT_DTYPES)
def log_softmax(ctx: Lowering, op: tf.Operation) -> Value:
    x = ctx.value(op.inputs[0])
    if x.rank < 1:
        raise ConversionError("log-softmax of a scalar")
    shifted, lse = _log_softmax_parts(ctx, x)
    return ctx.op("sub", shifted, ctx.broadcast_to(lse, x.shape))


@converter("SparseSoftmaxCrossEntropyWithLogits", dtypes=FLOAT_DTYPES)
def sparse_xent(ctx: Lowering, op: tf.Operation) -> list[Value]:
    """loss = logsumexp(x) - x[label]; backprop = softmax(x) - onehot(label). Labels out of
    [0, classes) give a zero one-hot row (TensorFlow raises on CPU)."""
    x, labels = ctx.value(op.inputs[0]), ctx.value(op.inputs[1])
    if x.rank != 2 or labels.rank != 1:
        raise ConversionError("expects logits [batch, classes] and labels [batch]")
    shifted, lse = _log_softmax_parts(ctx, x)
    logp = ctx.op("sub", shifted, ctx.broadcast_to(lse, x.shape))
    iota = ctx.op("iota", shape=list(x.shape), dimension=1, dtype=labels.dtype)
    lab = ctx.op("broadcast_in_dim", labels, shape=list(x.shape), broadcast_dimensions=[0])
    onehot = ctx.cast(ctx.op("compare", iota, lab, direction="eq"), x.dtype)
    loss = ctx.op("neg", reduce(ctx, ctx.op("mul", onehot, logp), "sum", [1]))
    return [loss, ctx.op("sub", ctx.op("exp", logp), onehot)]


@converter("SoftmaxCrossEntropyWithLogits", dtypes=FLOAT_DTYPES)
def softmax_xent(ctx: Lowering, op: tf.Operation) -> list[Value]:
    x, labels = ctx.broadcast_all(ctx.value(op.inputs[0]), ctx.value(op.inputs[1]))
    if x.rank != 2:
        raise ConversionError("expects logits and labels of rank 2")
    shifted, lse = _log_softmax_parts(ctx, x)
    logp = ctx.op("sub", shifted, ctx.broadcast_to(lse, x.shape))
    loss = ctx.op("neg", reduce(ctx, ctx.op("mul", labels, logp), "sum", [1]))
    return [loss, ctx.op("sub", ctx.op("exp", logp), labels)]


@converter("Cast", dtypes=ALL_DTYPES)
def cast(ctx: Lowering, op: tf.Operation) -> Any:
    from .registry import Known

    to = core_dtype(op.get_attr("DstT"))
    k = ctx.known(op.inputs[0])
    if k is not None and k.size <= 64 and to.is_int and op.inputs[0].dtype.is_integer:
        return Known(k)  # sizes stay sizes through int casts
    return ctx.cast(ctx.value(op.inputs[0]), to)


@converter("Erfc", dtypes=FLOAT_DTYPES)
def erfc(ctx: Lowering, op: tf.Operation) -> Value:
    """``1 - erf(x)`` (Keras's exact GELU and its gradient use it). Its absolute error is
    erf's; the relative error grows in the far right tail where erfc is tiny."""
    x = ctx.value(op.inputs[0])
    return ctx.op("sub", ctx.full(1, x.dtype, x.shape), ctx.op("erf", x))
