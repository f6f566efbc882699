"""disc_tf.report() returns this process's coverage report of tensorflow graphs only."""

import disc_tf
from disc_core import report


def test_report_lists_only_tf_graphs() -> None:
    collector = report.get_collector()
    for fw, name in (("tensorflow", "mine"), ("torch", "theirs")):
        collector.add_graph(report.GraphReport(name=name, run=""), framework=fw)
    names = [g.name for g in disc_tf.report().graphs]
    assert "mine" in names and "theirs" not in names
    assert {r.framework for r in disc_tf.report().runs} == {"tensorflow"}


def _clusters_of(f) -> list[report.ClusterRecord]:
    return f.coverage().clusters


def test_each_cluster_names_its_engine_and_only_native_counts() -> None:
    import warnings

    import tensorflow as tf
    from helpers import assert_same, rand

    def fn(x):
        return tf.tanh(x * 2.0 + 1.0) - x

    native = disc_tf.function(fn)
    assert_same(native(rand([3, 4])), fn(rand([3, 4])))
    assert [c.engine for c in _clusters_of(native)] == [report.Engine.NATIVE]
    assert native.coverage().summary().compiled == len(native.coverage().nodes) == 5

    from disc_core.bridge import fallback

    fallback._warned.clear()  # warn_once's memory: this test counts the warnings itself
    interpreted = disc_tf.function(fn, target="reference")
    other = disc_tf.function(lambda x: tf.exp(x) * x + 1.0, target="reference")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (3, 5):
            assert_same(interpreted(rand([n, 4])), fn(rand([n, 4])))
            other(rand([n, 4]))
    assert [c.engine for c in _clusters_of(interpreted)] == [report.Engine.REFERENCE]
    summary = interpreted.coverage().summary()
    assert (summary.compiled, summary.interpreted) == (0, 5)
    said = [str(w.message) for w in caught if "reference interpreter" in str(w.message)]
    assert len(said) == 1, said  # once per process, for every cluster of every function
    assert "not counted" not in said[0] and "does not count them as compiled" in said[0]


def test_variable_ops_are_framework_ops_not_missing_converters() -> None:
    """Reads and writes of variables stay in TensorFlow by design: the report gives them
    ``framework_op`` (schema version 2), keeping ``no_converter`` for ops DISC could
    compile but has no converter for (here Cumsum)."""
    import numpy as np
    import tensorflow as tf

    v = tf.Variable(np.linspace(-1.0, 1.0, 5).astype("float32"))
    steps = tf.Variable(0, dtype=tf.int64)

    def fn(x):
        y = tf.nn.relu(x * v) + 1.0
        v.assign_sub(tf.reduce_mean(y, 0) * 0.1)
        v.assign_add(tf.reduce_max(y, 0) * 0.01)
        steps.assign_add(1)
        z = tf.math.cumsum(y * v, axis=1)
        v.assign(tf.tanh(v))
        return tf.exp(z) * 0.5

    f = disc_tf.function(fn)
    for n in (4, 1, 3):
        f(tf.ones([n, 5]))
    codes = {(n.op, n.reason.value if n.reason else None) for n in f.coverage().nodes
             if n.status.value == "fallback"}
    variable_ops = {"ReadVariableOp", "AssignVariableOp", "AssignAddVariableOp",
                    "AssignSubVariableOp"}
    assert {op for op, _ in codes} >= variable_ops | {"Cumsum"}, codes
    for op, code in codes:
        if op in variable_ops:
            assert code == "framework_op", (op, code)
    assert ("Cumsum", "no_converter") in codes
    # the Identity returning the result after the assignments (control dependencies) is
    # TF's ordering point, kept in TensorFlow by design too (partition._ordering_point)
    assert not any(code == "framework_op" for op, code in codes
                   if op not in variable_ops | {"Identity"})
    assert f.uses_disc()
    data = report.Report(runs=disc_tf.report().runs,
                         graphs=[f.coverage()]).to_dict()
    assert data["schema_version"] == report.SCHEMA_VERSION == 2
    assert report.Report.from_dict(data).graphs[0] == f.coverage()
