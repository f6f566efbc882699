"""The suspects of a bisection, read from a run's coverage report by compile-cache key."""

from __future__ import annotations

from disc_core.bisect.clusters import Site, clusters_by_key
from disc_core.clustering import Cluster, ClusteringResult
from disc_core.report import Collector, graph_report


def _graph(collector: Collector, name: str, clusters: list[list[str]], framework: str):
    nodes = [n for c in clusters for n in c]
    clustering = ClusteringResult()
    for cid, members in enumerate(clusters):
        clustering.clusters.append(Cluster(cid, tuple(members)))
        for n in members:
            clustering.cluster_of[n] = cid
    return collector.add_graph(graph_report(name, nodes, clustering,
                                            op_type=lambda n: "op." + n.split(".")[-1]),
                               framework=framework)


def test_keyed_clusters_by_key_with_every_place_they_occur():
    collector = Collector()
    fwd = _graph(collector, "forward", [["f.mul", "f.exp"], ["f.tanh"]], "torch")
    bwd = _graph(collector, "backward", [["b.mul", "b.exp"]], "torch")
    fwd.cluster_key(0, "k-shared")
    bwd.cluster_key(0, "k-shared")  # the same core graph in two graphs: one artifact
    # forward cluster 1 was never built: no key, not a suspect
    found = clusters_by_key(collector.report())
    assert list(found) == ["k-shared"]
    assert [(s.graph, s.cluster, s.ops, s.framework) for s in found["k-shared"].sites] == [
        ("forward", 0, ["op.mul", "op.exp"], "torch"),
        ("backward", 0, ["op.mul", "op.exp"], "torch")]


def test_a_culprit_site_lists_small_clusters_in_order_and_counts_large_ones():
    small = Site("torch", "forward_0", 2, ["aten.mul", "aten.tanh"])
    assert small.describe() == "graph 'forward_0' (torch), cluster 2: 2 ops: aten.mul, aten.tanh"
    large = Site(None, "g", 0, ["mul"] * 6 + ["add"] * 3 + ["exp"])
    assert large.describe() == "graph 'g' (no framework), cluster 0: 10 ops: mul x6, add x3, exp x1"
