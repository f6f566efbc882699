"""Depthwise convolutions (``DepthwiseConv2dNative`` and its two gradients) as window taps.

A depthwise convolution convolves each input channel ``c`` with its own ``M`` filters
(``filter[kh, kw, c, m]``) and writes output channel ``c * M + m``. It is a grouped
convolution with one group per channel, but the native engine lowers a grouped
convolution to one GEMM per group plus a concatenation: hundreds of K = 9 GEMMs and a
kernel with hundreds of inputs for a MobileNet block, which took minutes to compile. So it
is written here the way pooling is (:mod:`.nn`): per kernel tap ``t``, a strided slice of
the padded input multiplied by that tap's per-channel weights, summed over the taps;
elementwise work the engine fuses into one loop. The gradients are the same taps run
backwards: the input gradient scatters each tap's weighted output gradient back with
interior (stride) and edge (tap offset) padding, the filter gradient reduces each tap's
product with the output gradient over the batch and positions. Windows, dilations and
run-time ``SAME`` padding follow TensorFlow's rules as in :mod:`.nn`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from disc_core.ir import Value
from disc_core.symbolic import Expr, as_expr, floordiv

from ..lowering import ConversionError, Lowering
from .math import reduce
from .nn import _SPATIAL, _format, _pad_spatial, _pads, _per_spatial, _spatial_dims
from .registry import FLOAT_DTYPES, converter


class _Depthwise:
    """One depthwise op's geometry: taps, strides, dilations, padding, output sizes, and
    the channel (C) and multiplier (M) counts of its static filter."""

    def __init__(self, op: tf.Operation, input_shape: Sequence[Any],
                 filter_shape: Sequence[Any], grad: Value | None = None):
        self.fmt = _format(op)
        self.strides = _per_spatial(op, "strides", self.fmt)
        self.dilations = _per_spatial(op, "dilations", self.fmt)
        dims = [as_expr(d) for d in filter_shape]
        if len(dims) != 4 or not all(d.is_const for d in dims):
            raise ConversionError(f"depthwise filter shape {list(filter_shape)} must be 4 "
                                  "static sizes")
        self.kernel = [dims[0].value, dims[1].value]
        self.c, self.m = dims[2].value, dims[3].value
        if min(self.kernel + [self.c, self.m]) < 1:
            raise ConversionError(f"depthwise filter shape {list(filter_shape)} is empty")
        self.sizes = _spatial_dims(input_shape, self.fmt)
        windows = [(k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations)]
        self.pads = _pads(op, self.fmt, self.sizes, windows, self.strides)
        self.out = [floordiv(n + lo + hi - w, s) + 1 for n, (lo, hi), w, s in
                    zip(self.sizes, self.pads, windows, self.strides)]
        if grad is not None:
            # a gradient fed from another cluster has dims of its own symbols; they equal
            # the output sizes at run time, and taking them keeps every shape exact
            self.out = _spatial_dims(grad.shape, self.fmt)
        self.cdim = self.fmt.index("C")

    def taps(self) -> list[tuple[int, int]]:
        return list(itertools.product(*(range(k) for k in self.kernel)))

    def offset(self, tap: Sequence[int], j: int) -> int:
        return tap[j] * self.dilations[j]

    def tap(self, ctx: Lowering, padded: Value, tap: Sequence[int]) -> Value:
        """The padded input each output position reads at kernel tap ``tap``."""
        start: list[Any] = [0] * 4
        limit: list[Any] = list(padded.shape)
        stride = [1] * 4
        for j, ch in enumerate(_SPATIAL):
            k = self.fmt.index(ch)
            start[k] = self.offset(tap, j)
            limit[k] = Expr.const(self.offset(tap, j)) + (self.out[j] - 1) * self.strides[j] + 1
            stride[k] = self.strides[j]
        return ctx.op("slice", padded, start=start, limit=limit, stride=stride)

    def scatter(self, ctx: Lowering, g: Value, tap: Sequence[int], shape: Sequence[Any]
                ) -> Value:
        """The inverse of :meth:`tap`: ``g`` (output-sized) put back at the input positions
        tap ``tap`` read, zeros elsewhere, cropped to the input's ``shape``."""
        low: list[Any] = [0] * 4
        high: list[Any] = [Expr.const(0)] * 4
        interior = [0] * 4
        for j, ch in enumerate(_SPATIAL):
            k = self.fmt.index(ch)
            lo = Expr.const(self.offset(tap, j)) - self.pads[j][0]
            low[k] = lo
            high[k] = as_expr(shape[k]) - lo - (self.out[j] - 1) * self.strides[j] - 1
            interior[k] = self.strides[j] - 1
        zero = ctx.b.constant(np.zeros((), g.dtype.np), g.dtype)
        return ctx.op("pad", g, zero, low=low, high=high, interior=interior)

    # the channel multiplier as its own axis right after the channels: [.., C, M, ..]
    def split_m(self, ctx: Lowering, v: Value) -> Value:
        """An output-layout value ([.., C*M, ..]) with its channels split into C and M."""
        shape = list(v.shape)
        return ctx.reshape(v, shape[:self.cdim] + [self.c, self.m] + shape[self.cdim + 1:])

    def merge_m(self, ctx: Lowering, v: Value) -> Value:
        shape = list(v.shape)
        return ctx.reshape(v, shape[:self.cdim] + [self.c * self.m] + shape[self.cdim + 2:])

    def spread(self, ctx: Lowering, v: Value) -> Value:
        """An input-layout value ([.., C, ..]) broadcast over the multiplier axis."""
        shape = list(v.shape)
        out = shape[:self.cdim] + [self.c, self.m] + shape[self.cdim + 1:]
        dims = [i if i <= self.cdim else i + 1 for i in range(4)]
        return ctx.op("broadcast_in_dim", v, shape=out, broadcast_dimensions=dims)

    def weights(self, ctx: Lowering, f: Value, tap: Sequence[int], like: Value) -> Value:
        """The tap's weights ``f[kh, kw]`` ([C, M]) broadcast to ``like`` ([.., C, M, ..])."""
        w = ctx.op("slice", f, start=[tap[0], tap[1], 0, 0],
                   limit=[tap[0] + 1, tap[1] + 1, self.c, self.m], stride=[1] * 4)
        w = ctx.reshape(w, [self.c, self.m])
        return ctx.op("broadcast_in_dim", w, shape=list(like.shape),
                      broadcast_dimensions=[self.cdim, self.cdim + 1])


