"""What tf.distribute puts into a replicated step, one mechanism at a time (the strategies
themselves run in tests-integration/distributed/test_tf_distribute.py, which needs logical
devices configured before TensorFlow starts, or several processes).

* Collectives take a fresh instance key at every call through a *call-time capture*
  (``FuncGraph.capture_call_time_value``): the rebuilt function must run the closure at
  each call, in the original's input order, or it waits for the keys as arguments.
* ``ReplicaContext.all_reduce`` is differentiable through ``tf.custom_gradient``: a step
  holding one must not fall back for that reason alone.
* Collective ops stay in TensorFlow, with the reason in the report.
* Keras passes a new dataset iterator every epoch: one trace serves iterators of one type.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import tensorflow as tf
from helpers import assert_same, rand

import disc_tf
from disc_tf import partition


class _Counter:
    """A call-time value: 1, 2, 3, ... one per call of the function that captured it."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> tf.Tensor:
        self.n += 1
        return tf.constant(float(self.n))


def _capture(counter: _Counter) -> tf.Tensor:
    graph = tf.compat.v1.get_default_graph()
    return graph.capture_call_time_value(counter, tf.TensorSpec([], tf.float32))


def _fallback_warnings(record: list[warnings.WarningMessage], name: str) -> list[str]:
    """The DISC fallback warnings about function ``name``."""
    return [str(w.message) for w in record
            if issubclass(w.category, disc_tf.DiscFallbackWarning) and name in str(w.message)]


def test_call_time_capture_is_fed_at_every_call():
    counter = _Counter()
    scale = tf.Variable(1.5)  # a by-value capture before the call-time one

    def keyed_scale(x):
        k = _capture(counter)
        return tf.tanh(x * scale + k) * 3.0 - x

    f = disc_tf.function(keyed_scale)
    before = disc_tf.compile_count()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for call, n in enumerate((4, 1, 0, 7), start=1):
            x = rand([n, 3])
            got = f(x)
            assert counter.n == call  # the closure ran once per call
            assert_same(got, tf.tanh(x * 1.5 + float(call)) * 3.0 - x)
    assert not _fallback_warnings(record, "keyed_scale")
    assert f.uses_disc()
    assert disc_tf.compile_count() - before <= 1
    # the rebuilt function captures what the original does, the closure last
    entry = list(f._entries.values())[-1]
    assert entry.rebuilt._captured_inputs == entry.original._captured_inputs
    assert entry.rebuilt.graph.deferred_external_captures == [
        entry.original.graph.deferred_external_captures[0]]


def test_call_time_capture_under_a_gradient_tape():
    counter = _Counter()

    def fn(x):
        return tf.sin(x * _capture(counter)) * 2.0 + x * x

    f = disc_tf.function(fn)
    x = rand([5, 2])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    g = tape.gradient(y, x)
    k = float(counter.n)
    assert_same(y, tf.sin(x * k) * 2.0 + x * x)
    assert_same(g, tf.cos(x * k) * 2.0 * k + 2.0 * x)
    assert f.uses_disc()


def test_custom_gradient_with_call_time_capture_keeps_disc():
    """All-reduce's shape in a replicated step: an identity with a custom gradient (as
    ``ReplicaContext.all_reduce`` defines one) next to a call-time captured key. It used to
    fall back whole ("rebuilt form captures other inputs")."""
    counter = _Counter()

    @tf.custom_gradient
    def reduce_like(t):
        return tf.identity(t), lambda dy: dy * 2.0

    def keyed_reduce(x):
        k = _capture(counter)
        y = tf.exp(x * 0.5) + k
        return tf.nn.relu(reduce_like(y) * 3.0 - 1.0) + y

    f = disc_tf.function(keyed_reduce)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for n in (3, 6):
            x = rand([n, 4])
            got = f(x)
            y = tf.exp(x * 0.5) + float(counter.n)
            assert_same(got, tf.nn.relu(y * 3.0 - 1.0) + y)
    assert not _fallback_warnings(record, "keyed_reduce")
    assert f.uses_disc()


