"""disc_paddle.report() returns this process's coverage report of paddle graphs only."""

import disc_paddle
from disc_core import report


def test_report_lists_only_paddle_graphs() -> None:
    collector = report.get_collector()
    for fw, name in (("paddle", "mine"), ("torch", "theirs")):
        collector.add_graph(report.GraphReport(name=name, run=""), framework=fw)
    names = [g.name for g in disc_paddle.report().graphs]
    assert "mine" in names and "theirs" not in names
    assert {r.framework for r in disc_paddle.report().runs} == {"paddle"}
