"""A loss between two arguments of independent dynamic shapes (``y(x) - target``, both
[None, None, d]) keeps its train step in one cluster.

The gradient of that subtraction asks ``BroadcastGradientArgs`` which side broadcasts,
which the symbols of two independent arguments cannot tell; the analysis assumes their
dims equal (partition.analyze) and every call checks the assumption: a call whose target
really broadcasts (a [1, S, d] or [B, 1, d] target) runs the original function, with the
same results as TensorFlow.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import tensorflow as tf

import disc_tf

keras = pytest.importorskip("keras")

HIDDEN = 8


def _model(dtype: str) -> keras.Model:
    keras.utils.set_random_seed(0)
    inp = keras.Input((None, HIDDEN), dtype=dtype)
    h = keras.layers.Dense(16, activation="tanh", dtype=dtype)(inp)
    return keras.Model(inp, keras.layers.Dense(HIDDEN, dtype=dtype)(h) + inp)


def _step(model: keras.Model):
    def gradients(x, target):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - target))
        return [loss, *tape.gradient(loss, model.trainable_variables)]
    return gradients


def _rel(got: tf.Tensor, want: tf.Tensor) -> float:
    return float(tf.norm(got - want) / tf.maximum(tf.norm(want), 1e-30))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_loss_between_arguments_is_one_cluster_and_matches(dtype):
    model = _model(dtype)
    sig = [tf.TensorSpec([None, None, HIDDEN], dtype)] * 2
    fn = disc_tf.function(_step(model), input_signature=sig)
    ref = tf.function(_step(model), input_signature=sig)
    rng = np.random.default_rng(0)
    before = disc_tf.compile_count()
    tol = 1e-4 if dtype == "float32" else 1e-10
    for b, s in [(2, 5), (3, 17), (1, 1), (4, 64), (2, 0), (5, 33)]:
        x = tf.constant(rng.standard_normal((b, s, HIDDEN)).astype(dtype))
        y = tf.constant(rng.standard_normal((b, s, HIDDEN)).astype(dtype))
        got, want = fn(x, y), ref(x, y)
        for g, w in zip(got, want):
            if s == 0:
                np.testing.assert_array_equal(np.isnan(g.numpy()), np.isnan(w.numpy()))
            else:
                assert _rel(g, w) < tol, (b, s)
    graph = fn.coverage()
    assert len(graph.clusters) == 1
    left = {n.op for n in graph.nodes if n.status.value != "compiled"}
    assert "BroadcastGradientArgs" not in left and "Sum" not in left, left
    assert disc_tf.compile_count() - before == 1


@pytest.mark.parametrize("target_shape", [(1, 6, HIDDEN), (3, 1, HIDDEN), (1, 1, HIDDEN)])
def test_a_target_that_broadcasts_runs_the_original(target_shape):
    model = _model("float32")
    sig = [tf.TensorSpec([None, None, HIDDEN], tf.float32)] * 2
    step = _step(model)
    # a name of its own: the warning is given once per message
    step.__name__ = "step_" + "x".join(map(str, target_shape))
    fn = disc_tf.function(step, input_signature=sig)
    ref = tf.function(_step(model), input_signature=sig)
    rng = np.random.default_rng(1)
    x = tf.constant(rng.standard_normal((3, 6, HIDDEN)).astype("float32"))
    fn(x, x)  # traced and compiled with the target's dims taken as x's
    y = tf.constant(rng.standard_normal(target_shape).astype("float32"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = fn(x, y)
    want = ref(x, y)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert _rel(g, w) < 1e-6
    assert any("break what its clusters assume" in str(w.message) and step.__name__ in
               str(w.message) for w in caught)
    # and a call that fits again runs the clusters
    x2 = tf.constant(rng.standard_normal((2, 9, HIDDEN)).astype("float32"))
    for g, w in zip(fn(x2, x2 * 0.5), ref(x2, x2 * 0.5)):
        assert _rel(g, w) < 1e-4
