"""Framework-neutral clustering: decide which graph nodes are compiled together.

Every framework bridge (PyTorch FX, TensorFlow GraphDef, Paddle programs) faces the
same problem: given a DAG of framework ops and a per-op "can DISC compile this?"
predicate, carve out maximal groups of supported ops that can each be replaced by a
single compiled call without changing the program's meaning. The one semantic hazard
is cycles: if a cluster contains ``a`` and ``c`` and some unclustered op ``b`` sits on a
path ``a -> b -> c``, the fused call would need ``b``'s output before it can produce
``b``'s input. This module therefore only ever merges two clusters when the contracted
graph stays acyclic.

The algorithm follows XLA's ``MarkForCompilation`` pass and its ``GraphCycles`` helper:
every candidate node starts as its own cluster, and edges between clusters are
contracted greedily until a fixpoint. A dynamic topological order (Pearce & Kelly,
"A dynamic topological sort algorithm for directed acyclic graphs", 2006) is kept for
the contracted graph so that "is there another path from ``a`` to ``b``?" only has to
search nodes ranked between ``a`` and ``b`` instead of the whole graph.

It deliberately imports nothing from the rest of ``disc_core``: bridges call it before
any DISC IR exists, on their own node objects.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "Cluster",
    "ClusteringResult",
    "Exclusion",
    "ExclusionReason",
    "Support",
    "find_clusters",
]

Node = Hashable


class ExclusionReason(str, enum.Enum):
    """Why a node did not end up in a cluster; bridges surface this to users."""

    UNSUPPORTED = "unsupported"
    """The support predicate said no; ``Exclusion.detail`` carries its reason."""
    NEVER_CLUSTER = "never_cluster"
    """The caller marked the node as never clusterable (user exclusion, side effects)."""
    CLUSTER_TOO_SMALL = "cluster_too_small"
    """The node's cluster was smaller than ``min_cluster_size`` and was dropped."""
    WOULD_CREATE_CYCLE = "would_create_cycle"
    """The node's cluster was dropped for being small *because* growing it into a
    neighbouring cluster would have created a cycle; more actionable than TOO_SMALL."""


@dataclass(frozen=True)
class Support:
    """The support predicate's verdict for one node.

    A reason is mandatory for ``supported=False`` so that every exclusion can be
    explained to the user; silent rejections are the main source of "why is my model
    not being compiled?" bug reports.
    """

    supported: bool
    reason: str | None = None
    code: str | None = None  # a disc_core.report.ReasonCode value, for the coverage report

    def __post_init__(self) -> None:
        if not self.supported and not self.reason:
            raise ValueError("Support(supported=False) requires a non-empty reason")

    @classmethod
    def yes(cls) -> Support:
        return cls(True)

    @classmethod
    def no(cls, reason: str) -> Support:
        return cls(False, reason)


@dataclass(frozen=True)
class Exclusion:
    """Why one node is not clustered (``detail`` is always human readable, non-empty)."""

    reason: ExclusionReason
    detail: str


@dataclass(frozen=True)
class Cluster:
    """A set of nodes to compile as one unit.

    ``nodes`` is in a topological order of the input graph so bridges can emit the
    fused computation by simply walking it.
    """

    id: int
    nodes: tuple[Node, ...]


@dataclass
class ClusteringResult:
    """Outcome of :func:`find_clusters`.

    Every input node appears in exactly one of ``cluster_of`` and ``excluded``, so a
    bridge never has to guess what happened to a node.
    """

    clusters: list[Cluster] = field(default_factory=list)
    excluded: dict[Node, Exclusion] = field(default_factory=dict)
    cluster_of: dict[Node, int] = field(default_factory=dict)


