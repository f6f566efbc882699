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
