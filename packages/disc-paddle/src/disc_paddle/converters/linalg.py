"""Matrix products and their gradients."""

from __future__ import annotations

from typing import Any

from disc_core.ir import Value

from ..lowering import ConversionError, Lowering
from .registry import FLOAT_DTYPES, converter


@converter("pd_op.matmul", dtypes=FLOAT_DTYPES)
def matmul(ctx: Lowering, op: Any) -> Value:
    x, y = ctx.input(op, 0), ctx.input(op, 1)
    if x.rank != 2 or y.rank != 2:
        raise ConversionError("pd_op.matmul: only 2-D operands are converted yet")
    if ctx.attr(op, "transpose_x", False):
        x = ctx.op("transpose", x, permutation=[1, 0])
    if ctx.attr(op, "transpose_y", False):
        y = ctx.op("transpose", y, permutation=[1, 0])
    return ctx.op("dot_general", x, y, lhs_batch=[], rhs_batch=[], lhs_contract=[1],
                  rhs_contract=[0])
