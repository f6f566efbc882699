"""Elementwise ATen ops: math, comparisons, logic, activations, where/clamp.

Type promotion and broadcasting follow torch exactly by construction: the result dtype and
shape come from the fake tensor torch recorded, operands are cast to the computation dtype
(``torch.result_type`` of the operands) and broadcast to the result shape.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..context import ConversionError, Lowering, core_dtype, meta_of
from .registry import ALL_DTYPES, FLOAT_DTYPES, NUMERIC_DTYPES, converter

aten = torch.ops.aten


def _proxy(arg: Any) -> Any:
    """Something ``torch.result_type`` accepts that promotes like ``arg``."""
    if isinstance(arg, torch.fx.Node):
        m = meta_of(arg)
        if isinstance(m, torch.Tensor):
            return torch.empty((0,) if m.dim() else (), dtype=m.dtype)
        # a size computed at run time (``x < t.shape[2]``): it promotes like a Python number
        for kind, sample in ((torch.SymBool, False), (torch.SymInt, 0), (torch.SymFloat, 0.0),
                             (bool, False), (int, 0), (float, 0.0)):
            if isinstance(m, kind):
                return sample
        raise ConversionError(f"{arg.name} is not a tensor or a number")
    return arg


def compute_dtype(*args: Any):
    """The dtype torch compares ``args`` in (its default type promotion)."""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    _, result = elementwise_dtypes(
        *[_proxy(a) for a in args],
        type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    return core_dtype(result)


def _out(ctx: Lowering, node: torch.fx.Node):
    return ctx.dtype(node), ctx.shape(node)


# -- unary ---------------------------------------------------------------------------------

_UNARY = {
    aten.neg.default: "neg", aten.exp.default: "exp", aten.log.default: "log",
    aten.log1p.default: "log1p", aten.expm1.default: "expm1", aten.sqrt.default: "sqrt",
    aten.rsqrt.default: "rsqrt", aten.abs.default: "abs", aten.sin.default: "sin",
    aten.cos.default: "cos", aten.tan.default: "tan", aten.tanh.default: "tanh",
    aten.sigmoid.default: "logistic", aten.erf.default: "erf", aten.floor.default: "floor",
    aten.ceil.default: "ceil", aten.round.default: "round_even", aten.sign.default: "sign",
}


@converter(*_UNARY, dtypes=NUMERIC_DTYPES)
def unary(ctx: Lowering, node: torch.fx.Node):
    dt, shape = _out(ctx, node)
    name = _UNARY[node.target]
    if not dt.is_float and name not in ("neg", "abs", "sign", "floor", "ceil", "round_even"):
        raise ConversionError(f"{name} on {dt}")
    return ctx.op(name, ctx.operand(node.args[0], dt, shape))


@converter(aten.reciprocal.default, dtypes=NUMERIC_DTYPES)
def reciprocal(ctx, node):
    dt, shape = _out(ctx, node)
    return ctx.op("div", ctx.full(1, dt, shape), ctx.operand(node.args[0], dt, shape))


@converter(aten.relu.default, dtypes=NUMERIC_DTYPES)
def relu(ctx, node):
    dt, shape = _out(ctx, node)
    return ctx.op("max", ctx.operand(node.args[0], dt, shape), ctx.full(0, dt, shape))


@converter(aten.logical_not.default, aten.bitwise_not.default, dtypes=ALL_DTYPES)
def logical_not(ctx, node):
    dt, shape = _out(ctx, node)
    x = node.args[0]
    if node.target is aten.logical_not.default:
        v = ctx.value(x)
        pred = v if v.dtype.is_bool else ctx.op("compare", v, ctx.full(0, v.dtype, v.shape),
                                                 direction="ne")
        return ctx.cast(ctx.op("not", pred), dt)
    return ctx.op("not", ctx.operand(x, dt, shape))


@converter(aten.isfinite.default, dtypes=NUMERIC_DTYPES | {torch.bool})
def isfinite(ctx, node):
    v = ctx.value(node.args[0])
    if not v.dtype.is_float:
        return ctx.full(True, ctx.dtype(node), ctx.shape(node))
    return ctx.op("is_finite", v)


# -- binary --------------------------------------------------------------------------------

_BINARY = {
    aten.add.Tensor: "add", aten.add.Scalar: "add", aten.sub.Tensor: "sub",
    aten.sub.Scalar: "sub", aten.mul.Tensor: "mul", aten.mul.Scalar: "mul",
    aten.div.Tensor: "div", aten.div.Scalar: "div", aten.true_divide.Tensor: "div",
    aten.maximum.default: "max",
    aten.minimum.default: "min", aten.atan2.default: "atan2",
    aten.bitwise_and.Tensor: "and", aten.bitwise_or.Tensor: "or",
    aten.bitwise_xor.Tensor: "xor", aten.bitwise_and.Scalar: "and",
    aten.bitwise_or.Scalar: "or", aten.bitwise_xor.Scalar: "xor",
    aten.fmod.Tensor: "rem", aten.fmod.Scalar: "rem",
}


def _no_alpha(node: torch.fx.Node) -> str | None:
    alpha = node.kwargs.get("alpha", 1)
    return None if isinstance(alpha, (int, float)) else "alpha computed at run time"


@converter(*_BINARY, dtypes=ALL_DTYPES, check=_no_alpha)
def binary(ctx, node):
    dt, shape = _out(ctx, node)
    a, b = node.args[:2]
    name = _BINARY[node.target]
    if name in ("and", "or", "xor") and dt.is_float:
        raise ConversionError(f"bitwise {name} on {dt}")
    if dt.is_bool:  # torch's bool arithmetic: max/add are "or", min/mul are "and"
        name = {"max": "or", "add": "or", "min": "and", "mul": "and"}.get(name, name)
        if name in ("sub", "div", "atan2", "rem"):
            raise ConversionError(f"{name} on bool")
    x, y = ctx.operand(a, dt, shape), ctx.operand(b, dt, shape)
    alpha = node.kwargs.get("alpha", 1)
    if alpha != 1:
        y = ctx.op("mul", y, ctx.full(alpha, dt, shape))
    if name == "div" and not dt.is_float:
        raise ConversionError("true division in an integer dtype")
    return ctx.op(name, x, y)


@converter(aten.div.Tensor_mode, aten.div.Scalar_mode, dtypes=NUMERIC_DTYPES)
def div_mode(ctx, node):
    dt, shape = _out(ctx, node)
    mode = node.kwargs.get("rounding_mode", node.args[2] if len(node.args) > 2 else None)
    x, y = ctx.operand(node.args[0], dt, shape), ctx.operand(node.args[1], dt, shape)
    if not dt.is_float:
        if mode not in ("trunc", "floor"):
            raise ConversionError(f"integer division with rounding_mode={mode!r}")
        q = ctx.op("div", x, y)  # C integer division truncates
        if mode == "trunc" or not dt.is_signed:
            return q
        # floor: one less where the division was inexact and the signs differ (the
        # remainder, which takes the dividend's sign, then differs in sign from y)
        zero = ctx.full(0, dt, shape)
        r = ctx.op("rem", x, y)
        inexact = ctx.op("compare", r, zero, direction="ne")
        signs = ctx.op("xor", ctx.op("compare", r, zero, direction="lt"),
                       ctx.op("compare", y, zero, direction="lt"))
        return ctx.op("sub", q, ctx.cast(ctx.op("and", inexact, signs), dt))
    q = ctx.op("div", x, y)
    if mode is None:
        return q
    if mode == "floor":
        return ctx.op("floor", q)
    if mode == "trunc":
        neg = ctx.op("compare", q, ctx.full(0, dt, shape), direction="lt")
        return ctx.op("select", neg, ctx.op("ceil", q), ctx.op("floor", q))
    raise ConversionError(f"rounding_mode={mode!r}")


@converter(aten.remainder.Tensor, aten.remainder.Scalar, dtypes=FLOAT_DTYPES)
def remainder(ctx, node):
    """Python-style modulo: the result takes the sign of the divisor."""
    dt, shape = _out(ctx, node)
    x, y = ctx.operand(node.args[0], dt, shape), ctx.operand(node.args[1], dt, shape)
    return ctx.op("sub", x, ctx.op("mul", ctx.op("floor", ctx.op("div", x, y)), y))


_LOGICAL = {aten.logical_and.default: "and", aten.logical_or.default: "or",
            aten.logical_xor.default: "xor"}


@converter(*_LOGICAL, dtypes=ALL_DTYPES)
def logical(ctx, node):
    dt, shape = _out(ctx, node)
    preds = []
    for arg in node.args[:2]:
        v = ctx.value(arg)
        if not v.dtype.is_bool:
            v = ctx.op("compare", v, ctx.full(0, v.dtype, v.shape), direction="ne")
        preds.append(ctx.broadcast_to(v, shape))
    return ctx.cast(ctx.op(_LOGICAL[node.target], *preds), dt)


_COMPARE = {"eq": aten.eq, "ne": aten.ne, "lt": aten.lt, "le": aten.le, "gt": aten.gt,
            "ge": aten.ge}
_DIRECTION = {getattr(p, o): d for d, p in _COMPARE.items() for o in ("Tensor", "Scalar")}


@converter(*_DIRECTION, dtypes=ALL_DTYPES)
def compare(ctx, node):
    dt, shape = _out(ctx, node)
    a, b = node.args[:2]
    cdt = compute_dtype(a, b)
    direction = _DIRECTION[node.target]
    x, y = ctx.operand(a, cdt, shape), ctx.operand(b, cdt, shape)
    if cdt.is_bool and direction not in ("eq", "ne"):
        x, y = ctx.cast(x, core_dtype(torch.uint8)), ctx.cast(y, core_dtype(torch.uint8))
    return ctx.cast(ctx.op("compare", x, y, direction=direction), dt)


def _pow_check(node):
    exp = node.args[1]
    if node.target is aten.pow.Scalar:
        return None
    if isinstance(exp, torch.fx.Node) and not Lowering.is_tensor(exp):
        return "exponent computed at run time"
    return None


@converter(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar,
           dtypes=NUMERIC_DTYPES, check=_pow_check)
def pow_(ctx, node):
    dt, shape = _out(ctx, node)
    base, exp = node.args[:2]
    if isinstance(exp, (int, float)) and float(exp).is_integer() and 0 <= exp <= 4:
        x = ctx.operand(base, dt, shape)
        out = ctx.full(1, dt, shape) if exp == 0 else x
        for _ in range(int(exp) - 1):
            out = ctx.op("mul", out, x)
        return out
    if isinstance(exp, (int, float)) and exp == 0.5 and dt.is_float:
        return ctx.op("sqrt", ctx.operand(base, dt, shape))
    if isinstance(exp, (int, float)) and exp == -1 and dt.is_float:
        return ctx.op("div", ctx.full(1, dt, shape), ctx.operand(base, dt, shape))
    if not dt.is_float:
        raise ConversionError("integer pow with a tensor or large exponent")
    return ctx.op("pow", ctx.operand(base, dt, shape), ctx.operand(exp, dt, shape))


@converter(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar,
           dtypes=ALL_DTYPES)
def where(ctx, node):
    dt, shape = _out(ctx, node)
    cond, a, b = node.args[:3]
    pred = ctx.value(cond)
    if not pred.dtype.is_bool:
        pred = ctx.op("compare", pred, ctx.full(0, pred.dtype, pred.shape), direction="ne")
    return ctx.op("select", ctx.broadcast_to(pred, shape), ctx.operand(a, dt, shape),
                  ctx.operand(b, dt, shape))


def _clamp_check(node):
    for bound in node.args[1:3]:
        if isinstance(bound, torch.fx.Node) and not Lowering.is_tensor(bound):
            return "clamp bound computed at run time"
    return None


@converter(aten.clamp.default, aten.clamp.Tensor, aten.clamp_min.default,
           aten.clamp_max.default, aten.clamp_min.Tensor, aten.clamp_max.Tensor,
           dtypes=NUMERIC_DTYPES, check=_clamp_check)
def clamp(ctx, node):
    dt, shape = _out(ctx, node)
    x = ctx.operand(node.args[0], dt, shape)
    packet = node.target.overloadpacket
    if packet is aten.clamp_min:
        lo, hi = node.args[1], None
    elif packet is aten.clamp_max:
        lo, hi = None, node.args[1]
    else:
        lo = node.args[1] if len(node.args) > 1 else node.kwargs.get("min")
        hi = node.args[2] if len(node.args) > 2 else node.kwargs.get("max")
    if lo is not None:
        x = ctx.op("max", x, ctx.operand(lo, dt, shape))
    if hi is not None:
        x = ctx.op("min", x, ctx.operand(hi, dt, shape))
    return x


# -- activations that survive decomposition -----------------------------------------------

def _gelu_check(node):
    approx = node.kwargs.get("approximate", "none")
    return None if approx in ("none", "tanh") else f"gelu approximate={approx!r}"


@converter(aten.gelu.default, dtypes=FLOAT_DTYPES, check=_gelu_check)
def gelu(ctx, node):
    dt, shape = _out(ctx, node)
    x = ctx.operand(node.args[0], dt, shape)
    c = lambda v: ctx.full(v, dt, shape)  # noqa: E731
    half_x = ctx.op("mul", x, c(0.5))
    if node.kwargs.get("approximate", "none") == "tanh":
        inner = ctx.op("mul", ctx.op("add", x, ctx.op("mul", c(0.044715),
                                                       ctx.op("mul", x, ctx.op("mul", x, x)))),
                       c(math.sqrt(2 / math.pi)))
        return ctx.op("mul", half_x, ctx.op("add", c(1.0), ctx.op("tanh", inner)))
    return ctx.op("mul", half_x,
                  ctx.op("add", c(1.0), ctx.op("erf", ctx.op("mul", x, c(math.sqrt(0.5))))))


@converter(aten.leaky_relu.default, dtypes=FLOAT_DTYPES)
def leaky_relu(ctx, node):
    dt, shape = _out(ctx, node)
    x = ctx.operand(node.args[0], dt, shape)
    slope = node.args[1] if len(node.args) > 1 else node.kwargs.get("negative_slope", 0.01)
    pos = ctx.op("compare", x, ctx.full(0, dt, shape), direction="gt")
    return ctx.op("select", pos, x, ctx.op("mul", x, ctx.full(slope, dt, shape)))


@converter(aten.hardtanh.default, dtypes=FLOAT_DTYPES)
def hardtanh(ctx, node):
    dt, shape = _out(ctx, node)
    lo = node.args[1] if len(node.args) > 1 else node.kwargs.get("min_val", -1.0)
    hi = node.args[2] if len(node.args) > 2 else node.kwargs.get("max_val", 1.0)
    x = ctx.operand(node.args[0], dt, shape)
    return ctx.op("min", ctx.op("max", x, ctx.full(lo, dt, shape)), ctx.full(hi, dt, shape))
