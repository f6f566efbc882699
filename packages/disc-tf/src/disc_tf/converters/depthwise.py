"""Depthwise convolutions (``DepthwiseConv2dNative`` and its two gradients) as grouped
convolutions.

A depthwise convolution convolves each input channel ``c`` with its own ``M`` filters
(``filter[kh, kw, c, m]``) and writes output channel ``c * M + m``. That is exactly a
convolution with ``feature_group_count = C``: group ``c`` reads input feature ``c`` and
produces output features ``c * M .. c * M + M - 1``, whose HWIO kernel is the depthwise
filter reshaped to ``[KH, KW, 1, C * M]`` (row-major, so entry ``c * M + m`` is
``filter[..., c, m]``). The gradients are the grouped convolution's, from the core builder,
with the same reshape applied to (or undone on) the filter. Windows, strides, dilations and
run-time ``SAME`` padding are handled exactly as for ``Conv2D`` (:mod:`.nn`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from disc_core.ir import Value
from disc_core.symbolic import Expr, as_expr

from ..lowering import ConversionError, Lowering
from .nn import _Conv, _pad_spatial, _padded_shape
from .registry import FLOAT_DTYPES, converter


def _grouped(op: tf.Operation, input_shape: Sequence[Any], filter_shape: Sequence[Any]
             ) -> tuple[_Conv, list[Expr]]:
    """The grouped convolution a depthwise op is, and its HWIO kernel shape. The channel
    count comes from the filter, which is static (a Keras kernel is a variable of fixed
    shape) even when the input's feature dim was traced unknown: the module checks at run
    time that the input has that many channels."""
    if len(filter_shape) != 4:
        raise ConversionError(f"depthwise filter of rank {len(filter_shape)}")
    dims = [as_expr(d) for d in filter_shape]
    if not all(d.is_const for d in dims):
        raise ConversionError(f"depthwise filter shape {filter_shape} must be static")
    kh, kw, c, m = (d.value for d in dims)
    if c == 0 or m == 0:
        raise ConversionError(f"depthwise filter shape {filter_shape} has no channels")
    kernel = [Expr.const(kh), Expr.const(kw), Expr.const(1), Expr.const(c * m)]
    conv = _Conv(op, input_shape, kernel)
    conv.groups = c
    return conv, kernel


@converter("DepthwiseConv2dNative", dtypes=FLOAT_DTYPES)
def depthwise_conv2d(ctx: Lowering, op: tf.Operation) -> Value:
    x, f = ctx.value(op.inputs[0]), ctx.value(op.inputs[1])
    conv, kernel = _grouped(op, x.shape, f.shape)
    if not conv.static:
        x = _pad_spatial(ctx, x, conv.fmt, conv.pads, 0.0)
    return ctx.op("convolution", x, ctx.reshape(f, kernel), lhs_dilation=[1, 1],
                  batch_group_count=1, **conv.kwargs())


@converter("DepthwiseConv2dNativeBackpropInput", dtypes=FLOAT_DTYPES)
def depthwise_conv2d_backprop_input(ctx: Lowering, op: tf.Operation) -> Value:
    """The grouped convolution's input gradient (``conv_input_grad``); a run-time padding
    is cropped off afterwards."""
    f, dy = ctx.value(op.inputs[1]), ctx.value(op.inputs[2])
    shape = ctx.dims(op.inputs[0], "DepthwiseConv2dNativeBackpropInput input_sizes")
    if len(shape) != 4:
        raise ConversionError(f"input_sizes {shape} is not 4-D")
    conv, kernel = _grouped(op, shape, f.shape)
    w = ctx.reshape(f, kernel)
    kw = conv.kwargs()
    if conv.static:
        return ctx.b.conv_input_grad(dy, w, shape, **kw)
    dxp = ctx.b.conv_input_grad(dy, w, _padded_shape(shape, conv.fmt, conv.pads), **kw)
    return _pad_spatial(ctx, dxp, conv.fmt, conv.pads, 0.0, negate=True)


@converter("DepthwiseConv2dNativeBackpropFilter", dtypes=FLOAT_DTYPES)
def depthwise_conv2d_backprop_filter(ctx: Lowering, op: tf.Operation) -> Value:
    """The grouped convolution's kernel gradient (``conv_filter_grad``, feature groups as
    batch groups) reshaped back to ``[KH, KW, C, M]``."""
    x, dy = ctx.value(op.inputs[0]), ctx.value(op.inputs[2])
    fshape = ctx.dims(op.inputs[1], "DepthwiseConv2dNativeBackpropFilter filter_sizes")
    conv, kernel = _grouped(op, x.shape, fshape)
    if not conv.static:
        x = _pad_spatial(ctx, x, conv.fmt, conv.pads, 0.0)
    dw = ctx.b.conv_filter_grad(x, dy, kernel, **conv.kwargs())
    return ctx.reshape(dw, [as_expr(d) for d in fshape])
