"""Shape computations (folded at compile time), constants, data movement and creation."""

from __future__ import annotations

from typing import Any

import numpy as np

from disc_core.symbolic import Expr

from ..lowering import ConversionError, Lowering, core_dtype, known_array
from .registry import ALL_DTYPES, Known, converter

MAX_KNOWN = 64  # fold integer tensors up to this many elements (shapes, indices)


@converter("pd_op.full_int_array", dtypes=ALL_DTYPES)
def full_int_array(ctx: Lowering, op: Any) -> Known:
    vals = [int(x) for x in ctx.attr(op, "value")]
    return Known(np.asarray(vals, dtype=core_dtype(op.result(0).dtype).np))


@converter("pd_op.full", dtypes=ALL_DTYPES)
def full(ctx: Lowering, op: Any) -> Any:
    shape = [int(d) for d in ctx.attr(op, "shape")]
    dtype = core_dtype(op.result(0).dtype)
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


@converter("pd_op.slice", dtypes=ALL_DTYPES)
def slice_(ctx: Lowering, op: Any) -> Any:
    x = ctx.operand(op, 0)
    k = ctx.known(x)
    axes = [int(a) for a in ctx.attr(op, "axes")]
    starts = ctx.int_list(op, 1, "starts", "slice starts")
    ends = ctx.int_list(op, 2, "ends", "slice ends")
    decrease = [int(a) for a in ctx.attr(op, "decrease_axis", [])]
    if k is None:
        raise ConversionError("pd_op.slice of a tensor is not converted yet")
    if k.ndim != 1 or axes != [0] or any(isinstance(e, Expr) for e in starts + ends):
        raise ConversionError("pd_op.slice of a known value: only a 1-D static slice")
    n = k.shape[0]
    s, e = starts[0], ends[0]
    s = max(0, s + n if s < 0 else s)
    e = min(n, e + n if e < 0 else e)
    out = k[s:e]
    if decrease == [0]:
        out = out.reshape(())
    return Known(out)
