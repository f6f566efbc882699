"""The boundary between DISC clusters and the ops that stay in TensorFlow (no converter,
excluded by the user, a call of another tf.function, a custom gradient), forward and
gradient, under an eager GradientTape and with the tape traced inside the DISC function,
in float32 and float64, on shapes seen and unseen when the function was compiled.

What crosses the boundary is checked on purpose: transposed (layout-changed) values,
variables read on both sides of an assignment, several cluster outputs of mixed dtypes
(values, integer indices, shapes), values a TensorFlow op's gradient reads back (its own
output, a cluster's output, integer indices), cluster outputs nothing differentiates,
values that only differ from another output by a ``stop_gradient``, and tensors
TensorFlow gives no static shape."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import TOL, assert_same, assert_within_sum_bound, rand

import disc_tf

#: (rows, cols) per call: the first compiles, the rest are unseen (0 and 1 included)
SHAPES = [(5, 4), (1, 4), (9, 3), (0, 2), (13, 6)]


def _close(got, want):
    """(outputs, gradients) pairs: outputs element by element (helpers.assert_same),
    gradients by norm, ||g - w|| <= rtol * ||w|| + atol with helpers.TOL's rtol and atol
    (summation order differs, and a gradient summing large terms of both signs has
    small elements whose relative error means nothing)."""
    (got_out, got_grads), (want_out, want_grads) = got, want
    assert_same(got_out, want_out)
    assert len(got_grads) == len(want_grads)
    for i, (g, w) in enumerate(zip(got_grads, want_grads)):
        assert (g is None) == (w is None), (i, g, w)
        if w is None:
            continue
        g, w = tf.convert_to_tensor(g), tf.convert_to_tensor(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (i, g, w)
        rtol, atol = TOL[w.dtype]
        err, ref = np.linalg.norm(g.numpy() - w.numpy()), np.linalg.norm(w.numpy())
        assert err <= rtol * ref + atol, (i, err, ref, g.numpy(), w.numpy())


def _loss(outs):
    y, unused, idx = outs
    del unused  # an output nothing differentiates
    return tf.reduce_sum(y * y) + tf.reduce_sum(tf.cast(idx, y.dtype))


def _step(fn, variables):
    """A train step: the tape inside, watching the arguments and ``variables``."""
    def step(*args):
        with tf.GradientTape() as tape:
            tape.watch(list(args) + variables)
            outs = fn(*args)
            loss = _loss(outs)
        return outs, tape.gradient(loss, list(args) + variables)

    return step


def _eager(f, args, variables):
    """An eager tape around a call of ``f``."""
    with tf.GradientTape() as tape:
        tape.watch(list(args) + variables)
        outs = f(*args)
        loss = _loss(outs)
    return outs, tape.gradient(loss, list(args) + variables)


def _check_gradients(fn, variables, arg_sets, taped_disc=True, **options):
    """``fn`` through DISC against plain TensorFlow: an eager tape around it, and the
    tape traced inside; one DISC function each for every argument set. Every cluster
    ran compiled on every call (under the eager tape too, unless ``taped_disc`` is
    False: a function with custom gradients then runs in TensorFlow)."""
    f = disc_tf.function(fn, **options)
    step = disc_tf.function(_step(fn, variables), **options)
    plain, plain_step = tf.function(fn), tf.function(_step(fn, variables))
    for args in arg_sets:
        _close(_eager(f, args, variables), _eager(plain, args, variables))
        _close(step(*args), plain_step(*args))
    assert f.uses_disc() and step.uses_disc()
    for g, ran in ((f, taped_disc), (step, True)):
        calls = [c.calls for c in g.coverage().clusters]
        if ran:
            assert calls and all(n == len(arg_sets) for n in calls), calls
        else:
            assert not any(calls), calls
    return f, step


def _fallback_in_the_middle(w: tf.Variable):
    def fn(x):
        h = tf.matmul(x, w) + 0.5
        a = tf.transpose(tf.nn.relu(h) - h * 0.25)  # leaves the cluster transposed
        c = tf.math.cumsum(a, axis=1)  # no converter: stays in TensorFlow
        s = tf.sigmoid(c * 0.5)  # excluded below: its gradient reads its own output
        idx = tf.argmax(h, axis=-1, output_type=tf.int32)  # integer, leaves the cluster
        # no converter; its gradient gathers by idx and compares with its own output
        seg = tf.math.unsorted_segment_max(h * 1.5, idx, num_segments=tf.shape(h)[1])
        seg = tf.maximum(seg, -10.0)  # an empty segment's max is the lowest float
        y = tf.reduce_sum(tf.transpose(s) * h, axis=-1) + tf.reduce_sum(seg)
        unused = tf.reduce_max(h, axis=-1) * 3.0
        return y, unused, idx

    return fn


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_gradients_across_ops_that_stay_in_tensorflow(dtype):
    """Clusters on both sides of ops without converter and of an excluded op: outputs
    and gradients (input and variable) match TensorFlow on every shape."""
    rng = np.random.default_rng(1)
    w = tf.Variable(rng.standard_normal((6, 7)), dtype=dtype)
    f, step = _check_gradients(_fallback_in_the_middle(w), [w],
                               [(rand([rows, 6], dtype),) for rows, _ in SHAPES],
                               excluded_ops=frozenset({"Sigmoid"}))
    for graph in (f.coverage(), step.coverage()):
        status = {n.op: n.status.value for n in graph.nodes}
        assert status["Cumsum"] == status["Sigmoid"] == "fallback"
        assert status["UnsortedSegmentMax"] == "fallback"
        assert status["MatMul"] == status["ArgMax"] == "compiled"
        assert all(c.calls == len(SHAPES) for c in graph.clusters if c.calls), graph.clusters


def _stop_gradient_outputs(x, w):
    """``a`` and ``stop_gradient(a)`` (and an identity of it) all read by TensorFlow ops,
    and ``stop_gradient`` of an input: values a cluster would return once or pass
    through, whose gradients differ."""
    a = tf.nn.relu(tf.matmul(x, w)) * 2.0
    s = tf.stop_gradient(a)
    i = tf.identity(s)
    t = tf.stop_gradient(x) * 1.0
    u = tf.stop_gradient(x)
    y = tf.math.cumsum(a, 1) + tf.math.cumsum(s, 1) * tf.math.cumsum(i, 1) + \
        tf.reduce_sum(tf.math.cumsum(t, 1) * tf.math.cumsum(u, 1)) * a
    return y, tf.reduce_sum(a), tf.shape(a)[0]


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_stop_gradient_is_kept_on_values_that_leave_a_cluster(dtype):
    """A launch's gradient differentiates one tensor per launch output: a value and its
    ``stop_gradient`` must not share one, nor may ``stop_gradient(input)`` become the
    input itself."""
    rng = np.random.default_rng(2)
    w = tf.Variable(rng.standard_normal((4, 5)), dtype=dtype)
    _check_gradients(lambda x: _stop_gradient_outputs(x, w), [w],
                     [(rand([rows, 4], dtype),) for rows, _ in SHAPES])


@tf.custom_gradient
def _clip_grad(x):
    def grad(dy):
        return tf.clip_by_value(dy, -0.5, 0.5) * 3.0

    return tf.identity(x), grad


def _with_nested_call(w):
    v = tf.Variable(np.linspace(-1.0, 2.0, 6), dtype=w.dtype)

    @tf.function
    def nested(h):
        """Another tf.function reading a variable (Keras runs convolutions through one):
        TensorFlow attaches its call's gradient in Python while tracing, which a GraphDef
        does not carry; without it TensorFlow's fallback cannot take resource inputs."""
        return tf.nn.relu(h) * v - h

    def fn(x):
        h = tf.tanh(tf.matmul(x, w)) * 2.0
        return tf.reduce_sum(nested(h) * h, -1), tf.reduce_max(h, -1), tf.shape(h)[0]

    return fn


