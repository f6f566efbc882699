"""Elementwise math, comparisons, casts, activations and their gradients."""

from __future__ import annotations

from typing import Any

from disc_core.ir import Value

from ..lowering import Lowering
from .registry import NUMERIC_DTYPES, converter


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


@converter("pd_op.add", dtypes=NUMERIC_DTYPES)
def add(ctx: Lowering, op: Any) -> Value:
    a, b = ctx.broadcast_all(ctx.input(op, 0), ctx.input(op, 1))
    return ctx.op("add", a, b)


@converter("pd_op.add_grad", dtypes=NUMERIC_DTYPES)
def add_grad(ctx: Lowering, op: Any) -> list[Value | None]:
    x, y, dout = ctx.input(op, 0), ctx.input(op, 1), ctx.input(op, 2)
    return [sum_to(ctx, dout, list(x.shape)) if op.result(0).initialized() else None,
            sum_to(ctx, dout, list(y.shape)) if op.result(1).initialized() else None]


@converter("pd_op.relu")
def relu(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    return ctx.op("max", x, ctx.full(0, x.dtype, x.shape))


@converter("pd_op.relu_grad")
def relu_grad(ctx: Lowering, op: Any) -> Value:
    out, dout = ctx.broadcast_all(ctx.input(op, 0), ctx.input(op, 1))
    zero = ctx.full(0, out.dtype, out.shape)
    return ctx.op("select", ctx.op("compare", out, zero, direction="gt"), dout, zero)
