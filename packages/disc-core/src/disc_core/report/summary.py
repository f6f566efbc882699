"""The numbers every renderer shows, computed once so that all of them agree.

"142 ops, 138 compiled (97.2%)" must read the same in the terminal, in Markdown and in
HTML; computing it in three places would let them drift.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .codes import Engine, ReasonCode, Status

if TYPE_CHECKING:
    from .model import GraphReport, KernelTime

__all__ = [
    "KERNEL_ROWS",
    "ClusterTimes",
    "FallbackCount",
    "OpCount",
    "Summary",
    "cluster_times",
    "engine_split",
    "fallback_items",
    "format_pct",
    "kernel_cells",
    "mean_us",
    "node_split",
    "plural",
    "step_ops",
    "summarize",
]

#: Steps each renderer lists per profiled cluster; the rest fold into one "+N more" row.
KERNEL_ROWS = 10


@dataclass(frozen=True)
class FallbackCount:
    """How many nodes of one op type fell back for one reason."""

    op: str
    reason: ReasonCode
    count: int


@dataclass(frozen=True)
class OpCount:
    """Nodes of one op type by where they ran (the bar chart's rows): native code,
    the framework, and clustered but not native (the reference interpreter, or not built)."""

    op: str
    compiled: int
    fallback: int
    interpreted: int = 0

    @property
    def total(self) -> int:
        return self.compiled + self.fallback + self.interpreted


@dataclass(frozen=True)
class Summary:
    """Totals over some graphs. None means "not measured", never zero.

    ``compiled`` counts only nodes run by native code: a cluster the reference interpreter
    runs is ``interpreted`` (numpy, op by op: no faster than the framework), and one not
    built yet, or from a report that predates engines, is ``unbuilt``. The three and
    ``fallback`` add up to ``ops``.
    """

    runs: int
    graphs: int
    ops: int
    compiled: int
    clusters: int
    failed_clusters: int
    kernels: int | None
    fusions: int | None
    #: Some clusters (not all) reported no kernel count, so ``kernels`` is a lower bound.
    kernels_partial: bool = False
    reasons: dict[ReasonCode, int] = field(default_factory=dict)
    top_fallbacks: list[FallbackCount] = field(default_factory=list)
    op_types: list[OpCount] = field(default_factory=list)
    flops: float | None = None
    flops_compiled: float | None = None
    compile_seconds: float | None = None
    cache_hits: int = 0
    cache_misses: int = 0
    calls: int = 0
    cluster_calls: int = 0
    cluster_seconds: float | None = None
    fallback_seconds: float | None = None
    #: Library calls (GEMMs) per call of every cluster that reported them; not in ``kernels``.
    library_calls: int | None = None
    #: nodes of clusters the reference interpreter runs
    interpreted: int = 0
    #: built clusters the user's selection left in the framework (``DISC_BISECT_CLUSTERS``):
    #: not failures, so not in ``failed_clusters``
    excluded_clusters: int = 0
    #: nodes of clusters with no engine recorded (not built yet)
    unbuilt: int = 0
    #: live clusters by engine (``native``, ``reference``; ``None``: not built)
    engines: dict[Engine | None, int] = field(default_factory=dict)

    @property
    def fallback(self) -> int:
        return self.ops - self.compiled - self.interpreted - self.unbuilt

    @property
    def compiled_pct(self) -> float | None:
        return 100.0 * self.compiled / self.ops if self.ops else None

    @property
    def flops_pct(self) -> float | None:
        if not self.flops or self.flops_compiled is None:
            return None
        return 100.0 * self.flops_compiled / self.flops


def _add(total: float | None, value: float | None) -> float | None:
    if value is None:
        return total
    return value if total is None else total + value


def summarize(graphs: Iterable[GraphReport], *, runs: int | None = None) -> Summary:
    """Aggregate ``graphs``; ``runs`` defaults to the number of distinct run ids."""
    graphs = list(graphs)
    ops = compiled = clusters = failed = calls = cluster_calls = hits = misses = 0
    interpreted = unbuilt = excluded = 0
    engines: Counter[Engine | None] = Counter()
    kernels: int | None = None
    fusions: int | None = None
    library_calls: int | None = None
    uncounted = 0
    flops: float | None = None
    flops_compiled: float | None = None
    compile_s: float | None = None
    cluster_s: float | None = None
    fallback_s: float | None = None
    reasons: Counter[ReasonCode] = Counter()
    fallbacks: Counter[tuple[str, ReasonCode]] = Counter()
    per_op: dict[str, list[int]] = {}
    for graph in graphs:
        calls += graph.calls
        fallback_s = _add(fallback_s, graph.fallback_seconds)
        status: dict[int, Status] = {}
        why: dict[int, ReasonCode | None] = {}
        engine_of = {c.id: c.engine for c in graph.clusters}
        for node in graph.nodes:
            ops += 1
            counts = per_op.setdefault(node.op, [0, 0, 0])
            if node.flops is not None:
                flops = _add(flops, node.flops)
            if node.status is Status.COMPILED:
                engine = engine_of.get(node.cluster)  # type: ignore[arg-type]
                if engine is Engine.NATIVE:
                    compiled += 1
                    counts[0] += 1
                    if node.flops is not None:
                        flops_compiled = _add(flops_compiled, node.flops)
                else:
                    counts[2] += 1
                    if engine is None:
                        unbuilt += 1
                    else:
                        interpreted += 1
            else:
                counts[1] += 1
                assert node.reason is not None
                reasons[node.reason] += 1
                fallbacks[node.op, node.reason] += 1
            if node.cluster is not None:
                status[node.cluster] = node.status
                why[node.cluster] = node.reason
        for cluster in graph.clusters:
            if status.get(cluster.id, Status.COMPILED) is Status.FALLBACK:
                if why.get(cluster.id) is ReasonCode.EXCLUDED_BY_USER:
                    excluded += 1
                else:
                    failed += 1
                continue
            clusters += 1
            engines[cluster.engine] += 1
            if cluster.kernels is not None:
                kernels = (kernels or 0) + cluster.kernels
            else:
                uncounted += 1
            if cluster.fusions is not None:
                fusions = (fusions or 0) + cluster.fusions
            if cluster.library_calls is not None:
                library_calls = (library_calls or 0) + cluster.library_calls
            compile_s = _add(compile_s, cluster.compile_seconds)
            cluster_s = _add(cluster_s, cluster.seconds)
            hits += cluster.cache_hits
            misses += cluster.cache_misses
            cluster_calls += cluster.calls
    if flops is not None and flops_compiled is None:
        flops_compiled = 0.0
    top = [
        FallbackCount(op, reason, n)
        for (op, reason), n in sorted(fallbacks.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    op_types = [OpCount(op, c, f, i) for op, (c, f, i) in per_op.items()]
    op_types.sort(key=lambda o: (-o.total, o.op))
    return Summary(
        runs=len({g.run for g in graphs}) if runs is None else runs,
        graphs=len(graphs),
        ops=ops,
        compiled=compiled,
        clusters=clusters,
        failed_clusters=failed,
        excluded_clusters=excluded,
        kernels=kernels,
        fusions=fusions,
        kernels_partial=kernels is not None and uncounted > 0,
        library_calls=library_calls,
        reasons=dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0].value))),
        top_fallbacks=top,
        op_types=op_types,
        flops=flops,
        flops_compiled=flops_compiled,
        compile_seconds=compile_s,
        cache_hits=hits,
        cache_misses=misses,
        calls=calls,
        cluster_calls=cluster_calls,
        cluster_seconds=cluster_s,
        fallback_seconds=fallback_s,
        interpreted=interpreted,
        unbuilt=unbuilt,
        engines=dict(engines),
    )


def format_pct(part: float, whole: float) -> str:
    """``part/whole`` as "97.2%", never rounding a partial share to 0.0% or 100.0%.

    "100.0% compiled" while one op still falls back would send users looking in the wrong
    place, so shares strictly between 0 and 1 stay strictly between the two labels.
    """
    if not whole:
        return "n/a"
    pct = 100.0 * part / whole
    text = f"{pct:.1f}%"
    if text == "100.0%" and part < whole:
        return "99.9%"
    if text == "0.0%" and part > 0:
        return "0.1%"
    return text


def engine_split(summary: Summary) -> str:
    """"3 native, 1 on the reference interpreter, 2 failed (run by the framework)": what
    ran the clusters, so "compiled" is never mistaken for an interpreter's work."""
    parts = [f"{summary.engines.get(Engine.NATIVE, 0)} native"]
    if summary.engines.get(Engine.REFERENCE):
        parts.append(f"{summary.engines[Engine.REFERENCE]} on the reference interpreter")
    if summary.engines.get(None):
        parts.append(f"{summary.engines[None]} not built")
    if summary.failed_clusters:
        parts.append(f"{summary.failed_clusters} failed (run by the framework)")
    if summary.excluded_clusters:
        parts.append(f"{summary.excluded_clusters} left out by the user (run by the "
                     "framework)")
    return ", ".join(parts)


def node_split(summary: Summary) -> str:
    """"4 interpreted, 2 not built" (empty when every clustered node is native)."""
    parts = []
    if summary.interpreted:
        parts.append(f"{summary.interpreted} interpreted")
    if summary.unbuilt:
        parts.append(f"{summary.unbuilt} not built")
    return ", ".join(parts)


def plural(n: int, word: str, words: str | None = None) -> str:
    """"1 op", "2 ops" (``words`` for irregular plurals)."""
    return f"{n} {word if n == 1 else words or word + 's'}"


def fallback_items(items: Sequence[FallbackCount], limit: int) -> str:
    """"aten.nonzero x2 (data-dependent shape), ..." for the first ``limit`` items."""
    return ", ".join(f"{f.op} x{f.count} ({f.reason.label})" for f in items[:limit])


@dataclass(frozen=True)
class ClusterTimes:
    """One profiled cluster's "Kernel time" rows: the hottest steps first, the rest folded.

    Shares are of the cluster's profiled time (all its steps, host work included), so they
    say where that cluster's time goes whatever else the graph does.
    """

    cluster: int
    #: the ``KERNEL_ROWS`` hottest steps, most seconds first
    steps: list[KernelTime]
    #: seconds of all steps, shown and folded
    seconds: float
    #: steps left out, and their seconds
    more: int = 0
    more_seconds: float = 0.0

    def share(self, seconds: float) -> str:
        """``seconds`` as a share of the cluster's profiled time ("64.8%", "n/a" for 0 s)."""
        return format_pct(seconds, self.seconds)


def cluster_times(graph: GraphReport, *, top: int = KERNEL_ROWS) -> list[ClusterTimes]:
    """The profiled clusters of ``graph`` with at least one step, in cluster order."""
    out = []
    for cluster in graph.clusters:
        if not cluster.profile:
            continue
        ranked = sorted(cluster.profile, key=lambda step: (-step.seconds, step.name))
        rest = ranked[top:]
        out.append(ClusterTimes(
            cluster=cluster.id,
            steps=ranked[:top],
            seconds=sum(step.seconds for step in ranked),
            more=len(rest),
            more_seconds=sum(step.seconds for step in rest),
        ))
    return out


def mean_us(step: KernelTime) -> float | None:
    """Microseconds per call, None when the step never ran."""
    return 1e6 * step.seconds / step.calls if step.calls else None


def step_ops(step: KernelTime, limit: int = 3, width: int = 40) -> str:
    """"add, exp, mul, +4 more": a fused kernel can run dozens of ops, and a table cell
    should still fit a line; "-" when the step runs none (host work)."""
    shown: list[str] = []
    for op in step.ops[:limit]:
        if shown and len(", ".join([*shown, op])) > width:
            break
        shown.append(op if len(op) <= width else op[:width - 1] + "\u2026")
    left = len(step.ops) - len(shown)
    text = ", ".join(shown) or "-"
    return f"{text}, +{left} more" if left else text


def kernel_cells(times: ClusterTimes) -> list[list[str]]:
    """The plain-text cells of one profiled cluster's "Kernel time" rows (cluster, step,
    kind, ops, shape, calls, total ms, mean us per call, share), then the "+N more" row:
    the text and Markdown renderings show these as they are or escaped."""
    rows = []
    for step in times.steps:
        mean = mean_us(step)
        rows.append([str(times.cluster), step.name, step.kind, step_ops(step), step.shape or "-",
                     str(step.calls), f"{1e3 * step.seconds:.3f}",
                     "-" if mean is None else f"{mean:.1f}", times.share(step.seconds)])
    if times.more:
        rows.append([str(times.cluster), f"+{plural(times.more, 'more step')}", "", "", "", "",
                     f"{1e3 * times.more_seconds:.3f}", "", times.share(times.more_seconds)])
    return rows
