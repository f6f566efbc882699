"""Whatever DISC cannot do runs in TensorFlow: results stay right, one warning, a report
entry with the reason."""

from __future__ import annotations

import warnings

import pytest
import tensorflow as tf
from helpers import assert_same, rand

import disc_tf
from disc_tf import partition
from disc_tf.custom_op import load_library


def _status(f):
    return {n.name: (n.status.value, n.reason.value if n.reason else None)
            for n in f.coverage().nodes}


def test_unsupported_op_in_the_middle_splits_the_region():
    def fn(x):
        a = tf.nn.relu(x) * 2.0 + 1.0
        b = tf.math.cumsum(a, axis=1)  # no converter
        return tf.tanh(b) - b * 0.5

    f = disc_tf.function(fn)
    for n in (4, 1, 0, 9):
        assert_same(f(rand([n, 5])), fn(rand([n, 5])))
    status = _status(f)
    assert status["Cumsum"] == ("fallback", "no_converter")
    assert len(f.coverage().clusters) == 2  # before and after the cumsum


def test_cond_and_while_loop_stay_in_tensorflow():
    def fn(x, n):
        y = tf.nn.relu(x) * 3.0 - 1.0
        y = tf.cond(tf.reduce_sum(y) > 0, lambda: y * 2.0, lambda: y - 1.0)
        i, z = tf.while_loop(lambda i, z: i < n, lambda i, z: (i + 1, z * 0.5 + 1.0),
                             (tf.constant(0), y))
        return tf.exp(z) + tf.sigmoid(z)

    f = disc_tf.function(fn)
    for shape, n in (([3, 4], 2), ([1, 4], 0), ([6, 2], 5)):
        x = rand(shape)
        assert_same(f(x, tf.constant(n)), fn(x, tf.constant(n)))
    ops = {n.op: (n.status.value, n.reason.value if n.reason else None)
           for n in f.coverage().nodes}
    flow = {k: v for k, v in ops.items() if "If" in k or "While" in k}
    assert len(flow) == 2, ops
    assert set(flow.values()) == {("fallback", "no_converter")}
    assert f.uses_disc()


