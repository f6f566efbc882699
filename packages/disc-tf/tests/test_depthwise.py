"""Depthwise convolutions (``DepthwiseConv2dNative``) and their input and filter gradients
against TF eager, over streams of shapes the first call never saw (batch 1, spatial sizes
1 and odd ones leaving different remainders modulo the stride, so run-time ``SAME``
padding changes between calls), NHWC and NCHW, float32 and float64, channel multipliers 1
and above: each stream costs one compilation."""

from __future__ import annotations

import pytest
import tensorflow as tf
from helpers import check_parity, dilated_kernel, rand

import disc_tf

F32, F64 = tf.float32, tf.float64
NHWC_TO_NCHW, NCHW_TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]

# (n, h, w): the first compiles, the others are unseen
SPATIAL = [(2, 9, 7), (1, 1, 1), (3, 6, 8), (1, 2, 2), (1, 10, 3)]
VALID_SPATIAL = [(2, 9, 7), (1, 5, 5), (3, 6, 8), (1, 5, 6), (1, 11, 13)]
OPS = ["DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
       "DepthwiseConv2dNativeBackpropFilter"]

CASES = {
    # name: (padding, strides, dilations, kernel hw, channels, multiplier, spatial stream)
    "same": ("SAME", 1, 1, (3, 3), 3, 1, SPATIAL),
    "same_stride2_mult2": ("SAME", 2, 1, (3, 3), 3, 2, SPATIAL),
    "same_even_kernel_stride3": ("SAME", 3, 1, (2, 4), 2, 3, SPATIAL),
    "same_5x5_stride2": ("SAME", 2, 1, (5, 5), 4, 1, SPATIAL),
    "valid_stride2": ("VALID", 2, 1, (3, 2), 3, 2, VALID_SPATIAL),
    "same_dilated": ("SAME", 1, 2, (3, 3), 3, 2, SPATIAL),
    "valid_dilated": ("VALID", 1, 2, (2, 3), 2, 1, VALID_SPATIAL),
    "explicit": ("EXPLICIT", 1, 1, (3, 3), 3, 2, SPATIAL),
}
EXPLICIT = {"NHWC": [0, 0, 1, 2, 2, 0, 0, 0], "NCHW": [0, 0, 0, 0, 1, 2, 2, 0]}


def _inputs(dtype, spatial, kernel, channels, mult):
    """float32 inputs in [-0.5, 0.5] (TF and DISC sum the window products in different
    orders); float64 at full range."""
    r = 0.5 if dtype == F32 else 2.0
    return [(rand([n, h, w, channels], dtype, 1, -r, r),
             rand([*kernel, channels, mult], dtype, 2, -r, r)) for n, h, w in spatial]


def _make(padding, strides, dilations, fmt="NHWC", reference=False):
    """The op and its two gradients. ``reference``: TF's CPU kernels have no dilated
    depthwise convolution in float64 (and no dilated backprops), so a dilated case is
    checked against the same op on the kernel with zeros between its taps."""
    def per_dim(v):
        return [1, 1, v, v] if fmt == "NCHW" else [1, v, v, 1]

    def fn(x, f):
        with tf.GradientTape() as tape:
            tape.watch([x, f])
            if reference and dilations > 1:
                y = tf.raw_ops.DepthwiseConv2dNative(
                    input=x, filter=dilated_kernel(f, dilations), strides=per_dim(strides),
                    padding=padding, data_format=fmt, dilations=per_dim(1),
                    explicit_paddings=EXPLICIT[fmt] if padding == "EXPLICIT" else [])
            else:
                y = tf.raw_ops.DepthwiseConv2dNative(
                    input=x, filter=f, strides=per_dim(strides), padding=padding,
                    explicit_paddings=EXPLICIT[fmt] if padding == "EXPLICIT" else [],
                    data_format=fmt, dilations=per_dim(dilations))
        dx, df = tape.gradient(y, [x, f], output_gradients=tf.sin(y) + 0.5)
        return y, dx, df

    return fn


def _sig(dtype, kernel, channels, mult):
    """The filter is pinned (a Keras kernel is a variable of fixed shape); every dim of
    the input, its channels included, stays dynamic."""
    return [tf.TensorSpec([None] * 4, dtype), tf.TensorSpec([*kernel, channels, mult], dtype)]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", [F32, F64])
def test_depthwise_conv2d_and_gradients(case, dtype):
    padding, strides, dilations, kernel, channels, mult, spatial = CASES[case]
    check_parity(_make(padding, strides, dilations),
                 _inputs(dtype, spatial, kernel, channels, mult),
                 reference=_make(padding, strides, dilations, reference=True),
                 input_signature=_sig(dtype, kernel, channels, mult), compiled_ops=OPS)


def _in_nchw(fn):
    """``fn`` on NHWC arguments run in NCHW (TF's CPU kernels refuse some NCHW depthwise
    forms eagerly, so the reference is the NHWC op): results back in NHWC."""
    def wrapped(x, f):
        y, dx, df = fn(tf.transpose(x, NHWC_TO_NCHW), f)
        return tf.transpose(y, NCHW_TO_NHWC), tf.transpose(dx, NCHW_TO_NHWC), df

    return wrapped


@pytest.mark.parametrize("case", ["same_stride2_mult2", "valid_dilated", "explicit"])
def test_depthwise_conv2d_nchw(case):
    padding, strides, dilations, kernel, channels, mult, spatial = CASES[case]
    check_parity(_in_nchw(_make(padding, strides, dilations, "NCHW")),
                 _inputs(F32, spatial, kernel, channels, mult),
                 reference=_make(padding, strides, dilations, reference=True),
                 input_signature=_sig(F32, kernel, channels, mult), compiled_ops=OPS)


def test_depthwise_channels_must_match_the_filter():
    """The input's channels are dynamic when traced; a call whose channels differ from
    the filter's is TensorFlow's error, as without DISC (the module's run-time check
    fails and the fallback raises TF's message)."""
    fn = _make("SAME", 1, 1)
    f = disc_tf.function(fn, min_cluster_size=1, input_signature=_sig(F32, (3, 3), 3, 1))
    x, k = _inputs(F32, [(2, 5, 5)], (3, 3), 3, 1)[0]
    f(x, k)
    with pytest.raises(tf.errors.InvalidArgumentError):
        f(rand([2, 5, 5, 4]), k)