def test_collective_ops_stay_in_tensorflow():
    @tf.function
    def step(x):
        y = tf.tanh(x) * 2.0 + 1.0
        s = tf.raw_ops.CollectiveReduceV2(
            input=y, group_size=tf.constant(1), group_key=tf.constant(1),
            instance_key=tf.constant(1), ordering_token=[], merge_op="Add", final_op="Id")
        return tf.exp(s) - s * 0.5

    cf = step.get_concrete_function(tf.TensorSpec([None, 3], tf.float32))
    analysis = partition.analyze(cf.graph, min_cluster_size=2,
                                 outputs=[t.name for t in cf.outputs])
    collective = [op for op in analysis.order if op.type == "CollectiveReduceV2"]
    assert len(collective) == 1
    verdict = analysis.verdicts[collective[0]]
    assert not verdict.supported
    assert verdict.code.value == "framework_op"
    assert "collective" in verdict.reason
    clustered = {op.type for op in analysis.clustering.cluster_of}
    assert "CollectiveReduceV2" not in clustered
    assert {"Tanh", "Exp"} <= clustered  # the computation on both sides is compiled


@pytest.mark.parametrize("op_type,expected", [
    ("CollectiveReduceV2", True), ("CollectiveGatherV2", True),
    ("CollectiveBcastSendV2", True), ("NcclAllReduce", True), ("_Send", True),
    ("_Recv", True), ("_HostRecv", True), ("Sum", False), ("Reshape", False),
    ("SendTPUEmbeddingGradients", False)])
def test_communication_op_types(op_type, expected):
    assert partition.is_communication(op_type) is expected


def _graphs(name: str) -> list:
    return [g for g in disc_tf.report().graphs if g.name == name]


def test_dataset_iterators_of_one_type_share_a_trace():
    """One trace, analysis and rebuild for every iterator of one element type (TF's own
    trace cache already returned the same concrete function; keyed by identity, DISC
    analyzed and rebuilt it again for each new iterator)."""

    def iterator_step(iterator):
        x, y = next(iterator)
        return tf.reduce_sum(tf.square(x * 2.0 - y), axis=1) + 1.0

    f = disc_tf.function(iterator_step)
    assert not _graphs("iterator_step")
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((12, 3)).astype(np.float32)
    ys = rng.standard_normal((12, 3)).astype(np.float32)
    ds = tf.data.Dataset.from_tensor_slices((xs, ys)).batch(5)  # batches of 5, 5, 2
    for _epoch in range(3):  # a new iterator each epoch, as Keras's fit makes one
        it = iter(ds)
        for start in (0, 5, 10):
            got = f(it)
            x, y = xs[start:start + 5], ys[start:start + 5]
            assert_same(got, tf.reduce_sum(tf.square(x * 2.0 - y), axis=1) + 1.0)
    graphs = _graphs("iterator_step")
    assert len(graphs) == 1
    assert graphs[0].calls == 9
    assert f.uses_disc()
    # an iterator of another element type is another signature
    other = iter(tf.data.Dataset.from_tensor_slices((xs[:, :2], ys[:, :2])).batch(4))
    assert_same(f(other), tf.reduce_sum(tf.square(xs[:4, :2] * 2.0 - ys[:4, :2]), axis=1)
                + 1.0)
    assert len(_graphs("iterator_step")) == 2


def test_arguments_nothing_reads_survive_the_rebuild():
    """A function argument nothing in the graph reads (an unused tensor, or a dataset
    iterator a distributed step passes but reads elsewhere) is part of the function's
    interface: dropping it as dead code made the rebuild fail ("The name 'iterator:0'
    refers to a Tensor which does not exist") and the step run in TensorFlow."""

    def unused_arguments(x, unused, iterator):
        return tf.nn.relu(x * 2.0 - 1.0) + tf.exp(-x)

    f = disc_tf.function(unused_arguments)
    ds = tf.data.Dataset.from_tensor_slices(np.zeros((4, 2), np.float32)).batch(2)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for n in (3, 1, 0, 6):
            x = rand([n, 4], seed=n)
            got = f(x, rand([2]), iter(ds))
            assert_same(got, tf.nn.relu(x * 2.0 - 1.0) + tf.exp(-x))
    assert not _fallback_warnings(record, "unused_arguments")
    assert f.uses_disc()