def test_compile_failure_warns_once_and_falls_back(monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("injected compile failure")

    monkeypatch.setattr(partition, "compile_cluster", boom)
    import disc_tf.api as api

    monkeypatch.setattr(api, "compile_cluster", boom)

    def fn(x):
        return tf.nn.softplus(x) * 4.0 - 2.0

    f = disc_tf.function(fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (3, 5, 0):
            assert_same(f(rand([n, 2])), fn(rand([n, 2])))
    msgs = [str(w.message) for w in caught if issubclass(w.category, disc_tf.DiscFallbackWarning)]
    assert len(msgs) == 1 and "injected compile failure" in msgs[0]
    assert not f.uses_disc()
    assert {v for v in _status(f).values()} == {("fallback", "compile_error")}


def test_runtime_failure_runs_the_original_subgraph():
    def fn(x):
        return tf.math.log1p(tf.abs(x)) * 3.0 + x

    f = disc_tf.function(fn)
    lib = load_library()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert_same(f(rand([4, 3])), fn(rand([4, 3])))  # compiled, runs in DISC
        lib.inject_failures(1)
        for n in (4, 2, 7):  # first fails inside the kernel; all run the fallback
            assert_same(f(rand([n, 3])), fn(rand([n, 3])))
    lib.inject_failures(0)
    msgs = [str(w.message) for w in caught if issubclass(w.category, disc_tf.DiscFallbackWarning)]
    assert len(msgs) == 1 and "injected runtime failure" in msgs[0]
    graph = f.coverage()
    assert graph.clusters[0].calls == 1
    assert {v for v in _status(f).values()} == {("fallback", "runtime_error")}


@pytest.mark.parametrize("dtype", [tf.float32, tf.int32])
def test_numpy_function_path(dtype):
    def fn(x, s):  # s: a rank-0 input, which numpy_function hands over as a 0-d array
        return tf.maximum(x * 2, x - s) + tf.reduce_sum(x, axis=0) * s

    f = disc_tf.function(fn, execution="numpy_function")
    for n in (3, 1, 0, 6):
        x, s = rand([n, 4], dtype), tf.constant(3, dtype)
        assert_same(f(x, s), fn(x, s))
    assert f.uses_disc()
    graph = f.coverage()
    assert graph.clusters and all(c.calls == 4 for c in graph.clusters)
    assert all(n.status.value == "compiled" for n in graph.nodes if n.name != "Identity")


def test_launch_checks_input_ranks_before_running_the_module(monkeypatch):
    """The module reads all input dims from one flat list, so an input of an unexpected rank
    would silently shift every later input's dims: DiscLaunch refuses it and falls back."""
    from disc_tf import rewrite

    original = rewrite._launch_node

    def wrong_rank(*args, **kwargs):
        node = original(*args, **kwargs)
        ranks = list(node.attr["input_ranks"].list.i)
        del node.attr["input_ranks"].list.i[:]
        node.attr["input_ranks"].list.i.extend([ranks[0] + 1] + ranks[1:])
        return node

    monkeypatch.setattr(rewrite, "_launch_node", wrong_rank)

    def fn(x):
        return tf.math.log1p(tf.abs(x)) * 3.0 + x

    f = disc_tf.function(fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (4, 2):
            assert_same(f(rand([n, 3])), fn(rand([n, 3])))
    msgs = [str(w.message) for w in caught if issubclass(w.category, disc_tf.DiscFallbackWarning)]
    assert len(msgs) == 1 and "expected rank 3" in msgs[0], msgs
    assert {v for v in _status(f).values()} == {("fallback", "runtime_error")}


def test_clusters_compile_side_by_side_and_a_refused_one_is_halved(monkeypatch):
    """Clusters compile concurrently; one the native engine refuses is split in two along
    its topological order and each half retried, so only what cannot compile stays in TF."""
    import threading

    from disc_tf import api

    original = api.compile_cluster
    threads, sizes = [], []

    def picky(compiler, low, native):
        threads.append(threading.current_thread().name)
        sizes.append(len(low.members))
        if len(low.members) > 4:
            raise RuntimeError("refused: too many ops")
        return original(compiler, low, native)

    monkeypatch.setattr(api, "compile_cluster", picky)

    def fn(x):
        a = tf.nn.relu(x) * 2.0 + 1.0 - x * 0.5
        a = tf.exp(-a) * 3.0
        b = tf.math.cumsum(a, axis=1)  # no converter: two clusters around it
        return tf.tanh(b) - b * 0.5 + tf.sigmoid(b) * 2.0

    f = disc_tf.function(fn)
    for n in (4, 1, 0, 9):
        assert_same(f(rand([n, 5])), fn(rand([n, 5])))
    assert sizes[0] > 4 and sizes[1] > 4  # both clusters were refused whole, compiled
    assert all(t.startswith("disc-tf-build") for t in threads[:2])  # by the build pool
    graph = f.coverage()
    status = _status(f)
    assert status["Cumsum"] == ("fallback", "no_converter")
    compiled = [c for c in graph.clusters if c.calls]
    assert len(compiled) >= 4 and all(c.calls == 4 for c in compiled)
    assert all(len(c.nodes) <= 4 for c in compiled)


def test_accuracy_guard_catches_a_wrong_result_in_the_launch_op():
    """first=1,every=2 compares calls 0, 2, 4...: a module that returns a wrong value on
    call 1 goes unnoticed (the policy's price), one that does so on call 2 is caught; that
    call returns TensorFlow's values and the cluster runs its TF ops from then on."""
    def fn(x):
        return tf.math.log1p(tf.abs(x)) * 3.0 + x

    f = disc_tf.function(fn, accuracy_check="first=1,every=2")
    lib = load_library()
    x = rand([4, 3])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert_same(f(x), fn(x))  # call 0: checked, right
        lib.inject_wrong_results(1)
        skewed = f(x).numpy()  # call 1: not checked, so the skew shows
        assert abs(skewed.flat[0] - fn(x).numpy().flat[0] - 1.0) < 1e-5
        lib.inject_wrong_results(1)
        for n in (4, 2, 7):  # call 2 is checked and caught; then TF runs it
            assert_same(f(rand([n, 3])), fn(rand([n, 3])))
    lib.inject_wrong_results(0)
    msgs = [str(w.message) for w in caught if issubclass(w.category, disc_tf.DiscFallbackWarning)]
    assert len(msgs) == 1 and "accuracy check failed: output #0" in msgs[0], msgs
    assert {v for v in _status(f).values()} == {("fallback", "accuracy_mismatch")}
    assert f.coverage().clusters[0].engine.value == "framework"


def test_accuracy_guard_stays_quiet_on_right_results():
    """Every call checked, float32 and float64, reductions over many terms and unseen
    shapes: the tolerances never call a right result wrong."""
    def fn(x, w):
        h = tf.nn.softmax(tf.matmul(x, w) * 0.1, axis=-1)
        return tf.reduce_sum(h * x[:, :1], axis=0), tf.math.reduce_mean(x * x, axis=1)

    for dtype in (tf.float32, tf.float64):
        f = disc_tf.function(fn, accuracy_check="first=100", execution="custom_op")
        with warnings.catch_warnings():
            warnings.simplefilter("error", disc_tf.DiscFallbackWarning)
            for n in (3, 1, 0, 257):
                x, w = rand([n, 300], dtype), rand([300, 64], dtype)
                for got, want in zip(f(x, w), fn(x, w)):
                    assert_same(got, want)
        assert f.uses_disc()
        assert {v[0] for v in _status(f).values()} == {"compiled"}


def test_accuracy_guard_says_it_is_off_under_numpy_function():
    from disc_core.bridge import fallback

    fallback._warned.clear()  # warn_once's memory: this test counts the warning itself
    f = disc_tf.function(lambda x: tf.exp(x) * 2.0 + x, accuracy_check=True,
                         execution="numpy_function")
    with pytest.warns(disc_tf.DiscFallbackWarning, match="clusters are not checked"):
        f(rand([3, 2]))


def test_a_call_that_raises_reports_its_cluster_failure_at_once():
    """A cluster whose run-time check fails hands the call to its TensorFlow ops; when
    those raise (bad input, as without DISC), the failure is warned about and reported by
    that call, not at the next call of whatever DISC function comes next."""
    def bad_matmul(a, b):
        return tf.nn.relu(tf.matmul(a * 2.0, b) + 1.0)

    spec = tf.TensorSpec([None, None], tf.float32)
    f = disc_tf.function(bad_matmul, input_signature=[spec, spec])
    assert_same(f(rand([3, 4]), rand([4, 5])), bad_matmul(rand([3, 4]), rand([4, 5])))
    assert f.uses_disc()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with pytest.raises(tf.errors.InvalidArgumentError):
            f(rand([3, 4]), rand([6, 5]))  # inner dims differ
    messages = [str(w.message) for w in record
                if issubclass(w.category, disc_tf.DiscFallbackWarning)]
    assert any("bad_matmul" in m and "runtime_error" in m for m in messages), messages
    failed = [c for c in f.coverage().clusters if c.engine is not None]
    assert any(c.engine.value == "framework" for c in failed), failed
