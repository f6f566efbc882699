"""Per-converter parity against TF eager: every case runs one compiled signature over a
stream of shapes (the first traces and compiles; the others, including 0, 1 and odd sizes,
were never seen at compile time) and must match TF exactly (integers, bools) or within
float32/float64 rounding."""

from __future__ import annotations

import pytest
import tensorflow as tf
from helpers import check_parity, rand

F32, F64, I32, I64 = tf.float32, tf.float64, tf.int32, tf.int64
ROWS = (5, 1, 0, 8)  # first one compiles; the rest are unseen shapes of the same rank


def pairs(dtype, lo=-2.0, hi=2.0, cols=(3, 7, 1, 4)):
    """[n, m] with [m]: rank broadcasting."""
    return [(rand([n, m], dtype, 1, lo, hi), rand([m], dtype, 2, lo, hi))
            for n, m in zip(ROWS, cols)]


def same(dtype, lo=-2.0, hi=2.0):
    return [(rand([n, 3], dtype, 1, lo, hi), rand([n, 3], dtype, 2, lo, hi)) for n in ROWS]


def one(dtype, lo=-2.0, hi=2.0, shapes=((4, 6), (1, 3), (0, 5), (7, 1))):
    return [(rand(list(s), dtype, 3, lo, hi),) for s in shapes]


BINARY = {
    "AddV2": (tf.add, (F32, F64, I32, I64)),
    "Sub": (tf.subtract, (F32, F64, I32, I64)),
    "Mul": (tf.multiply, (F32, F64, I32, I64)),
    "Maximum": (tf.maximum, (F32, F64, I32, I64)),
    "Minimum": (tf.minimum, (F32, F64, I32, I64)),
    "SquaredDifference": (tf.math.squared_difference, (F32, F64, I32)),
    "Equal": (tf.equal, (F32, I32)),
    "Less": (tf.less, (F32, I64)),
    "GreaterEqual": (tf.greater_equal, (F64, I32)),
}


@pytest.mark.parametrize("op,dtype", [(k, d) for k, (_, ds) in BINARY.items() for d in ds])
def test_binary_broadcast(op, dtype):
    fn = BINARY[op][0]
    check_parity(lambda a, b: fn(a, b), pairs(dtype), compiled_ops=[op])


@pytest.mark.parametrize("dtype", [F32, F64])
def test_division_family(dtype):
    def fn(a, b):
        return (a / b, tf.math.divide_no_nan(a, b * tf.cast(a > 0, dtype)),
                tf.math.floordiv(a, b), tf.math.floormod(a, b), tf.pow(tf.abs(a), b))

    check_parity(fn, [(a, b + tf.sign(b) * 0.5) for a, b in pairs(dtype)],
                 compiled_ops=["RealDiv", "DivNoNan", "FloorDiv", "FloorMod", "Pow"])


@pytest.mark.parametrize("dtype", [I32, I64])
def test_integer_division_is_floored(dtype):
    def fn(a, b):
        return tf.math.floordiv(a, b), tf.math.floormod(a, b)

    sets = [(a, tf.where(b == 0, tf.ones_like(b), b)) for a, b in pairs(dtype, -9, 9)]
    check_parity(fn, sets, compiled_ops=["FloorDiv", "FloorMod"])


def test_logical():
    def fn(a, b):
        return tf.logical_and(a, b), tf.logical_or(a, tf.logical_not(b))

    check_parity(fn, same(tf.bool), compiled_ops=["LogicalAnd", "LogicalOr", "LogicalNot"])


UNARY = {
    "Exp": tf.exp, "Log": lambda x: tf.math.log(tf.abs(x) + 0.1), "Sqrt": lambda x: tf.sqrt(
        tf.abs(x)), "Rsqrt": lambda x: tf.math.rsqrt(tf.abs(x) + 0.5), "Tanh": tf.tanh,
    "Sigmoid": tf.sigmoid, "Erf": tf.math.erf, "Neg": tf.negative, "Abs": tf.abs,
    "Square": tf.square, "Reciprocal": lambda x: tf.math.reciprocal(x + 3.0),
    "Floor": tf.floor, "Ceil": tf.math.ceil, "Round": tf.round, "Relu": tf.nn.relu,
    "Relu6": lambda x: tf.nn.relu6(x * 4), "Elu": tf.nn.elu, "Selu": tf.nn.selu,
    "LeakyRelu": lambda x: tf.nn.leaky_relu(x, 0.3), "Softplus": tf.nn.softplus,
    "Log1p": lambda x: tf.math.log1p(tf.abs(x)), "Expm1": tf.math.expm1, "Sign": tf.sign,
    "Sin": tf.sin, "Cos": tf.cos,
}


