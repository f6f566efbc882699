"""A training step that updates its variables and returns its loss: tf.function returns the
loss through an Identity under control dependencies on the updates. That Identity stays
in TensorFlow, so the loss's Mean joins the step's cluster (before, Mean and Identity made
a second cluster after the updates, reading the whole squared error back): one cluster,
one compilation over every length, and the losses and every updated variable match TF's
step for step, float32 and float64."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import disc_tf

keras = pytest.importorskip("keras")

HIDDEN = 16


def _model(dtype: str) -> keras.Model:
    keras.utils.set_random_seed(0)
    inp = keras.Input((None, HIDDEN), dtype=dtype)
    h = keras.layers.LayerNormalization(dtype=dtype)(inp)
    h = keras.layers.Dense(2 * HIDDEN, activation="gelu", dtype=dtype)(h)
    return keras.Model(inp, inp + keras.layers.Dense(HIDDEN, dtype=dtype)(h))


def _step(model: keras.Model):
    def train(x, target):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - target))
        grads = tape.gradient(loss, model.trainable_variables)
        for v, g in zip(model.trainable_variables, grads):
            v.assign_sub(0.05 * g)
        return loss
    return train


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_train_step_is_one_cluster_and_matches(dtype):
    ours, ref = _model(dtype), _model(dtype)
    sig = [tf.TensorSpec([None, None, HIDDEN], dtype)] * 2
    fn = disc_tf.function(_step(ours), input_signature=sig)
    want_fn = tf.function(_step(ref), input_signature=sig)
    rng = np.random.default_rng(0)
    rtol = 1e-5 if dtype == "float32" else 1e-12
    before = disc_tf.compile_count()
    for b, s in [(2, 9), (1, 1), (3, 40), (2, 17), (1, 0), (2, 9)]:
        x = tf.constant(rng.standard_normal((b, s, HIDDEN)).astype(dtype))
        y = tf.constant(rng.standard_normal((b, s, HIDDEN)).astype(dtype))
        got, want = fn(x, y).numpy(), want_fn(x, y).numpy()
        np.testing.assert_allclose(got, want, rtol=rtol, equal_nan=True)  # s = 0: NaN
        for v, w in zip(ours.trainable_variables, ref.trainable_variables):
            np.testing.assert_allclose(v.numpy(), w.numpy(), rtol=rtol, atol=rtol * 1e-2)
    graph = fn.coverage()
    assert len(graph.clusters) == 1, [c.nodes for c in graph.clusters]
    (cluster,) = graph.clusters
    assert cluster.cache_misses + cluster.cache_hits == 1, cluster  # one build or load
    assert disc_tf.compile_count() - before <= 1
    kept = {n.op for n in graph.nodes if n.status.value != "compiled"}
    assert kept == {"ReadVariableOp", "AssignVariableOp", "Identity"}, kept
