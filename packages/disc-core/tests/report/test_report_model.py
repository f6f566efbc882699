"""The report schema: JSON round trip, validation errors that name the field, summary, merge."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import report_samples as samples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disc_core.report import (
    SCHEMA_VERSION,
    ClusterRecord,
    Engine,
    GraphReport,
    NodeRecord,
    ReasonCode,
    Report,
    ReportFormatError,
    RunInfo,
    SchemaVersionError,
    Status,
    render_html,
    render_markdown,
)
from disc_core.report.render_text import render_text, summary_line
from disc_core.report.summary import format_pct, plural

DOCS = Path(__file__).resolve().parents[4] / "docs" / "report-schema.md"

# ------------------------------------------------------------------ round trip


def test_a_cluster_the_selection_leaves_out_is_excluded_by_user_and_keeps_its_key():
    """DISC_BISECT_CLUSTERS: a built cluster (its key known) that runs in the framework."""
    report = samples.tf_report()
    graph = report.graphs[0]
    graph.clusters[1].key = "ab" * 32
    graph.mark_cluster_failed(1, ReasonCode.EXCLUDED_BY_USER, "not listed")
    report.validate()
    back = Report.from_json(report.to_json())
    assert back == report and back.graphs[0].clusters[1].key == "ab" * 32
    assert back.graphs[0].clusters[0].key is None and "key" not in \
        report.to_dict()["graphs"][0]["clusters"][0]
    members = set(graph.clusters[1].nodes)
    assert {(n.status, n.reason) for n in graph.nodes if n.name in members} == {
        (Status.FALLBACK, ReasonCode.EXCLUDED_BY_USER)}
    assert graph.clusters[1].engine is Engine.FRAMEWORK
    s = report.summary()
    assert s.reasons[ReasonCode.EXCLUDED_BY_USER] >= len(members)
    assert (s.failed_clusters, s.excluded_clusters) == (0, 1)  # left out, not failed
    text = render_text(report)
    assert "(+1 left out)" in text and "1 left out by the user (run by the framework)" in text
    assert f"| `{'ab' * 6}` |" in render_markdown(report)  # a usable prefix of the key
    assert f'<td title="{"ab" * 32}"><code>{"ab" * 6}</code></td>' in render_html(report)


@pytest.mark.parametrize(
    "make",
    [samples.issue_example, samples.torch_report, samples.tf_report, samples.all_fallback,
     samples.empty_graph, samples.hostile, Report],
)
def test_samples_round_trip_through_json(make):
    report = make()
    text = report.to_json()
    assert Report.from_json(text) == report
    assert Report.from_json(text.encode()) == report  # bytes, as read from a file
    assert json.loads(text)["schema"] == "disc-report"
    # no reason code newer than version 1: the file stays readable by version-1 readers
    assert json.loads(text)["schema_version"] == 1


def test_writers_omit_absent_optional_fields():
    node = NodeRecord("n0", "aten.add", Status.COMPILED, cluster=0)
    assert node.to_dict() == {"name": "n0", "op": "aten.add", "status": "compiled", "cluster": 0}
    cluster = ClusterRecord(id=0, nodes=["n0"]).to_dict()
    assert cluster == {"id": 0, "nodes": ["n0"], "cache_hits": 0, "cache_misses": 0, "calls": 0}


def test_readers_ignore_unknown_fields_and_accept_null_optionals():
    data = samples.torch_report().to_dict()
    data["future_field"] = {"x": 1}
    data["graphs"][0]["nodes"][0]["future"] = True
    data["graphs"][0]["nodes"][0]["detail"] = None
    assert Report.from_dict(data) == samples.torch_report()


_text = st.text(max_size=12)
_seconds = st.none() | st.floats(0, 1e9, allow_nan=False, allow_infinity=False)
_counts = st.integers(0, 2**53)


@st.composite
def reports(draw) -> Report:
    """Valid reports of every shape: clusters compiled or failed, any strings and numbers."""
    runs = [
        RunInfo(
            id=f"run{i}-{draw(_text)}", framework=draw(st.none() | _text),
            framework_version=draw(st.none() | _text),
            disc_versions=draw(st.dictionaries(_text, _text, max_size=3)), device=draw(_text),
            started_at=draw(_text), python=draw(st.none() | _text),
            host=draw(st.none() | _text), pid=draw(st.none() | _counts),
        )
        for i in range(draw(st.integers(0, 3)))
    ]
    graphs = []
    for _ in range(draw(st.integers(0, 3)) if runs else 0):
        n_clusters = draw(st.integers(0, 3))
        failed = {c: draw(st.sampled_from([None, ReasonCode.COMPILE_ERROR,
                                           ReasonCode.RUNTIME_ERROR,
                                           ReasonCode.ACCURACY_MISMATCH]))
                  for c in range(n_clusters)}
        engines = {c: Engine.FRAMEWORK if failed[c] else draw(
            st.sampled_from([None, Engine.NATIVE, Engine.REFERENCE])) for c in range(n_clusters)}
        nodes, members = [], {c: [] for c in range(n_clusters)}
        for i in range(draw(st.integers(0, 10))):
            name = f"{i}:{draw(_text)}"
            flops = draw(st.none() | st.floats(0, 1e15, allow_nan=False))
            cluster = draw(st.none() | st.integers(0, n_clusters - 1)) if n_clusters else None
            if cluster is None:
                reason = draw(st.sampled_from(sorted(ReasonCode, key=lambda r: r.value)))
                nodes.append(NodeRecord(name, draw(_text), Status.FALLBACK, reason=reason,
                                        detail=draw(st.none() | _text), flops=flops))
                continue
            members[cluster].append(name)
            why = failed[cluster]
            nodes.append(NodeRecord(
                name, draw(_text), Status.FALLBACK if why else Status.COMPILED, reason=why,
                detail=draw(_text) if why else None, cluster=cluster, flops=flops))
        clusters = [
            ClusterRecord(
                id=c, nodes=members[c], fusions=draw(st.none() | _counts),
                kernels=draw(st.none() | _counts),
                library_calls=draw(st.none() | _counts), compile_seconds=draw(_seconds),
                cache_hits=draw(_counts), cache_misses=draw(_counts), calls=draw(_counts),
                seconds=draw(_seconds), engine=engines[c],
            )
            for c in range(n_clusters)
        ]
        graphs.append(GraphReport(
            name=draw(_text), run=draw(st.sampled_from(runs)).id, nodes=nodes,
            clusters=clusters, calls=draw(_counts), fallback_seconds=draw(_seconds)))
    return Report(runs=runs, graphs=graphs)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reports())
def test_generated_reports_round_trip(report):
    report.validate()
    assert Report.from_json(report.to_json()) == report
    assert Report.from_json(report.to_json(indent=None)) == report
    summary = report.summary()  # every valid report can be summarized
    assert summary.ops == sum(len(g.nodes) for g in report.graphs)
    assert (summary.compiled + summary.interpreted + summary.unbuilt + summary.fallback
            == summary.ops)
    native = {(id(g), c.id) for g in report.graphs for c in g.clusters
              if c.engine is Engine.NATIVE}
    assert summary.compiled == sum(  # only native code counts as compiled
        n.status is Status.COMPILED and (id(g), n.cluster) in native
        for g in report.graphs for n in g.nodes)


# ------------------------------------------------------------------ validation


def _mutated(mutate) -> dict:
    data = samples.torch_report().to_dict()
    mutate(data)
    return data


def _node(data, i):
    return data["graphs"][0]["nodes"][i]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: _node(d, 1).update(status="maybe"),
         "graphs[0].nodes[1].status: expected one of 'compiled', 'fallback', got 'maybe'"),
        (lambda d: _node(d, 5).update(reason="bogus"),
         "graphs[0].nodes[5].reason: expected one of 'no_converter', "),
        (lambda d: d["runs"][0].pop("device"), "runs[0].device: required field is missing"),
        (lambda d: _node(d, 0).update(cluster=-1),
         "graphs[0].nodes[0].cluster: expected an integer >= 0, got -1"),
        (lambda d: _node(d, 0).update(cluster=True),
         "graphs[0].nodes[0].cluster: expected an integer, got a boolean"),
        (lambda d: d["graphs"][0]["clusters"][0].update(seconds="fast"),
         "graphs[0].clusters[0].seconds: expected a number, got a string"),
        (lambda d: d["graphs"][0]["clusters"][0].update(nodes="n0"),
         "graphs[0].clusters[0].nodes: expected an array, got a string"),
        (lambda d: d["graphs"][0].update(nodes={}),
         "graphs[0].nodes: expected an array, got an object"),
        (lambda d: d["graphs"][0].update(nodes=[3]),
         "graphs[0].nodes[0]: expected an object, got a number"),
        (lambda d: d["runs"][0].update(disc_versions={"disc-core": 1}),
         "runs[0].disc_versions.disc-core: expected a string, got a number"),
        (lambda d: _node(d, 5).pop("reason"),
         "graphs[0].nodes[5].reason: a fallback node needs a reason code"),
        (lambda d: _node(d, 0).pop("cluster"),
         "graphs[0].nodes[0].cluster: a compiled node needs its cluster"),
        (lambda d: _node(d, 0).update(reason="no_converter"),
         "graphs[0].nodes[0].reason: a compiled node has no reason"),
        (lambda d: _node(d, 1).update(name="n0"),
         "graphs[0].nodes[1].name: duplicate node name 'n0'"),
        (lambda d: d["graphs"][0]["clusters"][0]["nodes"].append("ghost"),
         "graphs[0].clusters[0].nodes: unknown node 'ghost'"),
        (lambda d: d["graphs"][0]["clusters"][0]["nodes"].pop(),
         "graphs[0].nodes[4].cluster: cluster 0 does not list node 'n4'"),
        (lambda d: _node(d, 5).update(cluster=0),
         "graphs[0].nodes[5].reason: a clustered node falls back only with compile_error"),
        (lambda d: d["graphs"][0].update(run="elsewhere"),
         "graphs[0].run: no run has id 'elsewhere'"),
        (lambda d: d["runs"].append(dict(d["runs"][0])), "runs[1].id: duplicate run id 'r-torch'"),
        (lambda d: d["graphs"][0].update(fallback_seconds=float("inf")),
         "graphs[0].fallback_seconds: expected a finite number >= 0, got inf"),
        (lambda d: d.update(graphs="x"), "graphs: expected an array, got a string"),
        (lambda d: d.pop("runs"), "runs: required field is missing"),
    ],
)
def test_validation_errors_name_the_field(mutate, message):
    with pytest.raises(ReportFormatError) as info:
        Report.from_dict(_mutated(mutate))
    assert str(info.value).startswith(message), str(info.value)


def test_mixed_cluster_is_rejected():
    report = samples.torch_report()
    report.graphs[0].nodes[0].status = Status.FALLBACK
    report.graphs[0].nodes[0].reason = ReasonCode.COMPILE_ERROR
    with pytest.raises(ReportFormatError, match=r"clusters\[0\].nodes: mixes compiled"):
        report.validate()


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        ("{", ReportFormatError, "not valid JSON: "),
        ("[]", ReportFormatError, 'not a DISC report (no "schema": "disc-report" field)'),
        ('{"schema": "other"}', ReportFormatError, "not a DISC report"),
        ('{"schema": "disc-report"}', ReportFormatError, "schema_version: expected an integer"),
        ('{"schema": "disc-report", "schema_version": "1"}', ReportFormatError,
         "schema_version: expected an integer"),
        ('{"schema": "disc-report", "schema_version": 3, "runs": [], "graphs": []}',
         SchemaVersionError,
         "schema_version 3 is newer than this disc-core reads (2); upgrade disc-core"),
        ('{"schema": "disc-report", "schema_version": 0}', SchemaVersionError,
         "schema_version 0 is not supported (this disc-core reads 1 to 2)"),
    ],
)
def test_wrong_files_are_refused_in_one_clear_sentence(text, error, message):
    with pytest.raises(error) as info:
        Report.from_json(text)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------ reason codes and docs


def test_reason_codes_are_the_closed_list_of_the_issue():
    assert [r.value for r in ReasonCode] == [
        "no_converter", "unsupported_dtype", "unsupported_attribute", "dynamic_rank",
        "data_dependent_shape", "would_create_cycle", "cluster_too_small", "excluded_by_user",
        "compile_error", "runtime_error", "accuracy_mismatch", "framework_op",
    ]
    assert ReasonCode.DATA_DEPENDENT_SHAPE.label == "data-dependent shape"
    assert all(r.label for r in ReasonCode)


def test_framework_op_files_declare_version_2_and_older_files_still_read():
    """``framework_op`` (schema version 2) is the only change since version 1: a report
    using it declares version 2, one without it stays version 1 (older readers read it),
    and version-1 files read as before."""
    report = samples.issue_example()
    assert report.to_dict()["schema_version"] == 1
    v1 = report.to_dict()
    assert Report.from_dict(v1) == report
    node = next(n for n in report.graphs[0].nodes if n.status is Status.FALLBACK)
    node.reason = ReasonCode.FRAMEWORK_OP
    data = report.to_dict()
    assert data["schema_version"] == SCHEMA_VERSION == 2
    back = Report.from_dict(data)
    assert back == report
    assert any(n.reason is ReasonCode.FRAMEWORK_OP for n in back.graphs[0].nodes)
    assert ReasonCode.FRAMEWORK_OP.label == "framework op by design"


def test_schema_doc_documents_every_field_and_reason():
    text = DOCS.read_text()
    for code in ReasonCode:
        assert f"| `{code.value}` | {code.label} |" in text, code
    fields = set(samples.issue_example().to_dict())
    data = samples.issue_example().to_dict()
    fields |= set(data["runs"][0]) | set(data["graphs"][0]) | set(data["graphs"][0]["clusters"][0])
    fields |= {"name", "op", "status", "reason", "detail", "cluster", "flops"}
    for name in fields:
        assert f"`{name}`" in text, f"docs/report-schema.md does not document `{name}`"
    assert f"schema_version` | integer | `{SCHEMA_VERSION}`" in text


def test_library_calls_are_an_optional_cluster_field_counted_apart_from_kernels():
    """GEMMs are launched per call like kernels but are not generated code: a cluster says
    how many in ``library_calls`` (optional: files written before it still read, and a
    cluster without GEMMs may omit it); the summary adds them up and says so."""
    report = samples.issue_example()
    old = report.to_dict()
    assert all("library_calls" not in c for g in old["graphs"] for c in g["clusters"])
    assert Report.from_dict(old).graphs[0].clusters[0].library_calls is None
    assert "library call" not in summary_line(report.summary())
    clusters = report.graphs[0].clusters
    clusters[0].library_calls, clusters[1].library_calls = 2, 1
    data = json.loads(json.dumps(report.to_dict()))
    assert [c.get("library_calls") for c in data["graphs"][0]["clusters"]] == [2, 1, None]
    again = Report.from_dict(data)
    assert [c.library_calls for c in again.graphs[0].clusters] == [2, 1, None]
    s = again.summary()
    assert (s.kernels, s.library_calls) == (9, 3)
    assert "3 clusters, 9 kernels, 3 library calls;" in summary_line(s)
    assert "`library_calls`" in DOCS.read_text()
    with pytest.raises(ReportFormatError, match="library_calls"):
        data["graphs"][0]["clusters"][0]["library_calls"] = -1
        Report.from_dict(data)


# ------------------------------------------------------------------ summary


def test_summary_numbers_of_the_issue_example():
    s = samples.issue_example().summary()
    assert (s.runs, s.graphs, s.ops, s.compiled, s.fallback) == (1, 1, 142, 138, 4)
    assert s.compiled_pct == pytest.approx(97.183, abs=1e-3)
    assert (s.clusters, s.failed_clusters, s.kernels, s.fusions) == (3, 0, 9, 9)
    assert [(f.op, f.reason, f.count) for f in s.top_fallbacks] == [
        ("aten.nonzero", ReasonCode.DATA_DEPENDENT_SHAPE, 2),
        ("aten.fft_fft", ReasonCode.NO_CONVERTER, 1),
        ("aten.item", ReasonCode.DATA_DEPENDENT_SHAPE, 1),
    ]
    assert s.reasons == {ReasonCode.DATA_DEPENDENT_SHAPE: 3, ReasonCode.NO_CONVERTER: 1}
    assert (s.flops, s.flops_compiled) == (1384.0, 1380.0)
    assert s.flops_pct == pytest.approx(100 * 1380 / 1384)
    assert (s.cache_hits, s.cache_misses, s.cluster_calls) == (6, 3, 30)
    assert s.compile_seconds == pytest.approx(0.75)
    assert s.cluster_seconds == pytest.approx(1.5)
    assert s.fallback_seconds == pytest.approx(0.125)
    assert s.op_types[0].op == "aten.add" and s.op_types[0].total == 40


def test_unmeasured_numbers_stay_unknown_not_zero():
    s = samples.empty_graph().summary()
    assert (s.ops, s.compiled_pct, s.kernels, s.flops, s.flops_pct) == (0, None, None, None, None)
    assert (s.compile_seconds, s.cluster_seconds, s.fallback_seconds) == (None, None, None)
    s = samples.all_fallback().summary()
    assert (s.compiled, s.compiled_pct, s.clusters, s.flops_compiled) == (0, 0.0, 0, 0.0)


def test_failed_cluster_falls_back_with_its_reason():
    report = samples.tf_report()
    graph = report.graphs[0]
    graph.mark_cluster_failed(1, ReasonCode.COMPILE_ERROR, "MatMul: boom")
    report.validate()
    s = report.summary()
    assert (s.clusters, s.failed_clusters, s.compiled) == (1, 1, 5)
    assert s.reasons[ReasonCode.COMPILE_ERROR] == 2
    assert Report.from_json(report.to_json()) == report
    with pytest.raises(ValueError, match="accuracy_mismatch, compile_error, "
                       "excluded_by_user, runtime_error, not"):
        graph.mark_cluster_failed(0, ReasonCode.NO_CONVERTER, "x")
    with pytest.raises(KeyError, match="no cluster 7"):
        graph.mark_cluster_failed(7, ReasonCode.RUNTIME_ERROR, "x")


@pytest.mark.parametrize(
    ("part", "whole", "text"),
    [(138, 142, "97.2%"), (0, 5, "0.0%"), (5, 5, "100.0%"), (9999, 10000, "99.9%"),
     (1, 100000, "0.1%"), (0, 0, "n/a"), (1, 3, "33.3%")],
)
def test_percentages_never_round_a_partial_share_to_all_or_nothing(part, whole, text):
    assert format_pct(part, whole) == text


def test_plural():
    assert [plural(n, "op") for n in (0, 1, 2)] == ["0 ops", "1 op", "2 ops"]
    assert plural(2, "miss", "misses") == "2 misses"


# ------------------------------------------------------------------ merge


def test_merging_a_torch_and_a_tf_report():
    torch_report, tf_report = samples.torch_report(), samples.tf_report()
    merged = Report.merge([torch_report, tf_report])
    merged.validate()
    assert [r.framework for r in merged.runs] == ["torch", "tensorflow"]
    assert [g.name for g in merged.graphs] == ["forward", "serving_default"]
    s = merged.summary()
    assert (s.runs, s.graphs, s.ops, s.compiled, s.clusters) == (2, 2, 16, 12, 3)
    assert Report.from_json(merged.to_json()) == merged
    merged.graphs[0].calls = 999  # a copy: the inputs do not change
    assert torch_report.graphs[0].calls == 10


def test_merging_the_same_run_twice_is_refused():
    report = samples.torch_report()
    with pytest.raises(ValueError, match="run 'r-torch' appears in more than one report"):
        Report.merge([report, copy.deepcopy(report)])
    assert Report.merge([]) == Report()
