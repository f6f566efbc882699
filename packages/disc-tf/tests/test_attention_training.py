"""Keras MultiHeadAttention trained under DISC: the forward and the backward TensorFlow's
gradients write for it (einsum and Softmax gradients) compile to the fused ``attention``
and ``attention_grad`` (core pass fuse-attention-training), the whole step in one cluster
plus the returned loss, one compilation over every sequence length, and every variable's
gradient matches TensorFlow's on several lengths, unseen ones included.

The attention layer has no biases: the key projection's bias has a gradient that is zero in
exact arithmetic (softmax ignores a shift shared by a row), so a relative error of it would
measure round-off only.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import disc_tf

keras = pytest.importorskip("keras")

HIDDEN, HEADS = 32, 4


def _block(dtype: str, causal: bool = False) -> keras.Model:
    keras.utils.set_random_seed(0)
    inp = keras.Input((None, HIDDEN), dtype=dtype)
    h = keras.layers.LayerNormalization(dtype=dtype)(inp)
    h = keras.layers.MultiHeadAttention(HEADS, HIDDEN // HEADS, use_bias=False,
                                        dtype=dtype)(h, h, use_causal_mask=causal)
    x = inp + h
    return keras.Model(inp, x + keras.layers.Dense(HIDDEN, activation="tanh", dtype=dtype)(x))


def _gradients(model: keras.Model):
    def step(x, target):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - target))
        return [loss, *tape.gradient(loss, model.trainable_variables)]
    return step


def _compiled_ops(fn) -> str:
    entry = next(e for e in fn._entries.values() if e.rebuilt is not None)  # noqa: SLF001
    return "\n".join(launch.executable.artifact.path("graph.disc").read_text()
                     for launch in entry.launches)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_keras_attention_training_fuses_and_matches(dtype, causal):
    """``use_causal_mask=True`` (a band_part of ones, scores filled with -0.7 * max where
    it is false, and SelectV2's gradient on dS) fuses into the kernels' causal mode."""
    model = _block(dtype, causal)
    sig = [tf.TensorSpec([None, None, HIDDEN], dtype)] * 2
    fn = disc_tf.function(_gradients(model), input_signature=sig)
    ref = tf.function(_gradients(model), input_signature=sig)
    rng = np.random.default_rng(0)
    before = disc_tf.compile_count()
    # relative per variable; the absolute term is for a length of 1, where the query and
    # key weights' gradients are zero in exact arithmetic (one key: softmax is constant)
    rtol, atol = (2e-5, 1e-6) if dtype == "float32" else (1e-10, 1e-14)
    for b, s in [(2, 9), (1, 1), (3, 40), (2, 17), (1, 100)]:
        x = tf.constant(rng.standard_normal((b, s, HIDDEN)).astype(dtype))
        y = tf.constant(rng.standard_normal((b, s, HIDDEN)).astype(dtype))
        got, want = fn(x, y), ref(x, y)
        for g, w in zip(got, want):
            err, size = float(tf.norm(g - w)), float(tf.norm(w))
            assert err <= rtol * size + atol, (b, s, err, size)
    assert disc_tf.compile_count() - before <= 2  # the step and the returned loss
    assert len(fn.coverage().clusters) <= 2
    ops = _compiled_ops(fn)
    assert "attention_grad(" in ops and "attention(" in ops
    assert ops.count("causal = true") == (2 if causal else 0), ops
    assert "f32[s0, 4, s1, s1]" not in ops and "f64[s0, 4, s1, s1]" not in ops  # no scores
