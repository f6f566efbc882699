"""Convolutions, pooling and fused batch norm (forward and backward) against TF eager, over
streams of shapes the first call never saw (batch 0 and 1, spatial sizes that leave
different remainders modulo the stride, so run-time ``SAME`` padding changes between
calls). NCHW forms, which TF's CPU kernels refuse eagerly, are compared with the NHWC
result transposed."""

from __future__ import annotations

import pytest
import tensorflow as tf
from helpers import check_parity, dilated_kernel, rand

F32, F64 = tf.float32, tf.float64
NHWC_TO_NCHW, NCHW_TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]

# (n, h, w): the first compiles, the others are unseen (edge sizes included)
SPATIAL = [(2, 9, 7), (1, 1, 1), (3, 6, 8), (0, 4, 5), (1, 10, 3)]
VALID_SPATIAL = [(2, 9, 7), (1, 5, 5), (3, 6, 8), (0, 6, 5), (1, 11, 13)]
# TF's Conv2D returns the input's shape (not the output's) for an empty batch, so
# convolutions are compared on a batch of 1 at the smallest sizes instead
CONV_SPATIAL = [s if s[0] else (1, 2, 2) for s in SPATIAL]
CONV_VALID_SPATIAL = [s if s[0] else (1, 5, 6) for s in VALID_SPATIAL]

CONV_CASES = {
    # name: (padding, strides, dilations, kernel hw, spatial stream)
    "same": ("SAME", 1, 1, (3, 3), CONV_SPATIAL),
    "same_stride2": ("SAME", 2, 1, (3, 3), CONV_SPATIAL),
    "same_even_kernel_stride3": ("SAME", 3, 1, (2, 4), CONV_SPATIAL),
    "same_1x1_stride2": ("SAME", 2, 1, (1, 1), CONV_SPATIAL),
    "valid_stride2": ("VALID", 2, 1, (3, 2), CONV_VALID_SPATIAL),
    "same_dilated": ("SAME", 1, 2, (3, 3), CONV_SPATIAL),
    "valid_dilated": ("VALID", 1, 2, (2, 3), CONV_VALID_SPATIAL),
    "explicit": ([[0, 0], [1, 2], [2, 0], [0, 0]], [1, 2], 1, (3, 3), CONV_SPATIAL),
}


