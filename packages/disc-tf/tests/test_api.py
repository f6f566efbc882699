"""enable/disable, disc_tf.function, config errors, compile counts, Keras model.fit."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import assert_same, rand

import disc_tf
import disc_tf.api
from disc_tf.config import DiscConfig


def test_one_compile_over_a_stream_of_shapes():
    def fn(x, w):
        h = tf.nn.relu(tf.matmul(x, w))
        return tf.reduce_mean(tf.nn.softmax(h), axis=-1)

    f = disc_tf.function(fn, min_cluster_size=2)
    w = rand([6, 5], seed=3)
    before = disc_tf.compile_count()
    for n in list(range(0, 20)) + [33, 64, 1]:
        x = rand([n, 6], seed=n)
        assert_same(f(x, w), fn(x, w))
    assert disc_tf.compile_count() - before == 1
    # another rank is another signature: one more trace and compilation
    f2 = disc_tf.function(lambda x: tf.nn.relu(x) * 2.0 + 1.0)
    before = disc_tf.compile_count()
    for shape in ([3], [0], [7], [1]):
        f2(rand(shape))
    for shape in ([3, 2], [1, 1], [5, 0]):
        f2(rand(shape))
    assert disc_tf.compile_count() - before == 2


def test_float64_is_its_own_signature():
    f = disc_tf.function(lambda x: tf.exp(x) - x * 2.0)
    for dtype in (tf.float32, tf.float64):
        for n in (3, 1, 0):
            x = rand([n, 2], dtype)
            assert_same(f(x), tf.exp(x) - x * 2.0)
    assert len(f._entries) == 2


def test_enable_routes_tf_function_and_disable_restores():
    original = tf.function
    disc_tf.enable(min_cluster_size=1)
    try:
        assert disc_tf.is_enabled()

        @tf.function
        def g(x):
            return tf.tanh(x) * 3.0

        x = rand([4, 3])
        assert_same(g(x), tf.tanh(x) * 3.0)
        assert g.uses_disc()
    finally:
        disc_tf.disable()
    assert tf.function is original and not disc_tf.is_enabled()
    # created while enabled, called after disable: plain TensorFlow again
    assert_same(g(rand([2, 3])), tf.tanh(rand([2, 3])) * 3.0)


def test_decorator_forms_and_methods():
    @disc_tf.function(min_cluster_size=1)
    def h(x):
        return x * 2.0 + 1.0

    class M:
        scale = 3.0

        @disc_tf.function
        def run(self, x):
            return tf.sigmoid(x) * self.scale

    x = rand([3, 2])
    assert_same(h(x), x * 2.0 + 1.0)
    assert_same(M().run(x), tf.sigmoid(x) * 3.0)


def test_bad_input_gives_clear_errors():
    with pytest.raises(TypeError, match="needs a callable"):
        disc_tf.function(42)
    with pytest.raises(TypeError, match="unknown disc-tf option 'min_size'"):
        disc_tf.enable(min_size=3)
    with pytest.raises(ValueError, match="min_cluster_size"):
        DiscConfig(min_cluster_size=0)
    with pytest.raises(ValueError, match="execution must be one of"):
        DiscConfig(execution="xla")
    with pytest.raises(ValueError, match="DISC_MIN_CLUSTER_SIZE"):
        DiscConfig.resolve(environ={"DISC_MIN_CLUSTER_SIZE": "many"})
    assert not disc_tf.is_enabled()


def test_repeated_signatures_take_the_fast_call_path(monkeypatch):
    """After its first call, a signature of positional tensors and scalars skips the
    general argument handling; results, the signature split (dtype, rank, scalar values)
    and the report's call counts stay what the general path gives."""
    def relu_scale_sum(x, scale):
        return tf.nn.relu(x) * scale + tf.reduce_sum(x, axis=-1, keepdims=True)

    ref = relu_scale_sum
    f = disc_tf.function(relu_scale_sum)
    general = []
    real = disc_tf.api.DiscFunction._entry_for

    def counting(self, args, kwargs):
        general.append(tuple(type(a).__name__ for a in args))
        return real(self, args, kwargs)

    monkeypatch.setattr(disc_tf.api.DiscFunction, "_entry_for", counting)
    shapes = ([4, 3], [1, 3], [0, 5], [7, 2], [2, 9])
    for n, shape in enumerate(shapes):
        x = rand(shape, seed=n)
        assert_same(f(x, 2.0), ref(x, 2.0))
    assert len(general) == 1  # only the first call of the signature
    for x, scale in ((rand([3, 3], tf.float64), 2.0), (rand([3]), 2.0),
                     (rand([3, 3]), 3.0)):  # new dtype, new rank, new Python scalar value
        assert_same(f(x, scale), ref(x, scale))
    assert len(general) == 4
    x = rand([5, 3])
    assert_same(f(x, scale=2.0), ref(x, 2.0))  # keywords take the general path
    assert len(general) == 5
    graph = [g for g in disc_tf.report().graphs if g.name == "relu_scale_sum"]
    first = graph[0]  # the float32 rank-2 scale=2.0 signature: 1 general + 4 fast calls
    assert first.calls == 5 and all(c.calls == 5 for c in first.clusters), first.clusters
    assert len(graph) == 5  # a keyword argument makes a signature of its own, as in TF