def _with_custom_gradient(w):
    def fn(x):
        h = tf.matmul(x, w) * 2.0
        return (tf.reduce_sum(_clip_grad(tf.nn.swish(h)) * h, -1), tf.reduce_max(h, -1),
                tf.shape(h)[0])

    return fn


@pytest.mark.parametrize("make", [_with_nested_call, _with_custom_gradient],
                         ids=["nested_call", "custom_gradient"])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_gradients_through_nested_calls_and_custom_gradients(make, dtype):
    """Under an eager tape, with the tape traced inside, and through ``tf.gradients`` of
    an outer traced function: the gradients are TensorFlow's. Without a tape the
    clusters run in DISC."""
    rng = np.random.default_rng(3)
    w = tf.Variable(rng.standard_normal((5, 6)), dtype=dtype)
    fn = make(w)
    arg_sets = [(rand([rows, 5], dtype),) for rows, _ in SHAPES]
    f, _ = _check_gradients(fn, [w], arg_sets, taped_disc=make is _with_nested_call)

    def symbolic(g):
        def outer(x):
            y, _, _ = g(x)
            return tf.gradients(tf.reduce_sum(y * y), [x, w])

        return outer

    outer, plain_outer = disc_tf.function(symbolic(f)), tf.function(symbolic(fn))
    for (x,) in arg_sets:
        _close(((), outer(x)), ((), plain_outer(x)))
    # no tape: DISC runs every cluster of the function
    before = [c.calls for c in f.coverage().clusters]
    assert_same(f(rand([3, 5], dtype)), fn(rand([3, 5], dtype)))
    after = [c.calls for c in f.coverage().clusters]
    assert after and all(b == a + 1 for a, b in zip(before, after)), (before, after)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_variables_read_on_both_sides_of_an_assignment(dtype):
    """A cluster reads a variable before and after TensorFlow assigns it in the same
    call; the values and the gradient w.r.t. the variable follow TensorFlow's order."""
    def make(v):
        def fn(x):
            a = tf.nn.relu(x * v) + 1.0
            v.assign_add(tf.reduce_sum(a, 0) * 0.01)  # (a mean is NaN for 0 rows)
            b = tf.tanh(x * v) * a
            return tf.reduce_sum(b, -1), tf.reduce_max(a, -1), tf.shape(b)[0]

        return fn

    init = np.random.default_rng(4).standard_normal(3)
    v_disc, v_tf = tf.Variable(init, dtype=dtype), tf.Variable(init, dtype=dtype)
    f, g = disc_tf.function(make(v_disc)), tf.function(make(v_tf))
    step = disc_tf.function(_step(make(v_disc), [v_disc]))
    plain_step = tf.function(_step(make(v_tf), [v_tf]))
    for rows, _ in SHAPES:
        x = rand([rows, 3], dtype)
        _close(_eager(f, (x,), [v_disc]), _eager(g, (x,), [v_tf]))
        assert_same(v_disc, v_tf)
        _close(step(x), plain_step(x))
        assert_same(v_disc, v_tf)
    assert f.uses_disc() and step.uses_disc()


