"""Pooling as sums/maxima of strided window taps (fused by the native engine into one loop).

``avg_pool2d/3d`` and ``max_pool2d/3d_with_indices`` keep their core-ATen form (torch's
max-pool decomposition gathers through index tensors, which vectorizes poorly);
the max-pool backward arrives decomposed by torch. Each window tap is a strided slice of
the (padded) input; the output extents come from the recorded fake tensor, so symbolic
spatial sizes need no arithmetic here.
"""

from __future__ import annotations

import itertools

import torch

from disc_core.dtypes import DType
from disc_core.symbolic import Expr, smax

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


def _max_check(node):
    args = list(node.args) + [None] * 6
    if args[5] if args[5] is not None else node.kwargs.get("ceil_mode", False):
        return "ceil_mode=True"
    for v in (args[1], args[2] or [], args[3] or [0], args[4] or [1]):
        if not all(isinstance(x, int) for x in v):
            return "window computed at run time"
    return None


@converter(aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default,
           dtypes=FLOAT_DTYPES, check=_max_check)
def max_pool_with_indices(ctx, node):
    """The maximum over the window taps, and torch's index of it (flat over the input's
    spatial dims; the first maximum wins, NaN propagates, as in torch's CPU kernel). Padding
    is -inf, so a padded position never wins."""
    args = list(node.args) + [None] * 6
    x = ctx.value(args[0])
    n = 2 if node.target is aten.max_pool2d_with_indices.default else 3
    expand = (lambda v, d: list(v) * n if len(v) == 1 else list(v) if v else d)  # noqa: E731
    kernel = expand(args[1], None)
    stride = expand(args[2] or [], kernel)
    padding = expand(args[3] or [], [0] * n)
    dilation = expand(args[4] or [], [1] * n)
    out_shape = ctx.shape(node.meta["val"][0])
    out_spatial = list(out_shape[-n:])
    lead = x.rank - n
    padded = x if not any(padding) else ctx.op(
        "pad", x, ctx.scalar(float("-inf"), x.dtype), low=[0] * lead + padding,
        high=[0] * lead + padding, interior=[0] * x.rank)
    # per spatial dim: the input coordinate of output position o at tap t is
    # o * stride + t * dilation - padding
    coords = [ctx.op("iota", shape=list(out_shape), dimension=lead + k, dtype=DType.I64)
              for k in range(n)]
    values, positions = [], []
    for tap in itertools.product(*(range(k) for k in kernel)):
        starts = [t * d for t, d in zip(tap, dilation)]
        start = [Expr.const(0)] * lead + [Expr.const(s) for s in starts]
        limit = list(padded.shape[:lead]) + [Expr.const(s) + (o - 1) * st + 1
                                             for s, o, st in zip(starts, out_spatial, stride)]
        values.append(ctx.op("slice", padded, start=start, limit=limit,
                             stride=[1] * lead + stride))
        flat = None
        for k in range(n):
            pos = ctx.op("add", ctx.op("mul", coords[k], ctx.full(stride[k], DType.I64,
                                                                  out_shape)),
                         ctx.full(starts[k] - padding[k], DType.I64, out_shape))
            if flat is None:
                flat = pos
            else:
                size = ctx.broadcast_to(ctx.b.dim_size(x, lead + k), out_shape)
                flat = ctx.op("add", ctx.op("mul", flat, size), pos)
        positions.append(flat)
    # the maximum: a later tap wins when greater or NaN
    best = values[0]
    for v in values[1:]:
        take = ctx.op("or", ctx.op("compare", v, best, direction="gt"),
                      ctx.op("compare", v, v, direction="ne"))
        best = ctx.op("select", take, v, best)
    # its index, found afterwards: the first tap equal to the maximum, or the last NaN tap
    # when the maximum is NaN (what the update rule above picks). Two chains of selects on
    # one comparison each, rather than the index riding along the value chain: gcc does
    # not vectorize a loop whose int64 selects test an OR of two float comparisons
    first_equal = positions[-1]
    for v, pos in zip(values[-2::-1], positions[-2::-1]):
        first_equal = ctx.op("select", ctx.op("compare", v, best, direction="eq"), pos,
                             first_equal)
    last_nan = positions[0]
    for v, pos in zip(values[1:], positions[1:]):
        last_nan = ctx.op("select", ctx.op("compare", v, v, direction="ne"), pos, last_nan)
    best_idx = ctx.op("select", ctx.op("compare", best, best, direction="ne"), last_nan,
                      first_equal)
    return best, best_idx


def _avg_backward_check(node):
    args = list(node.args) + [None] * 8
    if args[5]:
        return "ceil_mode=True"
    for v in (args[2], args[3] or [], args[4] or []):
        if not all(isinstance(x, int) for x in v):
            return "window computed at run time"
    return None