def test_pinned_input_signature_is_respected():
    f = disc_tf.function(lambda x: x * x + 1.0,
                         input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    assert_same(f(rand([5, 3])), rand([5, 3]) ** 2 + 1.0)
    with pytest.raises((ValueError, TypeError)):
        f(rand([5, 4]))


def _model(keras):
    keras.utils.set_random_seed(7)
    inp = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(50, 16)(inp)
    x = keras.layers.LayerNormalization()(x)
    x = keras.layers.Dense(32, activation="gelu")(x)
    x = keras.layers.GlobalAveragePooling1D()(x)
    out = keras.layers.Dense(4)(x)
    model = keras.Model(inp, out)
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _batches(n: int):
    rng = np.random.default_rng(0)
    for i in range(n):
        seq = 3 + (i * 7) % 17  # a different sequence length almost every step
        yield (rng.integers(0, 50, (8, seq)).astype("int32"),
               rng.integers(0, 4, (8,)).astype("int64"))


def test_keras_fit_matches_plain_tensorflow():
    """20 steps of model.fit over varying sequence lengths: the losses DISC gives equal
    TF's to within 1e-4 relative (float32 sums in a different order)."""
    import keras

    def fit():
        ds = tf.data.Dataset.from_generator(
            lambda: _batches(20),
            output_signature=(tf.TensorSpec([None, None], tf.int32),
                              tf.TensorSpec([None], tf.int64)))
        model = _model(keras)
        hist = []

        class Log(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                hist.append(logs["loss"])
                compiles.append(disc_tf.compile_count())

        model.fit(ds, epochs=1, verbose=0, callbacks=[Log()])
        return np.array(hist), model

    compiles: list[int] = []
    plain, _ = fit()
    before = disc_tf.compile_count()
    disc_tf.enable()
    try:
        with_disc, model = fit()
    finally:
        disc_tf.disable()
    assert len(plain) == len(with_disc) == 20
    np.testing.assert_allclose(with_disc, plain, rtol=1e-4, atol=1e-6)
    # the train function, with the step (a nested tf.function) traced into it
    graphs = [g for g in disc_tf.report().graphs if g.name == "multi_step_on_iterator"]
    compiled = [n for n in graphs[-1].nodes if n.status.value == "compiled"]
    assert len(compiled) > 50  # the step's math runs in DISC, not just a few ops
    # what stays in TF does so by design (variables), never by a failed cluster
    failed = [(n.op, n.detail) for n in graphs[-1].nodes if n.reason is not None and
              n.reason.value in ("compile_error", "runtime_error")]
    assert not failed, failed
    # every step ran every cluster; Keras's last call, which stops on the exhausted dataset,
    # may already have run clusters that do not wait for the batch (a 21st call)
    calls = [c.calls for c in graphs[-1].clusters if c.calls]
    assert calls and min(calls) == 20 and max(calls) <= 21
    # 20 distinct sequence lengths, one trace: every compilation happens in the first step
    # (clusters, and the halves tried for a cluster the native engine refused)
    assert compiles[-1] == compiles[20] > before


def test_function_needing_a_static_dim_is_traced_per_shape():
    """A Keras layer called directly needs its feature dim static; relaxing it fails the
    trace, so DISC warns once and traces per shape, with correct results."""
    import keras

    keras.utils.set_random_seed(3)
    norm = keras.layers.LayerNormalization()
    norm(rand([1, 1, 8]))  # built: its weights exist before the function is traced
    f = disc_tf.function(lambda x: norm(x) * 2.0)
    with pytest.warns(disc_tf.DiscFallbackWarning, match="traced per shape"):
        got = f(rand([3, 4, 8]))
    assert_same(got, norm(rand([3, 4, 8])) * 2.0)
    assert_same(f(rand([5, 2, 8])), norm(rand([5, 2, 8])) * 2.0)
    assert f.uses_disc()


def test_nested_functions_are_traced_into_the_enclosing_one():
    """Under ``enable()``, a tf.function called while another is traced (Keras runs the
    train step, and convolutions whose input channels are unknown, through nested ones)
    is traced into the caller: one cluster and one compilation over every shape instead
    of a call op splitting the caller, plus the callee's own. A pinned callee keeps its
    call (its input_signature is its contract)."""
    w = tf.Variable(np.linspace(-1.0, 1.0, 12).reshape(3, 4).astype("float32"))

    def body(h):
        return tf.nn.relu(h) * 2.0 - h

    disc_tf.enable(min_cluster_size=1)
    try:
        inner = tf.function(body, jit_compile=True)  # XLA overridden: DISC decides
        pinned = tf.function(body, input_signature=[tf.TensorSpec([None, 4], tf.float32)])

        @tf.function
        def outer(x):
            h = tf.tanh(tf.matmul(x, w))
            return tf.reduce_sum(inner(h) * h, -1) + tf.reduce_sum(pinned(h), -1)
    finally:
        disc_tf.disable()

    def reference(x):
        h = tf.tanh(tf.matmul(x, w))
        return tf.reduce_sum(body(h) * h, -1) + tf.reduce_sum(body(h), -1)

    disc_tf.enable(min_cluster_size=1)
    try:
        before = disc_tf.compile_count()
        for n in (5, 1, 8, 3):
            x = rand([n, 3])
            assert_same(outer(x), reference(x))
        graph = outer.coverage()
    finally:
        disc_tf.disable()
    ops = [n.op for n in graph.nodes]
    assert "MatMul" in ops and "Relu" in ops, ops  # the inlined body is the caller's
    calls = [n for n in graph.nodes if n.op in ("PartitionedCall", "StatefulPartitionedCall")]
    assert len(calls) == 1, calls  # the pinned function's call only
    assert all(c.calls == 4 and c.cache_misses + c.cache_hits == 1 for c in graph.clusters)
    assert disc_tf.compile_count() - before <= len(graph.clusters)
    assert inner._entries == {}  # never traced on its own


def test_a_trace_that_fails_with_calls_inlined_is_retried_with_calls(monkeypatch):
    """Inlining must never be what breaks a program: if the enclosing trace fails after
    a nested DISC function was traced into it, it is traced again with that function
    called (one warning), and the results are TensorFlow's."""
    def body(h):
        return tf.nn.relu(h) * 2.0 - h

    def broken_inline(self, *args, **kwargs):
        raise ValueError("injected inlining failure")

    monkeypatch.setattr(disc_tf.api.DiscFunction, "_inline", broken_inline)
    disc_tf.enable(min_cluster_size=1)
    try:
        inner = tf.function(body)

        @tf.function
        def outer(x):
            return tf.reduce_sum(inner(tf.tanh(x)) * x, -1)

        with pytest.warns(disc_tf.DiscFallbackWarning, match="called as functions"):
            got = outer(rand([4, 3]))
        assert_same(got, tf.reduce_sum(body(tf.tanh(rand([4, 3]))) * rand([4, 3]), -1))
        assert_same(outer(rand([2, 3])),
                    tf.reduce_sum(body(tf.tanh(rand([2, 3]))) * rand([2, 3]), -1))
    finally:
        disc_tf.disable()
    assert outer.uses_disc()
