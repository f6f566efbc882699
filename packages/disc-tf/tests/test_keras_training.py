"""Keras training parity: CNNs with batch normalization and depthwise convolutions, an MLP
and a transformer block, trained with ``model.fit`` under ``disc_tf.enable()`` and
differentiated with a ``GradientTape``, against plain TensorFlow from the same weights.

Every model is built so that no trainable variable has a gradient that is zero in exact
arithmetic (no bias right before a batch norm, no attention biases, the first block's
output also reaches the head), so a relative error per variable is meaningful: the tests
check that too. Dropout is absent.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import disc_tf

keras = pytest.importorskip("keras")
L = keras.layers

#: float32 gradients: ||g_disc - g_tf|| / ||g_tf|| per trainable variable
GRAD_RTOL = 1e-4


def _se_block(x, filters: int, stride: int):
    """MobileNetV2/EfficientNet style: expand, depthwise, squeeze-excite, project."""
    c_in = x.shape[-1]
    h = L.Conv2D(c_in * 2, 1, use_bias=False)(x)
    h = L.BatchNormalization()(h)
    h = L.Activation("swish")(h)
    if stride == 2:
        h = L.ZeroPadding2D(((0, 1), (0, 1)))(h)
    h = L.DepthwiseConv2D(3, strides=stride, padding="same" if stride == 1 else "valid",
                          use_bias=False)(h)
    h = L.BatchNormalization()(h)
    h = L.Activation("swish")(h)
    s = L.GlobalAveragePooling2D(keepdims=True)(h)
    s = L.Conv2D(4, 1, activation="swish")(s)
    s = L.Conv2D(c_in * 2, 1, activation="sigmoid")(s)
    h = L.Multiply()([h, s])
    h = L.Conv2D(filters, 1, use_bias=False)(h)
    h = L.BatchNormalization()(h)
    if stride == 1 and c_in == filters:
        h = L.Add()([h, x])
    return h


def mobilenet():
    inp = keras.Input((None, None, 3))
    x = L.Conv2D(8, 3, strides=2, padding="same", use_bias=False)(inp)
    x = L.BatchNormalization()(x)
    x = L.Activation("swish")(x)
    b1 = _se_block(x, 8, 1)
    b2 = _se_block(b1, 12, 2)
    # the first block's output also reaches the head: otherwise the next block's batch
    # norm cancels its last batch norm's offset, whose gradient is then 0 (round-off only)
    x = L.Concatenate()([L.GlobalAveragePooling2D()(b1), L.GlobalAveragePooling2D()(b2)])
    return keras.Model(inp, L.Dense(5)(x))


def resnet():
    inp = keras.Input((None, None, 3))
    x = L.ZeroPadding2D(1)(inp)
    x = L.Conv2D(8, 3, strides=2, use_bias=False)(x)
    x = L.BatchNormalization(epsilon=1.001e-5)(x)
    x = L.Activation("relu")(x)
    x = L.MaxPooling2D(3, strides=2, padding="same")(x)
    shortcut = L.Conv2D(16, 1, strides=2, use_bias=False)(x)
    shortcut = L.BatchNormalization(epsilon=1.001e-5)(shortcut)
    h = L.Conv2D(8, 1, strides=2, use_bias=False)(x)
    h = L.BatchNormalization(epsilon=1.001e-5)(h)
    h = L.Activation("relu")(h)
    h = L.Conv2D(8, 3, padding="same", use_bias=False)(h)
    h = L.BatchNormalization(epsilon=1.001e-5)(h)
    h = L.Activation("relu")(h)
    h = L.Conv2D(16, 1, use_bias=False)(h)
    h = L.BatchNormalization(epsilon=1.001e-5)(h)
    out = L.Activation("relu")(L.Add()([shortcut, h]))
    # the stem also reaches the head: after max pooling its values are mostly positive,
    # so the relu passes its batch norm's offset on and the next batch norms cancel it
    x = L.Concatenate()([L.GlobalAveragePooling2D()(x), L.GlobalAveragePooling2D()(out)])
    return keras.Model(inp, L.Dense(5)(x))


def mlp():
    inp = keras.Input((12,))
    x = L.Dense(32, activation="relu")(inp)
    x = L.Dense(32, activation="tanh")(x)
    return keras.Model(inp, L.Dense(5)(x))


def transformer():
    """A pre-LN block over token embeddings (ids: every dim stays dynamic when traced)."""
    inp = keras.Input((None,), dtype="int32")
    x = L.Embedding(40, 16)(inp)
    h = L.LayerNormalization()(x)
    # no biases: a key bias shifts every score of a query equally, so softmax cancels it
    h = L.MultiHeadAttention(2, 8, dropout=0.0, use_bias=False)(h, h)
    x = x + h
    h = L.LayerNormalization()(x)
    h = L.Dense(32, activation="gelu")(h)
    x = x + L.Dense(16)(h)
    return keras.Model(inp, L.Dense(5)(L.GlobalAveragePooling1D()(x)))


MODELS = {"mobilenet": mobilenet, "resnet": resnet, "mlp": mlp, "transformer": transformer}
#: the most clusters (of more than 3 ops) a train step may split into: one, but the
#: native engine refuses the ResNet step whole ("add reads operand #1 with dims that do
#: not follow the kernel space") and compiles its two halves, and attention's Einsum has
#: no converter
MAX_CLUSTERS = {"mobilenet": 1, "resnet": 2, "mlp": 1, "transformer": 4}
#: (batch, spatial or sequence size) per step: batch sizes vary, and so do image sizes
SHAPES = [(6, 16), (4, 12), (6, 15), (3, 16), (5, 9)]


def _batch(kind: str, batch: int, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if kind in ("mobilenet", "resnet"):
        x = rng.standard_normal((batch, size, size, 3)).astype("float32")
    elif kind == "mlp":
        x = rng.standard_normal((batch, 12)).astype("float32")
    else:
        x = rng.integers(0, 40, (batch, size)).astype("int32")
    return x, rng.integers(0, 5, batch).astype("int64")


def _compiled(kind: str, weights: list[np.ndarray] | None = None):
    keras.utils.set_random_seed(0)
    model = MODELS[kind]()
    if weights is not None:
        model.set_weights(weights)
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _dataset(kind: str):
    batches = [_batch(kind, b, s, i) for i, (b, s) in enumerate(SHAPES)]
    x0, _ = batches[0]
    spec = (tf.TensorSpec((None,) * x0.ndim if kind != "mlp" else (None, 12),
                          tf.as_dtype(x0.dtype)), tf.TensorSpec([None], tf.int64))
    return tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec)


def _fit(kind: str, weights: list[np.ndarray], disc: bool) -> tuple[np.ndarray, Any]:
    """Per-step losses and (model, inference logits); ``model.compiles`` holds DISC's
    compile count after each step."""
    model = _compiled(kind, weights)
    losses: list[float] = []
    model.compiles = []

    class Log(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            losses.append(logs["loss"])
            model.compiles.append(disc_tf.compile_count())

    if disc:
        disc_tf.enable()
    try:
        model.fit(_dataset(kind), epochs=1, verbose=0, callbacks=[Log()])
        # inference mode: batch norm reads the moving statistics fit updated
        logits = model.predict(_batch(kind, 7, 11, 99)[0], batch_size=7, verbose=0)
    finally:
        disc_tf.disable()
    return np.array(losses), (model, logits)


def _step_graph() -> Any:
    """The train function's graph: Keras's ``multi_step_on_iterator``, with the step
    (``one_step_on_data``, a nested tf.function) and the convolutions Keras runs through
    nested ``_conv_xla`` functions traced into it."""
    return [g for g in disc_tf.report().graphs if g.name == "multi_step_on_iterator"][-1]


@pytest.mark.parametrize("kind", list(MODELS))
def test_fit_losses_and_state_match_plain_tensorflow(kind):
    """``model.fit`` over batches of varying size: per-step losses, the weights and moving
    statistics after the epoch, and inference logits all match plain TensorFlow."""
    weights = _compiled(kind).get_weights()
    plain, (plain_model, plain_logits) = _fit(kind, weights, disc=False)
    with_disc, (disc_model, disc_logits) = _fit(kind, weights, disc=True)
    assert len(plain) == len(with_disc) == len(SHAPES)
    np.testing.assert_allclose(with_disc, plain, rtol=1e-4, atol=1e-6)
    for v, a, b in zip(plain_model.weights, plain_model.get_weights(),
                       disc_model.get_weights()):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5, err_msg=v.path)
    np.testing.assert_allclose(disc_logits, plain_logits, rtol=1e-4, atol=1e-5)
    graph = _step_graph()
    assert sum(n.status.value == "compiled" for n in graph.nodes) > 30
    # one trace of the train function for every batch and image size: each cluster was
    # compiled (or found in the cache) once, at the first step, and nothing after it
    assert disc_model.compiles[1:] == [disc_model.compiles[0]] * (len(SHAPES) - 1)
    assert all(c.cache_misses + c.cache_hits == 1 for c in graph.clusters), graph.clusters
    assert not any(g.name in ("one_step_on_data", "_conv_xla")
                   for g in disc_tf.report().graphs), "nested functions were not inlined"
    # the ops that stay in TensorFlow are variable reads and writes, the data iterator and
    # Keras's step bookkeeping, so they split the step into few clusters
    assert len([c for c in graph.clusters if len(c.nodes) > 3]) <= MAX_CLUSTERS[kind], \
        sorted(len(c.nodes) for c in graph.clusters)
    failed = [(n.op, n.detail) for n in graph.nodes if n.reason is not None and
              n.reason.value in ("compile_error", "runtime_error")]
    assert not failed, failed
    # every step ran the step's clusters in DISC (Grappler may fold a small one whose
    # inputs are all constants, the padding arithmetic of a ZeroPadding2D gradient, by
    # running it once)
    calls = [c.calls for c in graph.clusters if len(c.nodes) > 3]
    assert calls and min(calls) >= len(SHAPES), calls


def _gradient_fn(kind: str, weights, wrapper, tape_inside: bool):
    """(model, f) where f(x, y) gives (loss, gradients of every trainable variable)."""
    model = _compiled(kind, weights)
    lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if tape_inside:  # the train step traced whole, as fit does
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = lossf(y, model(x, training=True))
            return loss, tape.gradient(loss, model.trainable_variables)

        return model, wrapper(step)

    def forward(x):  # an eager tape around a compiled forward
        return model(x, training=True)

    compiled = wrapper(forward)

    def step_eager(x, y):
        with tf.GradientTape() as tape:
            loss = lossf(y, compiled(x))
        return loss, tape.gradient(loss, model.trainable_variables)

    step_eager.compiled = compiled
    return model, step_eager


@pytest.mark.parametrize("kind", list(MODELS))
def test_one_step_gradients_match_plain_tensorflow(kind):
    """The gradient of every trainable variable after one step, with the tape traced
    inside the DISC function and with an eager tape around a DISC forward, on a first
    shape and an unseen one: relative error <= 1e-4 for each variable."""
    weights = _compiled(kind).get_weights()
    for tape_inside in (True, False):
        model, want_fn = _gradient_fn(kind, weights, tf.function, tape_inside)
        _, got_fn = _gradient_fn(kind, weights, disc_tf.function, tape_inside)
        names = [v.path for v in model.trainable_variables]
        for i, (b, s) in enumerate([(4, 16), (3, 11)]):
            x, y = (tf.constant(a) for a in _batch(kind, b, s, 50 + i))
            want_loss, want = want_fn(x, y)
            got_loss, got = got_fn(x, y)
            want, got = ([tf.convert_to_tensor(g).numpy() for g in gs] for gs in (want, got))
            np.testing.assert_allclose(got_loss, want_loss, rtol=1e-5)
            scale = np.mean([np.linalg.norm(w) for w in want])
            for name, g, w in zip(names, got, want):
                ref = np.linalg.norm(w)
                assert ref > 1e-4 * scale, f"{name}: gradient ~0, the check is void"
                rel = np.linalg.norm(g - w) / ref
                assert rel <= GRAD_RTOL, (kind, tape_inside, (b, s), name, rel)
        # the clusters ran compiled on both calls, under the eager tape too, except for a
        # model with custom gradients (swish): under a tape it runs in TensorFlow
        compiled = getattr(got_fn, "compiled", got_fn)
        calls = [c.calls for c in compiled.coverage().clusters if len(c.nodes) > 3]
        if kind == "mobilenet" and not tape_inside:
            assert compiled.uses_disc() and not any(calls), calls
        else:
            assert calls and min(calls) == 2, calls


@pytest.mark.parametrize("kind", ["mobilenet", "resnet"])
def test_predict_compiles_once_over_batch_sizes(kind):
    """``model.predict`` over batch sizes 8, 5, 3 and 1 (and an image size unseen at the
    first call): inference logits match plain TensorFlow, and the predict function was
    traced and compiled once, at the first batch, into a single cluster (depthwise
    convolutions, batch norm and squeeze-excite included)."""
    weights = _compiled(kind).get_weights()
    plain, model = _compiled(kind, weights), _compiled(kind, weights)
    disc_tf.enable()
    try:
        counts = []
        for i, (b, s) in enumerate([(8, 16), (5, 16), (3, 16), (1, 13)]):
            x = _batch(kind, b, s, 70 + i)[0]
            got = model.predict(x, batch_size=b, verbose=0)
            np.testing.assert_allclose(got, plain.predict(x, batch_size=b, verbose=0),
                                       rtol=1e-4, atol=1e-5)
            counts.append(disc_tf.compile_count())
    finally:
        disc_tf.disable()
    assert counts[1:] == [counts[0]] * 3, counts
    graph = [g for g in disc_tf.report().graphs if g.name.startswith("one_step_on_data")][-1]
    assert graph.calls == 4
    assert [(c.cache_misses + c.cache_hits, c.calls) for c in graph.clusters
            if len(c.nodes) > 3] == [(1, 4)], graph.clusters