class _GraphCycles:
    """A DAG over integer ids that supports acyclicity-preserving edge contraction.

    ``rank`` is a topological order of the live nodes, maintained incrementally with
    Pearce-Kelly, so reachability queries between two nodes are bounded by their ranks:
    any path ``a -> ... -> b`` only visits nodes ranked strictly between them.
    """

    def __init__(self, succ: list[set[int]], pred: list[set[int]]) -> None:
        # The caller numbers nodes in a topological order, so identity is a valid rank.
        self.rank = list(range(len(succ)))
        self.succ = succ
        self.pred = pred

    def detour(self, a: int, b: int) -> list[int] | None:
        """Return the inner nodes of a path ``a -> ... -> b`` other than the edge a->b.

        None means the only connection is the direct edge, i.e. contracting a->b keeps
        the graph acyclic. Inner nodes of such a path are ranked strictly between a and
        b, so a forward search from a and a backward search from b are both confined to
        that window; they advance in lockstep and stop as soon as either side runs dry,
        which keeps the cost near the *smaller* of the two reachable regions.
        """
        rank, low, high = self.rank, self.rank[a], self.rank[b]
        ahead: dict[int, int] = {}  # node -> its parent on the way from a
        behind: dict[int, int] = {}  # node -> its child on the way to b
        fwd = [w for w in self.succ[a] if w != b and rank[w] < high]
        bwd = [w for w in self.pred[b] if w != a and rank[w] > low]
        for w in fwd:
            ahead[w] = a
        for w in bwd:
            behind[w] = b
        meet = next((w for w in fwd if w in behind), None)
        while meet is None and fwd and bwd:
            v = fwd.pop()
            for w in self.succ[v]:
                if w not in ahead and rank[w] < high:
                    ahead[w] = v
                    if w in behind:
                        meet = w
                        break
                    fwd.append(w)
            if meet is not None:
                break
            v = bwd.pop()
            for w in self.pred[v]:
                if w not in behind and rank[w] > low:
                    behind[w] = v
                    if w in ahead:
                        meet = w
                        break
                    bwd.append(w)
        if meet is None:
            return None
        path = [meet]
        while ahead[path[-1]] != a:
            path.append(ahead[path[-1]])
        path.reverse()
        while behind[path[-1]] != b:
            path.append(behind[path[-1]])
        return path

    def _insert_edge(self, x: int, y: int) -> None:
        """Add x->y, repairing ``rank`` (Pearce-Kelly) when it violates the order.

        Only the nodes ranked between y and x can be out of order afterwards: those
        reachable from y are moved after those reaching x, reusing their rank slots.
        """
        if y in self.succ[x]:
            return
        self.succ[x].add(y)
        self.pred[y].add(x)
        rank = self.rank
        upper, lower = rank[x], rank[y]
        if lower > upper:
            return
        forward = self._collect(y, self.succ, lambda r: r < upper)
        assert x not in forward, "edge contraction must never create a cycle"
        backward = self._collect(x, self.pred, lambda r: r > lower)
        moved = sorted(backward, key=rank.__getitem__) + sorted(forward, key=rank.__getitem__)
        for v, r in zip(moved, sorted(rank[v] for v in moved), strict=True):
            rank[v] = r

    def _collect(self, start: int, adj: list[set[int]], keep: Callable[[int], bool]) -> set[int]:
        seen = {start}
        stack = [start]
        while stack:
            for w in adj[stack.pop()]:
                if w not in seen and keep(self.rank[w]):
                    seen.add(w)
                    stack.append(w)
        return seen

    def contract(self, a: int, b: int) -> int | None:
        """Merge the endpoints of edge a->b unless that creates a cycle.

        Returns the id that survives (the endpoint with more edges, as in XLA, so the
        fewest edges are re-inserted) or None when another path a ~> b exists.
        """
        if self.detour(a, b) is not None:
            return None
        if len(self.succ[b]) + len(self.pred[b]) > len(self.succ[a]) + len(self.pred[a]):
            a, b = b, a
        out, inc = self.succ[b], self.pred[b]
        self.succ[b], self.pred[b] = set(), set()
        for y in out:
            self.pred[y].discard(b)
        for y in inc:
            self.succ[y].discard(b)
        for y in out:
            if y != a:
                self._insert_edge(a, y)
        for y in inc:
            if y != a:
                self._insert_edge(y, a)
        return a