def _conv_inputs(dtype, spatial, kernel, cin=3, cout=4, groups=1):
    """float32 inputs in [-0.5, 0.5]: TF (oneDNN) and DISC sum a convolution's products in
    different orders; at this magnitude the float32 rounding of those sums stays inside
    the float32 tolerance. float64 runs the same cases at full range."""
    r = 0.5 if dtype == F32 else 2.0
    return [(rand([n, h, w, cin], dtype, 1, -r, r),
             rand([*kernel, cin // groups, cout], dtype, 2, -r, r)) for n, h, w in spatial]


def _sig(dtype, kernel, cin=3, cout=4, groups=1):
    """Kernels are pinned (Keras kernels are variables of a fixed shape); every dim of the
    input stays dynamic."""
    return [tf.TensorSpec([None] * 4, dtype),
            tf.TensorSpec([*kernel, cin // groups, cout], dtype)]


def _conv(x, w, padding, strides, dilations, fmt="NHWC"):
    return tf.nn.conv2d(x, w, strides=strides, padding=padding, dilations=dilations,
                        data_format=fmt)


@pytest.mark.parametrize("case", sorted(CONV_CASES))
@pytest.mark.parametrize("dtype", [F32, F64])
def test_conv2d_and_gradients(case, dtype):
    padding, strides, dilations, kernel, spatial = CONV_CASES[case]

    def fn(x, w):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = _conv(x, w, padding, strides, dilations)
        dx, dw = tape.gradient(y, [x, w], output_gradients=tf.sin(y) + 0.5)
        return y, dx, dw

    reference = None
    if dilations > 1:
        def reference(x, w):
            with tf.GradientTape() as tape:
                tape.watch([x, w])
                y = _conv(x, dilated_kernel(w, dilations), padding, strides, 1)
            dx, dw = tape.gradient(y, [x, w], output_gradients=tf.sin(y) + 0.5)
            return y, dx, dw

    check_parity(fn, _conv_inputs(dtype, spatial, kernel), input_signature=_sig(dtype, kernel),
                 reference=reference,
                 compiled_ops=["Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"])


def test_grouped_conv2d():
    def fn(x, w):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = _conv(x, w, "SAME", 1, 1)
        return (y, *tape.gradient(y, [x, w], output_gradients=tf.cos(y)))

    def reference(x, w):
        """Each group its own convolution: TF's CPU kernels without oneDNN (on AMD) refuse
        grouped convolutions' gradients."""
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = tf.concat([_conv(xg, wg, "SAME", 1, 1) for xg, wg in
                           zip(tf.split(x, 2, axis=3), tf.split(w, 2, axis=3))], axis=3)
        return (y, *tape.gradient(y, [x, w], output_gradients=tf.cos(y)))

    check_parity(fn, _conv_inputs(F32, CONV_SPATIAL, (3, 3), cin=4, cout=6, groups=2),
                 input_signature=[tf.TensorSpec([None, None, None, 4], F32),
                                  tf.TensorSpec([3, 3, 2, 6], F32)], reference=reference,
                 compiled_ops=["Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"])


@pytest.mark.parametrize("padding,strides", [("SAME", 2), ("VALID", 1)])
def test_conv2d_nchw(padding, strides):
    def fn(x, w):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = _conv(tf.transpose(x, NHWC_TO_NCHW), w, padding, [1, 1, strides, strides],
                      1, "NCHW")
        dx, dw = tape.gradient(y, [x, w], output_gradients=tf.sin(y) + 0.5)
        return tf.transpose(y, NCHW_TO_NHWC), dx, dw

    def reference(x, w):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = _conv(x, w, padding, strides, 1)
        dx, dw = tape.gradient(y, [x, w], output_gradients=tf.sin(y) + 0.5)
        return y, dx, dw

    spatial = CONV_SPATIAL if padding == "SAME" else CONV_VALID_SPATIAL
    check_parity(fn, _conv_inputs(F32, spatial, (3, 3)), reference=reference,
                 input_signature=_sig(F32, (3, 3)),
                 compiled_ops=["Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"])


POOL_CASES = {
    "same_2x2_s2": ("SAME", (2, 2), (2, 2), SPATIAL),
    "same_3x3_s2": ("SAME", (3, 3), (2, 2), SPATIAL),
    "same_3x2_s1": ("SAME", (3, 2), (1, 1), SPATIAL),
    "same_1x1_s2": ("SAME", (1, 1), (2, 3), SPATIAL),
    "valid_3x3_s2": ("VALID", (3, 3), (2, 2), VALID_SPATIAL),
    "valid_2x3_s1x2": ("VALID", (2, 3), (1, 2), VALID_SPATIAL),
}


def _pool_inputs(dtype, spatial, ties=False):
    out = []
    for n, h, w in spatial:
        x = rand([n, h, w, 3], dtype, 4)
        if ties:  # few distinct values: windows with several maxima
            x = tf.round(x)
        out.append((x,))
    return out


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("case", sorted(POOL_CASES))
@pytest.mark.parametrize("dtype", [F32, F64])
def test_pool_and_gradient(kind, case, dtype):
    padding, ksize, strides, spatial = POOL_CASES[case]
    pool = tf.nn.max_pool2d if kind == "max" else tf.nn.avg_pool2d

    def fn(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = pool(x, ksize, strides, padding)
        return y, tape.gradient(y, x, output_gradients=tf.sin(y) + 1.5)

    name = "MaxPool" if kind == "max" else "AvgPool"
    check_parity(fn, _pool_inputs(dtype, spatial, ties=kind == "max"),
                 compiled_ops=[name, name + "Grad"])


def test_max_pool_nchw_and_negative_infinity():
    """NCHW, and windows whose in-bounds values are all -inf next to SAME padding (the
    gradient must go to an input position, never to the padding)."""
    def fn(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.nn.max_pool2d(tf.transpose(x, NHWC_TO_NCHW), 3, 2, "SAME",
                                 data_format="NCHW")
        return tf.transpose(y, NCHW_TO_NHWC), tape.gradient(y, x, output_gradients=y * 0 +
                                                          2.0)

    def reference(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.nn.max_pool2d(x, 3, 2, "SAME")
        return y, tape.gradient(y, x, output_gradients=y * 0 + 2.0)

    sets = []
    for n, h, w in SPATIAL:
        x = rand([n, h, w, 2], F32, 5)
        sets.append((tf.where(x > 0.5, float("-inf"), tf.round(x)),))
    check_parity(fn, sets, reference=reference, compiled_ops=["MaxPool", "MaxPoolGrad"])


BN_SPATIAL = [(4, 5, 3), (1, 1, 1), (2, 7, 2), (3, 1, 6)]


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("factor", [1.0, 0.3])
def test_fused_batch_norm_and_gradient(fmt, training, factor):
    def fn(x, scale, offset, mean, var):
        with tf.GradientTape() as tape:
            tape.watch([x, scale, offset])
            y, bm, bv, r1, r2, r3 = tf.raw_ops.FusedBatchNormV3(
                x=x, scale=scale, offset=offset, mean=mean, variance=var, epsilon=1e-3,
                exponential_avg_factor=factor, data_format=fmt, is_training=training)
        dy = tf.sin(y) + 0.5
        gx, gs, go, _, _ = tf.raw_ops.FusedBatchNormGradV3(
            y_backprop=dy, x=x, scale=scale, reserve_space_1=r1, reserve_space_2=r2,
            reserve_space_3=r3, epsilon=1e-3, data_format=fmt, is_training=training)
        return y, bm, bv, gx, gs, go

    c = 5
    sets = []
    for n, h, w in BN_SPATIAL:
        shape = [n, h, w, c] if fmt == "NHWC" else [n, c, h, w]
        sets.append((rand(shape, F32, 6), rand([c], F32, 7, 0.5, 1.5), rand([c], F32, 8),
                     rand([c], F32, 9), rand([c], F32, 10, 0.2, 2.0)))
    if not training:
        # the inference form by its definition: TF's CPU kernel without oneDNN (on AMD)
        # leaves the reserve spaces uninitialized when not training, and its gradient
        # then reads them; it takes no NCHW gradient either
        def reference(x, scale, offset, mean, var):
            axes = [1, 1, 1, c] if fmt == "NHWC" else [1, c, 1, 1]
            with tf.GradientTape() as tape:
                tape.watch([x, scale, offset])
                y = ((x - tf.reshape(mean, axes)) * tf.math.rsqrt(tf.reshape(var, axes) + 1e-3)
                     * tf.reshape(scale, axes) + tf.reshape(offset, axes))
            gx, gs, go = tape.gradient(y, [x, scale, offset], output_gradients=tf.sin(y) + 0.5)
            return y, mean, var, gx, gs, go
    elif fmt == "NCHW":
        # TF's CPU kernel takes NCHW by transposing to NHWC; compare with that directly
        def reference(x, scale, offset, mean, var):
            outs = fn_nhwc(tf.transpose(x, NCHW_TO_NHWC), scale, offset, mean, var)
            return (tf.transpose(outs[0], NHWC_TO_NCHW), outs[1], outs[2],
                    tf.transpose(outs[3], NHWC_TO_NCHW), outs[4], outs[5])

        def fn_nhwc(x, scale, offset, mean, var):
            y, bm, bv, r1, r2, r3 = tf.raw_ops.FusedBatchNormV3(
                x=x, scale=scale, offset=offset, mean=mean, variance=var, epsilon=1e-3,
                exponential_avg_factor=factor, data_format="NHWC", is_training=training)
            dy = tf.sin(y) + 0.5
            gx, gs, go, _, _ = tf.raw_ops.FusedBatchNormGradV3(
                y_backprop=dy, x=x, scale=scale, reserve_space_1=r1, reserve_space_2=r2,
                reserve_space_3=r3, epsilon=1e-3, data_format="NHWC", is_training=training)
            return y, bm, bv, gx, gs, go
    else:
        reference = None
    check_parity(fn, sets, reference=reference,
                 compiled_ops=["FusedBatchNormV3", "FusedBatchNormGradV3"])