def _sum(ctx: Lowering, parts: list[Value]) -> Value:
    total = parts[0]
    for p in parts[1:]:
        total = ctx.op("add", total, p)
    return total


@converter("DepthwiseConv2dNative", dtypes=FLOAT_DTYPES)
def depthwise_conv2d(ctx: Lowering, op: tf.Operation) -> Value:
    """``y[.., c*M + m] = sum_t tap_t(x)[.., c] * f[t, c, m]``."""
    x, f = ctx.value(op.inputs[0]), ctx.value(op.inputs[1])
    dw = _Depthwise(op, x.shape, f.shape)
    padded = _pad_spatial(ctx, x, dw.fmt, dw.pads, 0.0)
    parts = []
    for t in dw.taps():
        xt = dw.spread(ctx, dw.tap(ctx, padded, t))
        parts.append(ctx.op("mul", xt, dw.weights(ctx, f, t, xt)))
    return dw.merge_m(ctx, _sum(ctx, parts))


@converter("DepthwiseConv2dNativeBackpropInput", dtypes=FLOAT_DTYPES)
def depthwise_conv2d_backprop_input(ctx: Lowering, op: tf.Operation) -> Value:
    """``dx = sum_t scatter_t(sum_m dy[.., c, m] * f[t, c, m])``."""
    f, dy = ctx.value(op.inputs[1]), ctx.value(op.inputs[2])
    shape = ctx.dims(op.inputs[0], "DepthwiseConv2dNativeBackpropInput input_sizes")
    if len(shape) != 4:
        raise ConversionError(f"input_sizes {shape} is not 4-D")
    dw = _Depthwise(op, shape, f.shape, dy)
    dy5 = dw.split_m(ctx, dy)
    parts = []
    for t in dw.taps():
        g = reduce(ctx, ctx.op("mul", dy5, dw.weights(ctx, f, t, dy5)), "sum", [dw.cdim + 1])
        parts.append(dw.scatter(ctx, g, t, shape))
    return _sum(ctx, parts)


@converter("DepthwiseConv2dNativeBackpropFilter", dtypes=FLOAT_DTYPES)
def depthwise_conv2d_backprop_filter(ctx: Lowering, op: tf.Operation) -> Value:
    """``df[t, c, m] = sum over batch and positions of tap_t(x)[.., c] * dy[.., c, m]``,
    one reduction per tap, stacked into ``[KH, KW, C, M]``."""
    x, dy = ctx.value(op.inputs[0]), ctx.value(op.inputs[2])
    fshape = ctx.dims(op.inputs[1], "DepthwiseConv2dNativeBackpropFilter filter_sizes")
    dw = _Depthwise(op, x.shape, fshape, dy)
    padded = _pad_spatial(ctx, x, dw.fmt, dw.pads, 0.0)
    dy5 = dw.split_m(ctx, dy)
    others = [i for i in range(5) if i not in (dw.cdim, dw.cdim + 1)]
    parts = []
    for t in dw.taps():
        prod = ctx.op("mul", dw.spread(ctx, dw.tap(ctx, padded, t)), dy5)
        parts.append(ctx.reshape(reduce(ctx, prod, "sum", others), [1, dw.c, dw.m]))
    stacked = parts[0] if len(parts) == 1 else ctx.op("concatenate", *parts, dimension=0)
    return ctx.reshape(stacked, [*dw.kernel, dw.c, dw.m])