def _topological_order(nodes: Sequence[Node], succ: list[set[int]]) -> list[int]:
    """Kahn's algorithm, preferring input order among ready nodes (determinism).

    Raises ValueError naming a node on a cycle, since clustering a cyclic graph is
    meaningless and a silent failure would hide a bridge bug.
    """
    n = len(nodes)
    indegree = [0] * n
    for out in succ:
        for w in out:
            indegree[w] += 1
    ready = [i for i in range(n) if indegree[i] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        v = heapq.heappop(ready)
        order.append(v)
        for w in succ[v]:
            indegree[w] -= 1
            if indegree[w] == 0:
                heapq.heappush(ready, w)
    if len(order) == n:
        return order
    # Every leftover node has a leftover predecessor, so walking predecessors from any
    # of them must eventually revisit a node; that node lies on a cycle.
    pred: list[list[int]] = [[] for _ in range(n)]
    for v in range(n):
        for w in succ[v]:
            pred[w].append(v)
    v = min(i for i in range(n) if indegree[i] > 0)
    walk: dict[int, int] = {}
    while v not in walk:
        walk[v] = len(walk)
        v = min(p for p in pred[v] if indegree[p] > 0)
    cycle = list(walk)[walk[v] :][::-1]
    text = " -> ".join(str(nodes[i]) for i in [*cycle, cycle[0]])
    raise ValueError(f"graph is not a DAG: node {nodes[v]} lies on the cycle {text}")


def _resolve_support(
    support: Callable[[Node], Support] | Mapping[Node, Support], node: Node
) -> Support:
    if isinstance(support, Mapping):
        if node not in support:
            raise ValueError(f"support mapping has no entry for node {node}")
        verdict = support[node]
    else:
        verdict = support(node)
    if not isinstance(verdict, Support):
        raise TypeError(f"support for node {node} must be a Support, got {verdict!r}")
    return verdict


def find_clusters(
    nodes: Sequence[Node],
    edges: Iterable[tuple[Node, Node]],
    support: Callable[[Node], Support] | Mapping[Node, Support],
    *,
    min_cluster_size: int = 2,
    never_cluster: Collection[Node] = (),
    group_key: Callable[[Node], Hashable] | None = None,
) -> ClusteringResult:
    """Partition the supported nodes of a DAG into maximal cycle-free clusters.

    Args:
        nodes: all graph nodes (distinct, hashable); their order breaks ties so the
            result is deterministic.
        edges: data/control dependencies ``(producer, consumer)``; duplicates are fine.
        support: predicate or mapping telling whether DISC can compile a node. It is not
            consulted for ``never_cluster`` nodes.
        min_cluster_size: smaller clusters are dropped because launching a compiled
            kernel for one or two trivial ops usually costs more than it saves.
        never_cluster: nodes that must stay outside every cluster regardless of support
            (user exclusions, stateful or side-effecting ops).
        group_key: nodes with different keys never share a cluster (TensorFlow uses it
            for devices and deadness scopes). Only called for clusterable nodes.

    Returns:
        Clusters such that contracting each one into a single node leaves the graph
        acyclic, and such that no two clusters joined by an edge could be merged
        without creating a cycle or mixing groups. Cluster ids follow the topological
        position of each cluster's first node.
    """
    if min_cluster_size < 1:
        raise ValueError(f"min_cluster_size must be >= 1, got {min_cluster_size}")
    index: dict[Node, int] = {}
    for node in nodes:
        if node in index:
            raise ValueError(f"duplicate node {node}")
        index[node] = len(index)
    n = len(index)
    input_succ: list[set[int]] = [set() for _ in range(n)]
    for src, dst in edges:
        for end in (src, dst):
            if end not in index:
                raise ValueError(f"edge ({src}, {dst}) names unknown node {end}")
        input_succ[index[src]].add(index[dst])
    for node in never_cluster:
        if node not in index:
            raise ValueError(f"never_cluster names unknown node {node}")

    # Renumber so that id == topological position; _GraphCycles relies on it.
    order = _topological_order(nodes, input_succ)
    topo = [nodes[i] for i in order]
    pos = {old: new for new, old in enumerate(order)}
    succ = [{pos[w] for w in input_succ[old]} for old in order]
    pred: list[set[int]] = [set() for _ in range(n)]
    for v, out in enumerate(succ):
        for w in out:
            pred[w].add(v)

    result = ClusteringResult()
    never = set(never_cluster)
    candidate = [False] * n
    group: list[Hashable] = [None] * n
    for i, node in enumerate(topo):
        if node in never:
            result.excluded[node] = Exclusion(
                ExclusionReason.NEVER_CLUSTER, f"node {node} is marked never_cluster by the caller"
            )
            continue
        verdict = _resolve_support(support, node)
        if not verdict.supported:
            assert verdict.reason
            result.excluded[node] = Exclusion(ExclusionReason.UNSUPPORTED, verdict.reason)
            continue
        candidate[i] = True
        group[i] = group_key(node) if group_key is not None else None

    graph = _GraphCycles(succ, pred)
    members = _contract_to_fixpoint(graph, candidate, group)
    _emit(result, graph, topo, candidate, group, members, min_cluster_size)
    return result


def _contract_to_fixpoint(
    graph: _GraphCycles, candidate: list[bool], group: list[Hashable]
) -> dict[int, list[int]]:
    """Greedily contract candidate edges until no contraction succeeds.

    Returns the members of each surviving cluster representative. A failed contraction
    (a, b) can only start succeeding after a or b absorbs another cluster (other merges
    keep the detour path intact), so failures are cached against a per-node version
    counter; this keeps every later pass linear in the number of edges.
    """
    n = len(candidate)
    members = {i: [i] for i in range(n) if candidate[i]}
    version = [0] * n
    failed: set[tuple[int, int, int, int]] = set()
    changed = True
    while changed:
        changed = False
        for start in range(n):
            if start not in members:
                continue
            a = start
            # Snapshot: merges below rewire a's edges; new neighbours wait for the next pass.
            for b in sorted(graph.succ[a]):
                if b not in members or b not in graph.succ[a] or group[a] != group[b]:
                    continue
                key = (a, b, version[a], version[b])
                if key in failed:
                    continue
                survivor = graph.contract(a, b)
                if survivor is None:
                    failed.add(key)
                    continue
                victim = b if survivor == a else a
                members[survivor].extend(members.pop(victim))
                version[survivor] += 1
                a = survivor
                changed = True
    return members


def _emit(
    result: ClusteringResult,
    graph: _GraphCycles,
    topo: list[Node],
    candidate: list[bool],
    group: list[Hashable],
    members: dict[int, list[int]],
    min_cluster_size: int,
) -> None:
    """Number kept clusters in topological order and explain the dropped ones."""
    for rep, ids in sorted(members.items(), key=lambda item: min(item[1])):
        ids.sort()
        if len(ids) >= min_cluster_size:
            cluster = Cluster(len(result.clusters), tuple(topo[i] for i in ids))
            result.clusters.append(cluster)
            for node in cluster.nodes:
                result.cluster_of[node] = cluster.id
            continue
        exclusion = _cycle_exclusion(graph, topo, candidate, group, members, rep)
        if exclusion is None:
            exclusion = Exclusion(
                ExclusionReason.CLUSTER_TOO_SMALL,
                f"cluster of {len(ids)} node(s) is below min_cluster_size={min_cluster_size}",
            )
        for i in ids:
            result.excluded[topo[i]] = exclusion


def _cycle_exclusion(
    graph: _GraphCycles,
    topo: list[Node],
    candidate: list[bool],
    group: list[Hashable],
    members: dict[int, list[int]],
    rep: int,
) -> Exclusion | None:
    """Explain a dropped cluster by a cycle that blocked merging it, if there is one.

    At the fixpoint every same-group neighbour cluster is blocked by a detour path, so
    the first such neighbour yields the explanation; an unclustered node on the detour
    is named in preference, since that is the op the user can act on.
    """
    rank = graph.rank
    pairs = [(rep, w) for w in graph.succ[rep]] + [(w, rep) for w in graph.pred[rep]]
    pairs.sort(key=lambda p: rank[p[1] if p[0] == rep else p[0]])
    for a, b in pairs:
        other = b if a == rep else a
        if other not in members or group[other] != group[rep]:
            continue
        path = graph.detour(a, b)
        if path is None:
            continue
        blockers = [v for v in path if not candidate[v]] or path
        through = topo[min(members.get(blockers[0], [blockers[0]]))]
        return Exclusion(
            ExclusionReason.WOULD_CREATE_CYCLE,
            f"merging with cluster containing {topo[min(members[other])]} "
            f"would create a cycle through {through}",
        )
    return None
