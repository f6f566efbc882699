"""Turn a clustering result into a :class:`GraphReport`, the same way for every bridge.

Bridges already hold everything a report needs once :func:`disc_core.clustering.
find_clusters` has run: the nodes, each node's op type, each converter's verdict
(``Support``, whose ``code`` is a :class:`ReasonCode` value) and the clusters with their
exclusion reasons. Mapping that onto the report here, once, is what makes "why did this op
fall back" mean the same thing for TensorFlow, PyTorch and Paddle.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TypeVar

from ..clustering import ClusteringResult, ExclusionReason, Support
from .model import ClusterRecord, GraphReport, NodeRecord, ReasonCode, Status

__all__ = ["EXCLUSION_CODES", "graph_report"]

Node = Hashable
T = TypeVar("T")

#: Exclusions decided by the clustering itself (UNSUPPORTED takes the converter's code).
EXCLUSION_CODES = {
    ExclusionReason.NEVER_CLUSTER: ReasonCode.EXCLUDED_BY_USER,
    ExclusionReason.CLUSTER_TOO_SMALL: ReasonCode.CLUSTER_TOO_SMALL,
    ExclusionReason.WOULD_CREATE_CYCLE: ReasonCode.WOULD_CREATE_CYCLE,
}


def _lookup(source: Callable[[Node], T] | Mapping[Node, T], node: Node) -> T:
    return source[node] if isinstance(source, Mapping) else source(node)


def _unsupported_code(node: Node, support: Callable | Mapping | None) -> ReasonCode:
    verdict = _lookup(support, node) if support is not None else None
    code = verdict.code if isinstance(verdict, Support) else None
    if code is None:
        raise ValueError(
            f"node {node} is unsupported but its Support carries no reason code; return "
            "Support(False, reason, code=ReasonCode.<WHY>) from the converter check"
        )
    try:
        return ReasonCode(code)
    except ValueError:
        raise ValueError(f"node {node}: {code!r} is not a ReasonCode value") from None


def graph_report(
    name: str,
    nodes: Sequence[Node],
    clustering: ClusteringResult,
    *,
    op_type: Callable[[Node], str] | Mapping[Node, str],
    support: Callable[[Node], Support] | Mapping[Node, Support] | None = None,
    node_name: Callable[[Node], str] = str,
    flops: Callable[[Node], float | None] | Mapping[Node, float | None] | None = None,
    run: str = "",
) -> GraphReport:
    """The report of one graph right after clustering (every cluster not yet compiled).

    Args:
        name: the graph's name as users know it (FX graph, tf.function, program).
        nodes: every node given to ``find_clusters``; the report keeps this order.
        clustering: ``find_clusters``' result for those nodes.
        op_type: the framework op type of each node (``aten.nonzero``, ``Where``, ...).
        support: the verdicts given to ``find_clusters``; consulted only for UNSUPPORTED
            nodes, whose ``Support.code`` must name a :class:`ReasonCode`.
        node_name: a name unique within the graph (default ``str(node)``).
        flops: optional estimated FLOPs per node (None where unknown).
        run: the :class:`RunInfo` id; :meth:`Collector.add_graph` fills it in.

    Raises:
        ValueError: a node is missing from ``clustering`` or an unsupported node has no
            (valid) reason code: bugs in the bridge, better caught at capture time.
    """
    names = {node: node_name(node) for node in nodes}
    records = []
    for node in nodes:
        cluster = clustering.cluster_of.get(node)
        record = NodeRecord(
            name=names[node],
            op=_lookup(op_type, node),
            status=Status.COMPILED if cluster is not None else Status.FALLBACK,
            cluster=cluster,
            flops=_lookup(flops, node) if flops is not None else None,
        )
        if cluster is None:
            exclusion = clustering.excluded.get(node)
            if exclusion is None:
                raise ValueError(f"node {node} is neither clustered nor excluded")
            record.detail = exclusion.detail
            record.reason = (
                _unsupported_code(node, support)
                if exclusion.reason is ExclusionReason.UNSUPPORTED
                else EXCLUSION_CODES[exclusion.reason]
            )
        records.append(record)
    clusters = [ClusterRecord(id=c.id, nodes=[names[n] for n in c.nodes])
                for c in clustering.clusters]
    graph = GraphReport(name=name, run=run, nodes=records, clusters=clusters)
    graph.validate(f"graph {name!r}")
    return graph
