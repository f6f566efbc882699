"""From disc_core.clustering's result to a GraphReport: the one way every bridge fills reports."""

from __future__ import annotations

import pytest

from disc_core.clustering import Support, find_clusters
from disc_core.report import Collector, ReasonCode, Report, Status, graph_report

YES = Support.yes()


def no(code: ReasonCode | str | None, why: str = "converter says no") -> Support:
    return Support(False, why, code=code)


def node_map(report_graph):
    return {n.name: n for n in report_graph.nodes}


def test_every_exclusion_reason_maps_to_its_code():
    # x -> a -> b -> c -> d;  a -> d;  u: unsupported, k: never_cluster, s: lone supported
    #   a, b, d supported; c unsupported (data-dependent): {a, b} and {d} cannot merge
    #   because a -> c -> d would make a cycle; {d} alone is then dropped.
    nodes = ["x", "a", "b", "c", "d", "k", "s"]
    edges = [("x", "a"), ("a", "b"), ("b", "c"), ("c", "d"), ("a", "d"), ("d", "k"),
             ("k", "s")]
    support = {
        "x": no(ReasonCode.DYNAMIC_RANK, "rank of x unknown"),
        "a": YES, "b": YES, "d": YES, "s": YES,
        "c": no(ReasonCode.DATA_DEPENDENT_SHAPE, "nonzero: output size depends on values"),
        "k": YES,
    }
    ops = {"x": "aten.view", "a": "aten.add", "b": "aten.mul", "c": "aten.nonzero",
           "d": "aten.exp", "k": "aten.print", "s": "aten.neg"}
    clustering = find_clusters(nodes, edges, support, never_cluster=["k"])
    graph = graph_report("forward", nodes, clustering, op_type=ops, support=support,
                         flops={n: 2.0 for n in nodes})
    by = node_map(graph)
    assert [n.name for n in graph.nodes] == nodes  # input order kept
    assert by["a"].status is by["b"].status is Status.COMPILED
    assert by["a"].cluster == by["b"].cluster == 0
    assert [(c.id, c.nodes) for c in graph.clusters] == [(0, ["a", "b"])]
    expected = {
        "x": ReasonCode.DYNAMIC_RANK,
        "c": ReasonCode.DATA_DEPENDENT_SHAPE,
        "d": ReasonCode.WOULD_CREATE_CYCLE,
        "k": ReasonCode.EXCLUDED_BY_USER,
        "s": ReasonCode.CLUSTER_TOO_SMALL,
    }
    assert {n: by[n].reason for n in expected} == expected
    assert by["c"].detail == "nonzero: output size depends on values"
    assert "cycle" in by["d"].detail and "min_cluster_size" in by["s"].detail
    assert by["c"].op == "aten.nonzero" and by["c"].flops == 2.0
    assert graph.run == ""  # the collector assigns it


def test_callables_and_names():
    nodes = [1, 2, 3]
    clustering = find_clusters(nodes, [(1, 2), (2, 3)], lambda n: YES if n < 3 else
                               no("unsupported_dtype"))
    graph = graph_report("g", nodes, clustering, op_type=lambda n: f"op{n}",
                         support=lambda n: YES if n < 3 else no("unsupported_dtype"),
                         node_name=lambda n: f"%{n}")
    assert [n.name for n in graph.nodes] == ["%1", "%2", "%3"]
    assert graph.clusters[0].nodes == ["%1", "%2"]
    assert graph.nodes[2].reason is ReasonCode.UNSUPPORTED_DTYPE
    assert graph.nodes[2].flops is None


@pytest.mark.parametrize(
    ("verdict", "support_given", "message"),
    [
        (Support(False, "no code"), True, "node n1 is unsupported but its Support carries no "
         "reason code"),
        (Support(False, "no code"), False, "carries no reason code"),
        (Support(False, "bad code", code="nope"), True, "node n1: 'nope' is not a ReasonCode"),
    ],
)
def test_unsupported_nodes_need_a_valid_code(verdict, support_given, message):
    support = {"n0": YES, "n1": verdict}
    clustering = find_clusters(["n0", "n1"], [("n0", "n1")], support, min_cluster_size=1)
    with pytest.raises(ValueError, match=message):
        graph_report("g", ["n0", "n1"], clustering, op_type=str,
                     support=support if support_given else None)


def test_duplicate_node_names_are_a_bridge_bug():
    clustering = find_clusters([1, 2], [], {1: YES, 2: YES}, min_cluster_size=1)
    with pytest.raises(ValueError, match="duplicate node name 'same'"):
        graph_report("g", [1, 2], clustering, op_type=str, node_name=lambda n: "same")


def test_support_code_field_does_not_change_clustering():
    nodes = list(range(6))
    edges = [(i, i + 1) for i in range(5)]
    plain = {i: YES if i != 3 else Support.no("x") for i in nodes}
    coded = {i: YES if i != 3 else no(ReasonCode.NO_CONVERTER, "x") for i in nodes}
    a, b = find_clusters(nodes, edges, plain), find_clusters(nodes, edges, coded)
    assert a.clusters == b.clusters and a.excluded == b.excluded
    assert Support.no("x").code is None and Support.yes().code is None


def test_from_clustering_through_the_collector_to_json():
    nodes = ["a", "b", "c", "d"]
    support = {"a": YES, "b": YES, "c": no(ReasonCode.UNSUPPORTED_ATTRIBUTE), "d": YES}
    clustering = find_clusters(nodes, [("a", "b"), ("b", "c"), ("c", "d")], support,
                               min_cluster_size=1)
    graph = graph_report("g", nodes, clustering, op_type=str.upper, support=support)
    collector = Collector()
    rec = collector.add_graph(graph, framework="torch", framework_version="2.13.0")
    rec.cluster_compiled(0, seconds=0.5, kernels=2, fusions=1, engine="native")
    rec.cluster_compiled(1, seconds=0.25, engine="native")
    rec.cluster_failed(1, ReasonCode.COMPILE_ERROR, "codegen failed")
    rec.cluster_call(0, 0.001)
    rec.graph_call(fallback_seconds=0.002)
    report = collector.report()
    assert Report.from_json(report.to_json()) == report
    s = report.summary()
    assert (s.ops, s.compiled, s.clusters, s.failed_clusters, s.kernels) == (4, 2, 1, 1, 2)
    assert report.graphs[0].nodes[3].reason is ReasonCode.COMPILE_ERROR
    assert [c.engine.value for c in report.graphs[0].clusters] == ["native", "framework"]
    assert report.graphs[0].nodes[3].detail == "codegen failed"
    assert report.runs[0].framework == "torch" and graph.run == report.runs[0].id
