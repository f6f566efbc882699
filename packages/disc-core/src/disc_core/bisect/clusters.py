"""The clusters a run's coverage report lists, by compile-cache key: the suspects of a
bisection and what to tell the user about the culprit (where it is, which ops it holds).

One key can stand for several clusters: the same ops in two graphs (a forward traced twice,
two identical blocks) lower to the same core graph, compile to one artifact and are
allowed or excluded together, so a key is the unit the search works on.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..report import Report

__all__ = ["ClusterInfo", "Site", "clusters_by_key"]

#: clusters with at most this many ops list them in order; larger ones by type and count
LIST_OPS = 8


@dataclass
class Site:
    """One cluster of one graph of the report."""

    framework: str | None
    graph: str
    cluster: int
    ops: list[str]

    def describe(self) -> str:
        """One line; a large cluster's ops as types with counts, most frequent first."""
        if len(self.ops) <= LIST_OPS:
            ops = ", ".join(self.ops)
        else:
            ops = ", ".join(f"{op} x{n}" for op, n in Counter(self.ops).most_common())
        return (f"graph {self.graph!r} ({self.framework or 'no framework'}), cluster "
                f"{self.cluster}: {len(self.ops)} ops: {ops}")


@dataclass
class ClusterInfo:
    """Every cluster built from one compile-cache key."""

    key: str
    sites: list[Site] = field(default_factory=list)


def clusters_by_key(report: Report) -> dict[str, ClusterInfo]:
    """The keyed clusters of ``report``, in report order (graphs, then cluster ids)."""
    runs = {run.id: run.framework for run in report.runs}
    out: dict[str, ClusterInfo] = {}
    for graph in report.graphs:
        ops = {node.name: node.op for node in graph.nodes}
        for cluster in graph.clusters:
            if cluster.key is None:
                continue
            info = out.setdefault(cluster.key, ClusterInfo(cluster.key))
            info.sites.append(Site(runs.get(graph.run), graph.name, cluster.id,
                                   [ops.get(n, "?") for n in cluster.nodes]))
    return out
