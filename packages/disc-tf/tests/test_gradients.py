"""A DISC function called under an eager GradientTape: TensorFlow differentiates the
rewritten function, launch ops included, and the gradients match plain TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import assert_same, rand

import disc_tf


def _forward(w, b):
    def fn(x, mask):
        h = tf.matmul(x, w) + b
        h = tf.nn.gelu(h) * tf.cast(mask, h.dtype)[:, None]
        return tf.reduce_sum(tf.nn.softmax(h, axis=-1) * h, axis=-1), tf.shape(h)[0] * 2

    return fn


@pytest.mark.parametrize("execution", ["custom_op", "numpy_function"])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_gradients_through_launches_match_tensorflow(execution, dtype):
    rng = np.random.default_rng(0)
    w = tf.Variable(rng.standard_normal((6, 10)), dtype=dtype)
    b = tf.Variable(rng.standard_normal(10), dtype=dtype)
    fn = _forward(w, b)
    f = disc_tf.function(fn, execution=execution)
    for rows in (5, 1, 0, 13):  # 13 and 0 unseen when the function was compiled
        x = rand([rows, 6], dtype)
        mask = tf.constant(rng.integers(0, 2, rows), tf.int32)
        results = []
        for g in (f, fn):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y, n2 = g(x, mask)
                loss = tf.reduce_sum(y * y)
            results.append((y, n2, *tape.gradient(loss, [x, w, b])))
        got, want = results
        assert int(got[1]) == int(want[1]) == 2 * rows
        for gv, wv in zip(got[:1] + got[2:], want[:1] + want[2:]):
            assert_same(gv, wv)
    assert f.uses_disc()


def test_gradient_of_an_integer_only_cluster_is_none():
    def fn(x, k):
        return x * 2.0, (k + 3) * 2 - 1

    f = disc_tf.function(fn)
    x, k = rand([4], tf.float32), tf.constant([1, 2, 3], tf.int32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y, kk = f(x, k)
        loss = tf.reduce_sum(y) + tf.cast(tf.reduce_sum(kk), tf.float32)
    assert_same(kk, (k + 3) * 2 - 1)
    assert_same(tape.gradient(loss, x), tf.fill([4], 2.0))