def _unknown_shape(x):
    """``x`` as [n, -1, 4] computed where TensorFlow infers no static shape."""
    r = tf.numpy_function(lambda a: a.reshape(a.shape[0], -1, 4), [x], x.dtype,
                          stateful=False)
    r.set_shape([None, None, None])
    return r


def test_broadcast_of_a_tensor_whose_static_shape_is_unknown():
    """``BroadcastTo`` of a tensor TensorFlow computed with no static shape: its dims are
    fresh symbols, 1 at run time (a broadcast) or the target size; the result has the
    target shape either way, computed by DISC (no fallback)."""
    def fn(x, big):
        return tf.broadcast_to(_unknown_shape(x), tf.shape(big)) * 2.0 + 1.0

    def implicit(x, big):  # numpy broadcasting of two unknown shapes: may fall back
        return tf.reduce_sum(_unknown_shape(x) * big, axis=1) - 1.0

    f, g = disc_tf.function(fn), disc_tf.function(implicit)
    for n, k, middle in ((4, 6, 1), (3, 5, 5), (2, 7, 1), (1, 3, 3), (5, 1, 1)):
        x, big = rand([n, middle * 4]), rand([n, k, 4], seed=n)
        assert_same(f(x, big), fn(x, big))
        assert_same(g(x, big), implicit(x, big))
    graph = f.coverage()
    assert [c.calls for c in graph.clusters] == [5]
    assert not [n for n in graph.nodes if n.reason is not None and
                n.reason.value == "runtime_error"]


