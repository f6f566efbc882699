"""The inverse of a strided slice, as the bridges' slice gradients and scatters build it.

A slice ``start : start + (n - 1) * step + 1 : step`` of a dim reads n elements; its
gradient (and torch's ``slice_scatter``) lays n elements back at those places. With
``step > 1`` each element is followed by ``step - 1`` fills (a pad of a new unit axis,
merged back), cropped to the room left after ``start``: interior padding would say the
same, but its size rule assumes a non-empty operand, and a symbolic length may be 0.
"""

from __future__ import annotations

from typing import Any

from ..ir import Value
from ..symbolic import as_expr, smin

__all__ = ["spread"]


def spread(ctx: Any, v: Value, fill: Value, axis: int, step: int, room: Any) -> Value:
    """``v`` with ``step - 1`` copies of the rank-0 ``fill`` after every element along
    ``axis``, at most ``room`` elements long (``v`` itself when ``step`` is 1). ``ctx`` is a
    bridge's :class:`~disc_core.bridge.context.LoweringContext`."""
    if step == 1:
        return v
    n = v.shape[axis]
    zero = as_expr(0)
    wide = list(v.shape[:axis + 1]) + [as_expr(1)] + list(v.shape[axis + 1:])
    high = [zero] * len(wide)
    high[axis + 1] = as_expr(step - 1)
    w = ctx.op("pad", ctx.reshape(v, wide), fill, low=[zero] * len(wide), high=high)
    flat = list(v.shape)
    flat[axis] = n * step
    w = ctx.reshape(w, flat)
    limits = list(w.shape)
    limits[axis] = smin(n * step, room)
    return ctx.op("slice", w, start=[zero] * w.rank, limit=limits)