@converter(aten.avg_pool2d_backward.default, aten.avg_pool3d_backward.default,
           dtypes=FLOAT_DTYPES, check=_avg_backward_check)
def avg_pool_backward(ctx, node):
    """Each output's gradient, divided by its window's divisor, goes back to every input
    its window covered: per kernel tap, the divided gradient is spread ``stride`` apart
    (interior padding) and shifted by the tap minus the padding (edge padding, cropping
    where negative), and the taps are summed. No scatter: the native engine fuses the taps
    into one loop whose reads test ``(i - low) % stride``. Divisors as in the forward
    (``divisor_override``, the full window, or the in-bounds count when padding is
    excluded)."""
    args = list(node.args) + [None] * 8
    dy, x = ctx.value(args[0]), ctx.value(args[1])
    n = 2 if node.target is aten.avg_pool2d_backward.default else 3
    expand = (lambda v, d: list(v) * n if len(v) == 1 else list(v) if v else d)  # noqa: E731
    kernel = expand(args[2], None)
    stride = expand(args[3] or [], kernel)
    padding = expand(args[4] or [], [0] * n)
    count_include_pad, divisor = args[6], args[7]
    lead = x.rank - n
    out_spatial = list(dy.shape[lead:])
    zero = ctx.scalar(0, x.dtype)
    if divisor:
        g = ctx.op("div", dy, ctx.full(divisor, x.dtype, dy.shape))
    elif count_include_pad or not any(padding):
        count = 1
        for k in kernel:
            count *= k
        g = ctx.op("div", dy, ctx.full(count, x.dtype, dy.shape))
    else:
        ones = ctx.op("pad", ctx.full(1, x.dtype, x.shape), zero, low=[0] * lead + padding,
                      high=[0] * lead + padding, interior=[0] * x.rank)
        g = ctx.op("div", dy, _window_sum(ctx, ones, kernel, stride, out_spatial))
    if stride == kernel and not any(padding):
        return _spread_over_tiles(ctx, g, x, kernel)
    total = None
    for tap in itertools.product(*(range(k) for k in kernel)):
        # output o of this tap read input o * stride + tap - padding
        low = [t - p for t, p in zip(tap, padding)]
        # whatever remains of the input after the spread gradient: written with pad's own
        # size rule (o + max(o - 1, 0) * (s - 1) for o outputs), so the result is exactly
        # x's dims, symbolically too
        high = [h - lo - o - smax(o - 1, 0) * (s - 1)
                for h, lo, o, s in zip(x.shape[lead:], low, out_spatial, stride)]
        part = ctx.op("pad", g, zero, low=[0] * lead + low, high=[Expr.const(0)] * lead + high,
                      interior=[0] * lead + [s - 1 for s in stride])
        total = part if total is None else ctx.op("add", total, part)
    return total


def _spread_over_tiles(ctx, g, x, kernel, fill=0):
    """The gradient of non-overlapping windows (stride == kernel, no padding, the usual
    ``avg_pool2d(x, 2)``): every input of window ``o`` gets ``g[o]``, so it is ``g`` with each
    element repeated ``k`` times per spatial dim (a broadcast to [..., o, k, ...] viewed as
    [..., o * k, ...]), then ``fill`` (zeros) for the rows and columns floor division left out.

    The tap sum of the general case would test ``(i - tap) % stride`` for every tap at
    every element; here each element is one read at ``i / k``."""
    n = len(kernel)
    lead = x.rank - n
    rest = [h - o * k for h, o, k in zip(x.shape[lead:], g.shape[lead:], kernel)]
    exact = [r.is_const and r.value == 0 for r in rest]
    if not all(exact):
        # rows and columns no window covered (fewer than k: floor division) read a zero
        # tile: one more zero row and column on the small gradient, and the spread cut to
        # x's size. A pad of the spread itself would be a guarded read, which fusion
        # materializes (the whole upsampled gradient written, then read back); this way
        # the consumer computes the spread in place (``Reshape``'s tile indexing) and only
        # ``g`` is in memory
        g = ctx.op("pad", g, ctx.scalar(fill, g.dtype), low=[Expr.const(0)] * x.rank,
                   high=[Expr.const(0)] * lead + [Expr.const(int(not e)) for e in exact],
                   interior=[0] * x.rank)
    spatial = list(g.shape[lead:])
    tiled = list(g.shape[:lead])
    for o, k in zip(spatial, kernel):
        tiled += [o, Expr.const(k)]
    spread = ctx.op("broadcast_in_dim", g, shape=tiled,
                    broadcast_dimensions=list(range(lead)) + [lead + 2 * j for j in range(n)])
    up = ctx.reshape(spread, list(g.shape[:lead]) + [o * k for o, k in zip(spatial, kernel)])
    if all(exact):
        return up
    return ctx.op("slice", up, start=[Expr.const(0)] * x.rank, limit=list(x.shape),
                  stride=[1] * x.rank)

