"""Pooling as sums/maxima of strided window taps (fused by the native engine into one loop).

``avg_pool2d``/``avg_pool3d`` keep their core-ATen form; max pooling arrives decomposed by
torch. Each window tap is a strided slice of the (padded) input; the output extents come
from the recorded fake tensor, so symbolic spatial sizes need no arithmetic here.
"""

from __future__ import annotations

import itertools

import torch

from disc_core.symbolic import Expr

from .registry import FLOAT_DTYPES, converter

aten = torch.ops.aten


def _avg_check(node):
    args = list(node.args) + [None] * 7
    ceil_mode = args[4] if args[4] is not None else node.kwargs.get("ceil_mode", False)
    if ceil_mode:
        return "ceil_mode=True"
    for v in (args[1], args[2] or [], args[3] or []):
        if not all(isinstance(x, int) for x in v):
            return "window computed at run time"
    return None


def _window_sum(ctx, x, kernel, stride, out_spatial):
    n = len(kernel)
    lead = list(x.shape[:-n])
    total = None
    for tap in itertools.product(*(range(k) for k in kernel)):
        start = [Expr.const(0)] * len(lead) + [Expr.const(t) for t in tap]
        limit = lead + [Expr.const(t) + (o - 1) * s + 1
                        for t, o, s in zip(tap, out_spatial, stride)]
        part = ctx.op("slice", x, start=start, limit=limit, stride=[1] * len(lead) + stride)
        total = part if total is None else ctx.op("add", total, part)
    return total


@converter(aten.avg_pool2d.default, aten.avg_pool3d.default, dtypes=FLOAT_DTYPES,
           check=_avg_check)
def avg_pool(ctx, node):
    args = list(node.args) + [None] * 7
    x = ctx.value(args[0])
    n = 2 if node.target is aten.avg_pool2d.default else 3
    expand = (lambda v, d: list(v) * n if len(v) == 1 else list(v) if v else d)  # noqa: E731
    kernel = expand(args[1], None)
    stride = expand(args[2] or [], kernel)
    padding = expand(args[3] or [], [0] * n)
    count_include_pad = args[5] if args[5] is not None else node.kwargs.get(
        "count_include_pad", True)
    divisor = args[6] if args[6] is not None else node.kwargs.get("divisor_override")
    shape = ctx.shape(node)
    out_spatial = list(shape[-n:])
    lead = x.rank - n
    zero = ctx.scalar(0, x.dtype)
    padded = x if not any(padding) else ctx.op(
        "pad", x, zero, low=[0] * lead + padding, high=[0] * lead + padding,
        interior=[0] * x.rank)
    total = _window_sum(ctx, padded, kernel, stride, out_spatial)
    if divisor:
        return ctx.op("div", total, ctx.full(divisor, x.dtype, shape))
    if count_include_pad or not any(padding):
        count = 1
        for k in kernel:
            count *= k
        return ctx.op("div", total, ctx.full(count, x.dtype, shape))
    ones = ctx.op("pad", ctx.full(1, x.dtype, x.shape), zero, low=[0] * lead + padding,
                  high=[0] * lead + padding, interior=[0] * x.rank)
    return ctx.op("div", total, _window_sum(ctx, ones, kernel, stride, out_spatial))