@pytest.mark.parametrize("op", sorted(UNARY))
@pytest.mark.parametrize("dtype", [F32, F64])
def test_unary(op, dtype):
    fn = UNARY[op]
    check_parity(lambda x: fn(x) * 1.5, one(dtype), compiled_ops=[op])


@pytest.mark.parametrize("dtype", [I32, I64])
def test_integer_unary(dtype):
    check_parity(lambda x: (tf.abs(x), tf.negative(x), tf.square(x), tf.nn.relu(x),
                            tf.sign(x)), one(dtype, -9, 9),
                 compiled_ops=["Abs", "Neg", "Square", "Relu", "Sign"])


GRADS = {
    "ReluGrad": tf.nn.relu, "Relu6Grad": lambda x: tf.nn.relu6(4 * x), "EluGrad": tf.nn.elu,
    "SeluGrad": tf.nn.selu, "LeakyReluGrad": lambda x: tf.nn.leaky_relu(x, 0.2),
    "TanhGrad": tf.tanh, "SigmoidGrad": tf.sigmoid,
    "RsqrtGrad": lambda x: tf.math.rsqrt(tf.abs(x) + 0.5),
    "SqrtGrad": lambda x: tf.sqrt(tf.abs(x) + 0.5),
}


@pytest.mark.parametrize("op", sorted(GRADS))
@pytest.mark.parametrize("dtype", [F32, F64])
def test_activation_gradients(op, dtype):
    act = GRADS[op]

    def fn(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = act(x)
        return y, tape.gradient(y, x, output_gradients=x * 0.5 + 1.0)

    check_parity(fn, one(dtype), compiled_ops=[op])


@pytest.mark.parametrize("dtype", [F32, F64])
def test_raw_gradient_ops(dtype):
    """Gradient kernels TF's own gradients no longer emit, called directly."""

    def fn(x, g):
        return (tf.raw_ops.SoftplusGrad(gradients=g, features=x),
                tf.raw_ops.ReciprocalGrad(y=x, dy=g))

    check_parity(fn, same(dtype), compiled_ops=["SoftplusGrad", "ReciprocalGrad"])


@pytest.mark.parametrize("dtype", [F32, F64])
def test_softmax_family(dtype):
    def fn(x):
        return tf.nn.softmax(x), tf.nn.log_softmax(x), tf.nn.softmax(x * 3.0, axis=0)

    check_parity(fn, one(dtype, -30, 30, shapes=((4, 6), (1, 3), (3, 1), (9, 5))),
                 compiled_ops=["Softmax", "LogSoftmax"])


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("label_dtype", [I32, I64])
def test_sparse_cross_entropy_and_gradient(dtype, label_dtype):
    def fn(logits, labels):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
        return loss, tape.gradient(loss, logits)

    sets = [(rand([n, c], dtype, 4, -5, 5),
             tf.constant([i % c for i in range(n)], dtype=label_dtype))
            for n, c in zip(ROWS, (4, 3, 2, 7))]
    check_parity(fn, sets, compiled_ops=["SparseSoftmaxCrossEntropyWithLogits"])


@pytest.mark.parametrize("dtype", [F32, F64])
def test_dense_cross_entropy(dtype):
    def fn(logits, labels):
        return tf.nn.softmax_cross_entropy_with_logits(tf.nn.softmax(labels), logits)

    check_parity(fn, [(rand([n, 4], dtype, 1), rand([n, 4], dtype, 2)) for n in ROWS],
                 compiled_ops=["SoftmaxCrossEntropyWithLogits"])


REDUCTIONS = {
    "Sum": tf.reduce_sum, "Mean": tf.reduce_mean, "Max": tf.reduce_max,
    "Min": tf.reduce_min, "Prod": tf.reduce_prod,
}


@pytest.mark.parametrize("op", sorted(REDUCTIONS))
@pytest.mark.parametrize("dtype", [F32, F64, I32, I64])
def test_reductions(op, dtype):
    red = REDUCTIONS[op]

    def fn(x):
        return red(x, axis=1), red(x, axis=[0, 2], keepdims=True), red(x, axis=-1)

    shapes = ((3, 4, 5), (1, 2, 3), (2, 1, 1), (5, 3, 7))
    if op in ("Max", "Min"):  # TF gives -inf/+inf or int extremes for empty ranges as well
        shapes = shapes
    check_parity(fn, one(dtype, -3, 3, shapes=shapes), compiled_ops=[op])


def test_boolean_reductions_and_argmax():
    def fn(x):
        return (tf.reduce_all(x > 0, axis=1), tf.reduce_any(x > 1, axis=0),
                tf.argmax(x, axis=1), tf.argmin(x, axis=0, output_type=tf.int32))

    # arg-reductions over an empty axis are an error in TF: no zero-size dims here
    check_parity(fn, one(F32, shapes=((4, 6), (1, 3), (2, 5), (7, 1))),
                 compiled_ops=["All", "Any", "ArgMax", "ArgMin"])


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul(dtype, ta, tb):
    def fn(a, b):
        return tf.matmul(a, b, transpose_a=ta, transpose_b=tb)

    sets = []
    for m, k, n in ((3, 4, 5), (1, 7, 2), (6, 1, 1), (0, 3, 2)):
        a = rand([k, m] if ta else [m, k], dtype, 1)
        b = rand([n, k] if tb else [k, n], dtype, 2)
        sets.append((a, b))
    check_parity(fn, sets, compiled_ops=["MatMul"])


@pytest.mark.parametrize("dtype", [F32, F64])
def test_batch_matmul_broadcasts_batch_dims(dtype):
    def fn(a, b):
        return tf.matmul(a, b), tf.matmul(a, b, adjoint_b=True)[..., :1]

    sets = [(rand([2, h, m, 4], dtype, 1), rand([4, 4], dtype, 2))
            for h, m in ((3, 5), (1, 1), (2, 0), (4, 3))]
    check_parity(fn, sets, compiled_ops=["BatchMatMulV2"])


@pytest.mark.parametrize("dtype", [F32, F64])
def test_bias_add_and_grad(dtype):
    def fn(x, b):
        with tf.GradientTape() as tape:
            tape.watch(b)
            y = tf.nn.bias_add(x, b)
        return y, tape.gradient(y, b, output_gradients=x)

    check_parity(fn, [(rand([n, 3, c], dtype, 1), rand([c], dtype, 2))
                      for n, c in zip(ROWS, (4, 2, 3, 5))],
                 compiled_ops=["BiasAdd", "BiasAddGrad"])


def test_reshape_from_runtime_shape():
    def fn(x):
        s = tf.shape(x)
        y = tf.reshape(x, [s[0], -1, 2])
        z = tf.reshape(y, [-1])
        return y * 2.0, z + 1.0, tf.reshape(x, tf.stack([s[1], s[0]]))

    # TF infers a -1 next to a 0-size dim from the non-zero dims only; DISC does not
    # follow that special case, so no zero-size input here (see test_reshape_zero_size)
    check_parity(fn, one(F32, shapes=((3, 4), (1, 2), (2, 6), (5, 8))),
                 compiled_ops=["Reshape", "Shape", "StridedSlice", "Pack"])


def test_reshape_zero_size():
    def fn(x):
        s = tf.shape(x)
        return tf.reshape(x, [s[1], s[0]]) * 2.0, tf.reshape(x, [-1]) + 1.0

    check_parity(fn, one(F32, shapes=((3, 4), (0, 2), (2, 0), (1, 1))),
                 compiled_ops=["Reshape"])


@pytest.mark.parametrize("dtype", [F32, I64, tf.bool])
def test_data_movement(dtype):
    def fn(x):
        return (tf.transpose(x, [1, 0, 2]), tf.concat([x, x[:, :1]], axis=1),
                tf.expand_dims(x, 1), tf.squeeze(x[:, :1], axis=1),
                tf.tile(x, [2, 1, 3]), tf.pad(x, [[1, 0], [0, 2], [1, 1]]),
                tf.stack([x, x], axis=2), tf.unstack(x[:, :2], num=2, axis=1),
                tf.broadcast_to(x[:, :1], tf.shape(x)), tf.zeros_like(x), tf.ones_like(x))

    check_parity(fn, one(dtype, shapes=((2, 3, 4), (1, 2, 1), (0, 5, 2), (3, 7, 3))),
                 compiled_ops=["Transpose", "ConcatV2", "ExpandDims", "Squeeze", "Tile",
                               "Pad", "Pack", "Unpack", "BroadcastTo", "ZerosLike",
                               "OnesLike"])


def test_split():
    def fn(x):
        a, b = tf.split(x, 2, axis=1)
        c, d, e = tf.split(x, [1, -1, 2], axis=1)
        return a - b, c, d, e

    check_parity(fn, one(F32, shapes=((3, 6), (1, 4), (0, 8), (5, 10))),
                 compiled_ops=["Split", "SplitV"])


SLICES = {
    "basic": lambda x: x[1:, :3],
    "negative": lambda x: x[-2:, -1],
    "stride": lambda x: x[::2, 1::3],
    "reverse": lambda x: x[::-1, ::-2],
    "newaxis_ellipsis": lambda x: x[..., None, 1:2] + x[None, :1, ...][0, :, None, :1],
    "shrink_last": lambda x: x[:, -1],
}


@pytest.mark.parametrize("case", sorted(SLICES))
def test_strided_slice(case):
    sl = SLICES[case]
    check_parity(lambda x: sl(x) * 1.0, one(F32, shapes=((5, 7), (2, 4), (3, 1), (9, 6))),
                 compiled_ops=["StridedSlice"])


@pytest.mark.parametrize("case", ["basic", "negative", "stride", "shrink_last"])
def test_strided_slice_grad(case):
    sl = SLICES[case]

    def fn(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = sl(x)
        return tape.gradient(y, x, output_gradients=y * 2.0 + 1.0)

    check_parity(fn, one(F32, shapes=((5, 7), (2, 4), (3, 1), (9, 6))),
                 compiled_ops=["StridedSliceGrad"])


def test_slice_gather_onehot():
    def fn(x, idx):
        return (tf.slice(x, [1, 0], [-1, 2]), tf.gather(x, idx, axis=1),
                tf.gather(x, idx[:1], axis=0), tf.one_hot(idx, 4, 2.0, -1.0),
                tf.one_hot(idx, 3, axis=0))

    sets = [(rand([n, 5], F32, 1), tf.constant([i % 3 for i in range(k)], tf.int32))
            for n, k in ((4, 3), (2, 1), (3, 2), (6, 5))]
    check_parity(fn, sets, compiled_ops=["Slice", "GatherV2", "OneHot"])


def test_select_cast_fill_range():
    def fn(x, y):
        n = tf.shape(x)[0]
        r = tf.range(n)
        return (tf.where(x > 0, x, y), tf.where(x > 0, x, 0.0), tf.cast(x * 3, tf.int32),
                tf.cast(x > 0, tf.float32), tf.fill(tf.shape(x), 2.5),
                tf.cast(r, tf.float32) * 2.0, tf.range(1, n * 2 + 2, 3))

    check_parity(fn, same(F32), compiled_ops=["SelectV2", "Cast", "Fill", "Range"])


def test_legacy_select_picks_rows():
    def fn(c, x, y):
        return tf.raw_ops.Select(condition=c, x=x, y=y) * 2.0

    sets = [(tf.constant([i % 2 == 0 for i in range(n)], tf.bool), rand([n, 3], F32, 1),
             rand([n, 3], F32, 2)) for n in ROWS]
    check_parity(fn, sets, compiled_ops=["Select"])


def test_add_n_and_static_one_broadcast():
    def fn(a, b):
        return tf.add_n([a * b, b * a, a + b]) + b, a * b

    sig = [tf.TensorSpec([None, 1], F32), tf.TensorSpec([1, None], F32)]
    sets = [(rand([n, 1], F32, 1), rand([1, m], F32, 2)) for n, m in zip(ROWS, (3, 1, 4, 2))]
    check_parity(fn, sets, compiled_ops=["AddN", "AddV2", "Mul"], input_signature=sig)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_erfc(dtype):
    check_parity(lambda x: tf.math.erfc(x) * 1.5, one(dtype), compiled_ops=["Erfc"])


@pytest.mark.parametrize("dtype", [F32, F64, I32, I64])
def test_unsorted_segment_sum(dtype):
    """Negative ids are dropped, as in TF (ids >= num_segments are an error in TF; DISC
    drops them too, see docs/tf.md)."""
    def fn(data, ids):
        return tf.math.unsorted_segment_sum(data, ids, 5)

    sets = [(rand([n, 3], dtype, 1), rand([n], I32, 2, 0, 1)) for n in ROWS]  # ids -3..4
    check_parity(fn, sets, compiled_ops=["UnsortedSegmentSum"])


@pytest.mark.parametrize("dtype", [F32, F64])
def test_reduction_gradient_shape_folding(dtype):
    """TF's reduction gradients build the kept-dims shape with FloorMod, Fill and
    DynamicStitch; a transpose's gradient inverts its permutation: all fold to known
    values, so the gradient's Reshape/Transpose get symbolic dims and compile."""
    def fn(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_mean(tf.transpose(x, [2, 0, 1]), axis=[0, 2])
        return y, tape.gradient(y, x, output_gradients=tf.sin(y) + 1.0)

    sets = [(rand([n, m, 4], dtype, 1),) for n, m in zip(ROWS, (3, 7, 1, 4))]
    check_parity(fn, sets, compiled_ops=["DynamicStitch", "InvertPermutation", "Reshape"])