def test_column_sums_of_different_depth_over_one_space():
    """An attention output projection's backward: the bias gradient sums dy over batch
    and sequence, the kernel gradient sums per-batch products over the batch, and dy
    comes from another cluster (here: from TensorFlow, with no static shape)."""
    def fn(dy, x):
        dy = tf.reshape(dy, tf.shape(x))
        return (tf.reduce_sum(dy, axis=[0, 1]),
                tf.reduce_sum(tf.matmul(x, dy, transpose_a=True), axis=0))

    f = disc_tf.function(fn, input_signature=[tf.TensorSpec([None, None, None]),
                                              tf.TensorSpec([None, 16, 16])])
    for n in (4, 3, 7):
        dy, x = rand([n, 16, 16], seed=1), rand([n, 16, 16], seed=2)
        d64, x64 = dy.numpy().astype(np.float64), x.numpy().astype(np.float64)
        exact = (d64.sum((0, 1)), np.einsum("bsi,bsj->ij", x64, d64))
        magnitude = (np.abs(d64).sum((0, 1)), np.einsum("bsi,bsj->ij", abs(x64), abs(d64)))
        # TF's own float32 result is held to the same bound: the bound is no excuse
        for result in (f(dy, x), fn(dy, x)):
            for got, e, m in zip(result, exact, magnitude):
                assert got.dtype == tf.float32
                assert_within_sum_bound(got, e, m, terms=16 * n + 1)


def test_fit_with_a_keras_layer_that_stays_in_tensorflow():
    """``model.fit`` with an op without converter between Dense layers: the losses and
    the trained weights match plain TensorFlow over batches of varying size."""
    keras = pytest.importorskip("keras")

    def model():
        keras.utils.set_random_seed(5)
        inp = keras.Input((8,))
        h = keras.layers.Dense(16, activation="relu")(inp)
        h = keras.layers.Lambda(lambda t: tf.math.cumsum(t, axis=-1) * 0.1)(h)
        h = keras.layers.Dense(16, activation="tanh")(h)
        m = keras.Model(inp, keras.layers.Dense(3)(h))
        m.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return m

    rng = np.random.default_rng(6)
    batches = [(rng.standard_normal((b, 8)).astype("float32"), rng.integers(0, 3, b))
               for b in (8, 5, 1, 7, 3)]

    def fit(disc):
        m = model()
        if disc:
            disc_tf.enable()
        try:
            losses = [m.fit(x, y, batch_size=len(x), verbose=0).history["loss"][0]
                      for x, y in batches]
        finally:
            disc_tf.disable()
        return np.array(losses), m.get_weights()

    plain, w_plain = fit(False)
    with_disc, w_disc = fit(True)
    np.testing.assert_allclose(with_disc, plain, rtol=1e-5, atol=1e-7)
    for a, b in zip(w_disc, w_plain):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    graph = [g for g in disc_tf.report().graphs if g.name == "multi_step_on_iterator"][-1]
    ops = {n.op: n.status.value for n in graph.nodes}
    assert ops["Cumsum"] == "fallback" and ops["MatMul"] == "compiled"


