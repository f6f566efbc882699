"""disc_torch.report() returns this process's coverage report of torch graphs only."""

import disc_torch
from disc_core import report


def test_report_lists_only_torch_graphs() -> None:
    collector = report.get_collector()
    for fw, name in (("torch", "mine"), ("tensorflow", "theirs")):
        collector.add_graph(report.GraphReport(name=name, run=""), framework=fw)
    names = [g.name for g in disc_torch.report().graphs]
    assert "mine" in names and "theirs" not in names
    assert {r.framework for r in disc_torch.report().runs} == {"torch"}
