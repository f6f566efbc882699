"""Terminal rendering: one summary line first, then short sections a person scans.

The first line answers the question users ask first, in one breath:
``142 ops, 138 compiled (97.2%), 3 clusters, 9 kernels; top fallbacks: aten.nonzero x2
(data-dependent shape)``; it is also what bridges log and what CI output shows.
"""

from __future__ import annotations

from .model import GraphReport, Report, RunInfo
from .sharing import key_compiles, sharing_line
from .summary import (
    Summary,
    cluster_times,
    engine_split,
    fallback_items,
    format_pct,
    kernel_cells,
    node_split,
    plural,
)

__all__ = ["describe_run", "render_text", "summary_line"]


def _seconds(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.3f} s"


def summary_line(summary: Summary, *, top: int = 3) -> str:
    """The one-line answer: ops, compiled share, clusters, kernels, top fallbacks."""
    if summary.graphs == 0:
        return "no graphs captured"
    share = format_pct(summary.compiled, summary.ops)
    if summary.flops:
        share += f"; {format_pct(summary.flops_compiled or 0.0, summary.flops)} of FLOPs"
    parts = [plural(summary.ops, "op"), f"{summary.compiled} compiled ({share})"]
    if node_split(summary):  # clustered, yet not native code: never counted as compiled
        parts.append(node_split(summary))
    clusters = plural(summary.clusters, "cluster")
    if summary.failed_clusters:
        clusters += f" (+{summary.failed_clusters} failed)"
    if summary.excluded_clusters:
        clusters += f" (+{summary.excluded_clusters} left out)"
    parts.append(clusters)
    if summary.kernels is not None:  # "9+ kernels": some clusters have no kernel count
        n = summary.kernels
        parts.append(f"{n}+ kernels" if summary.kernels_partial else plural(n, "kernel"))
    if summary.library_calls:  # GEMMs: launched per call like kernels, counted apart
        parts.append(plural(summary.library_calls, "library call"))
    line = ", ".join(parts)
    if summary.top_fallbacks:
        return f"{line}; top fallbacks: {fallback_items(summary.top_fallbacks, top)}"
    return f"{line}; no fallbacks"


def describe_run(run: RunInfo) -> str:
    """"torch 2.13.0 on cpu, 2025-01-01T00:00:00Z, pid 7 on host (disc-core 0.1.0, ...)"."""
    framework = " ".join(p for p in (run.framework or "no framework", run.framework_version) if p)
    text = f"{framework} on {run.device}, {run.started_at}"
    if run.pid is not None:
        text += f", pid {run.pid}" + (f" on {run.host}" if run.host else "")
    if run.rank is not None:
        text += f", rank {run.rank}" + (f" of {run.world_size}" if run.world_size else "")
    if run.disc_versions:
        text += " (" + ", ".join(f"{k} {v}" for k, v in run.disc_versions.items()) + ")"
    return text


#: "Kernel time" columns; the numeric ones (calls onwards) are right-aligned.
_KERNEL_HEADER = ["cluster", "step", "kind", "ops", "shape", "calls", "total ms", "us/call",
                  "share"]
_FIRST_NUMERIC = _KERNEL_HEADER.index("calls")


def _aligned(rows: list[list[str]]) -> list[str]:
    """Rows padded into columns, text left-aligned and numbers right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.rjust(w) if i >= _FIRST_NUMERIC else cell.ljust(w)
                      for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
            for row in rows]


#: keys the per-key table lists; the rest fold into one "+N more keys" row
KEY_ROWS = 20


def _across_runs(report: Report) -> list[str]:
    """Compiles and cache hits per cluster key when the report joins several runs (the
    ranks of a job sharing a compile cache): one line, then a row per key."""
    items = key_compiles(report)
    if len(report.runs) < 2 or not items:
        return []
    lines = ["across runs (per compile-cache key): "
             + sharing_line(items, len(report.runs))]
    rows = [["key", "compiles", "cache hits", "runs", "compiled by"]]
    for k in items[:KEY_ROWS]:
        rows.append([k.key[:12], str(k.compiles), str(k.cache_hits), str(len(k.runs)),
                     ", ".join(k.compiled_by) or "-"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:4], widths[1:4])]
        lines.append(("  " + "  ".join([*cells, row[4]])).rstrip())
    if len(items) > KEY_ROWS:
        lines.append(f"  +{plural(len(items) - KEY_ROWS, 'more key')}")
    return lines


def _kernel_time(graph: GraphReport, framework: str) -> list[str]:
    """The graph's "Kernel time" table, hottest steps of each profiled cluster first; no
    lines when no cluster of it was profiled."""
    rows = [row for times in cluster_times(graph) for row in kernel_cells(times)]
    if not rows:
        return []
    title = (f"Kernel time, {graph.name} [{framework}] "
             "(hottest steps first; share of the cluster's profiled time):")
    return [title] + ["  " + line for line in _aligned([_KERNEL_HEADER, *rows])]


def render_text(report: Report, *, top: int = 3) -> str:
    """The summary line, then runs, graphs, fallback reasons, time, and the kernel time of
    profiled clusters (ends with a newline)."""
    summary = report.summary()
    lines = [summary_line(summary, top=top)]
    if report.runs:
        lines.append("runs:")
        lines += [f"  {describe_run(run)}" for run in report.runs]
    frameworks = {run.id: run.framework or "no framework" for run in report.runs}
    if report.graphs:
        lines.append("graphs:")
        for graph in report.graphs:
            g = graph.summary()
            other = f"{node_split(g)}, " if node_split(g) else ""
            lines.append(
                f"  {graph.name} [{frameworks.get(graph.run, '?')}]: {plural(g.ops, 'op')}, "
                f"{g.compiled} compiled ({format_pct(g.compiled, g.ops)}), {other}"
                f"{plural(g.clusters, 'cluster')}, {plural(graph.calls, 'call')}"
            )
    if summary.reasons:
        lines.append("fallbacks by reason:")
        for reason, count in summary.reasons.items():
            ops = [f"{f.op} x{f.count}" for f in summary.top_fallbacks if f.reason is reason]
            more = f", +{len(ops) - 5} more op types" if len(ops) > 5 else ""
            lines.append(f"  {reason.label} ({reason.value}): {count} - {', '.join(ops[:5])}{more}")
    if summary.clusters or summary.failed_clusters or summary.excluded_clusters:
        lines.append(f"engines: {engine_split(summary)}")
    if summary.clusters:
        cache = f"{plural(summary.cache_misses, 'miss', 'misses')}, "
        cache += plural(summary.cache_hits, "hit")
        lines.append(
            f"compile: {_seconds(summary.compile_seconds)} ({cache}); "
            f"clusters ran {plural(summary.cluster_calls, 'time')}, "
            f"{_seconds(summary.cluster_seconds)}; "
            f"fallback ops {_seconds(summary.fallback_seconds)}"
        )
    lines += _across_runs(report)
    for graph in report.graphs:
        lines += _kernel_time(graph, frameworks.get(graph.run, "?"))
    return "\n".join(lines) + "\n"
