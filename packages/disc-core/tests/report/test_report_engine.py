"""Which engine ran each cluster: only native code counts as compiled, everywhere."""

from __future__ import annotations

import json

import pytest
import report_samples as samples

from disc_core.report import (
    Engine,
    ReasonCode,
    Report,
    ReportFormatError,
    render_html,
    render_markdown,
    render_text,
    summary_line,
)


def mixed() -> Report:
    """The issue example with cluster 1 (38 aten.mm) on the reference interpreter and
    cluster 2 (40 aten.relu) failed for an accuracy mismatch."""
    report = samples.issue_example()
    graph = report.graphs[0]
    for node in graph.nodes:
        node.flops = None
    graph.clusters[1].engine = Engine.REFERENCE
    graph.mark_cluster_failed(2, ReasonCode.ACCURACY_MISMATCH, "max abs error 0.5 > 1e-5")
    return report


def test_only_native_clusters_count_as_compiled():
    s = mixed().summary()
    assert (s.ops, s.compiled, s.interpreted, s.unbuilt, s.fallback) == (142, 60, 38, 0, 44)
    assert s.engines == {Engine.NATIVE: 1, Engine.REFERENCE: 1}
    assert (s.clusters, s.failed_clusters) == (2, 1)
    mm = next(o for o in s.op_types if o.op == "aten.mm")
    assert (mm.compiled, mm.interpreted, mm.fallback) == (0, 38, 0)
    assert s.reasons[ReasonCode.ACCURACY_MISMATCH] == 40


def test_failing_a_cluster_hands_it_to_the_framework():
    graph = mixed().graphs[0]
    assert graph.clusters[2].engine is Engine.FRAMEWORK
    assert {n.reason for n in graph.nodes if n.cluster == 2} == {ReasonCode.ACCURACY_MISMATCH}


def test_every_rendering_shows_the_engine_split():
    report = mixed()
    line = summary_line(report.summary(), top=1)
    assert line.startswith("142 ops, 60 compiled (42.3%), 38 interpreted, 2 clusters (+1 failed)")
    text = render_text(report)
    assert "engines: 1 native, 1 on the reference interpreter, 1 failed (run by the framework)" \
        in text
    assert "forward [torch]: 142 ops, 60 compiled (42.3%), 38 interpreted, 2 clusters" in text
    md = render_markdown(report)
    assert "| forward | 1 | reference interpreter | 38 |" in md
    assert "| forward | 2 | framework | 40 |" in md
    page = render_html(report)
    assert "Engines: 1 native, 1 on the reference interpreter, 1 failed" in page
    assert "<td>reference interpreter</td>" in page and "interpreted ops" in page


def test_all_native_reads_as_before():
    line = summary_line(samples.issue_example().summary(), top=1)
    assert line.startswith("142 ops, 138 compiled (97.2%; 99.7% of FLOPs), 3 clusters, 9 kernels")
    assert "engines: 3 native\n" in render_text(samples.issue_example())


def test_engine_round_trips_and_is_checked_against_the_nodes():
    report = mixed()
    assert Report.from_json(report.to_json()) == report
    data = report.to_dict()
    assert [c["engine"] for c in data["graphs"][0]["clusters"]] == [
        "native", "reference", "framework"]
    data["graphs"][0]["clusters"][0]["engine"] = "framework"
    with pytest.raises(ReportFormatError, match=r"clusters\[0\]\.engine: 'framework' but its "
                                                "nodes are compiled"):
        Report.from_dict(data)
    data["graphs"][0]["clusters"][0]["engine"] = "gpu"
    with pytest.raises(ReportFormatError, match="expected one of 'native', 'reference', "
                                                "'framework', got 'gpu'"):
        Report.from_dict(data)
    data["graphs"][0]["clusters"][0]["engine"] = "native"
    data["graphs"][0]["clusters"][2]["engine"] = "native"
    with pytest.raises(ReportFormatError, match="'native' but its nodes fell back"):
        Report.from_dict(data)


def test_a_version_1_file_reads_with_its_clusters_unbuilt_never_compiled():
    data = samples.issue_example().to_dict()
    data["schema_version"] = 1
    for cluster in data["graphs"][0]["clusters"]:
        del cluster["engine"]
    old = Report.from_json(json.dumps(data))
    s = old.summary()
    assert (s.compiled, s.unbuilt, s.fallback) == (0, 138, 4)
    assert "3 not built" in render_text(old)
    assert json.loads(old.to_json())["schema_version"] == 1  # nothing in it needs 2


def test_an_interpreted_cluster_makes_the_file_version_2():
    """A version-1 reader ignores engines, so it would count an interpreted cluster as
    compiled: such a file declares version 2 (one without declares 1)."""
    assert samples.issue_example().to_dict()["schema_version"] == 1
    report = samples.issue_example()
    report.graphs[0].clusters[1].engine = Engine.REFERENCE
    assert report.to_dict()["schema_version"] == 2