def test_train_step_traced_per_shape_can_still_create_optimizer_slots():
    """A train step that needs a static feature dim cannot be traced with every dim
    dynamic; DISC traces it per shape instead, and that trace must still be the
    tf.function's first, the only one allowed to create variables (the optimizer's
    momentum slots, built in the step). (``model.fit`` no longer gets here: its step is
    traced into the train function, whose batches have the dataset's static dims.)"""
    keras = pytest.importorskip("keras")

    def model():
        keras.utils.set_random_seed(7)
        inp = keras.Input((None, 8))
        h = keras.layers.LayerNormalization()(inp)  # needs the feature dim when traced
        h = keras.layers.GlobalAveragePooling1D()(h)
        m = keras.Model(inp, keras.layers.Dense(3)(h))
        m.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return m

    rng = np.random.default_rng(8)
    batches = [(rng.standard_normal((4, s, 8)).astype("float32"), rng.integers(0, 3, 4))
               for s in (5, 7, 5)]

    def fit(wrap):
        m = model()
        step = wrap(m.train_step)
        losses = [float(step((tf.constant(x), tf.constant(y)))["loss"]) for x, y in batches]
        return np.array(losses), m.get_weights()

    plain, w_plain = fit(tf.function)
    with pytest.warns(disc_tf.DiscFallbackWarning, match="traced per shape"):
        with_disc, w_disc = fit(disc_tf.function)
    np.testing.assert_allclose(with_disc, plain, rtol=1e-5, atol=1e-7)
    assert len(w_disc) == len(w_plain)  # the momentum slots were created
    for a, b in zip(w_disc, w_plain):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_random_mask_shaped_like_the_batch_keeps_its_gradient_compiled():
    """A drop-connect mask (``noise_shape=[batch, 1]``, EfficientNet's) comes from a
    random op that stays in TensorFlow; its shape is its shape operand, here the
    activations' batch, so the product's gradient knows which side broadcasts and stays
    compiled instead of leaving a data-dependent Sum in TensorFlow. Forward and gradients
    match TensorFlow's over batch sizes unseen when compiled (same seeds, same masks)."""
    w = tf.Variable(np.random.default_rng(9).standard_normal((4, 6)).astype("float32"))

    def fn(x):
        h = tf.tanh(tf.matmul(x, w))
        mask = tf.random.stateless_uniform(tf.stack([tf.shape(h)[0], 1]), seed=[3, 4])
        y = h * tf.cast(mask > 0.3, h.dtype) / 0.7
        return tf.reduce_sum(tf.sin(y) * h, -1), tf.reduce_max(y, -1), tf.shape(y)[0]

    arg_sets = [(rand([n, 4]),) for n in (5, 1, 9, 3)]
    _, step = _check_gradients(fn, [w], arg_sets)
    nodes = step.coverage().nodes
    assert not [(n.op, n.detail) for n in nodes if n.reason is not None and
                n.reason.value == "data_dependent_shape"]
    assert any(n.op == "StatelessRandomUniformV2" and n.status.value == "fallback"
               for n in nodes)


def test_residual_add_of_strided_sizes_between_random_masks():
    """EfficientNet's pattern in small: random masks (in TensorFlow) split the step into
    clusters, and tensors of strided spatial sizes (``ceildiv(h, 2)``, not plain symbols)
    cross between them into a residual add and its gradient. Forward and gradients match
    TensorFlow over unseen sizes, and no cluster fails or leaves a data-dependent shape."""
    rng = np.random.default_rng(10)
    k1 = tf.Variable(rng.standard_normal((3, 3, 3, 4)).astype("float32") * 0.3)
    k2 = tf.Variable(rng.standard_normal((1, 1, 3, 4)).astype("float32") * 0.3)

    def fn(x):
        a = tf.nn.relu(tf.nn.conv2d(x, k1, 2, "SAME"))
        mask = tf.random.stateless_uniform(tf.stack([tf.shape(a)[0], 1, 1, 1]), seed=[1, 2])
        b = a * tf.cast(mask > 0.3, a.dtype)
        c = tf.nn.conv2d(tf.tanh(x), k2, 2, "SAME")
        y = b + c
        mask2 = tf.random.stateless_uniform(tf.stack([tf.shape(y)[0], 1, 1, 1]), seed=[3, 4])
        y = tf.where(mask2 > 0.2, y, tf.zeros_like(y)) * 1.25
        return tf.reduce_sum(tf.sin(y), [1, 2, 3]), tf.reduce_max(y, [1, 2, 3]), tf.shape(y)[0]

    arg_sets = [(rand([n, s, s + 1, 3], low=-1.0, high=1.0),) for n, s in
                ((3, 9), (1, 4), (4, 7), (2, 12))]
    _, step = _check_gradients(fn, [k1, k2], arg_sets)
    failed = [(n.op, n.detail) for n in step.coverage().nodes if n.reason is not None and
              n.reason.value in ("compile_error", "runtime_error", "data_dependent_shape")]
    assert not failed, failed
