"""Markdown rendering, for pull requests, issues and CI job summaries.

Op and node names come from user programs and may contain Markdown or HTML syntax
(``a|b``, ``<lambda>``, ``*args``); every such string goes through :func:`md_escape` so a
name can neither break a table nor inject markup where the Markdown is rendered.
"""

from __future__ import annotations

import html
import re

from .model import GraphReport, Report
from .render_text import describe_run, summary_line
from .sharing import key_compiles, sharing_line
from .summary import cluster_times, format_pct, kernel_cells, plural

__all__ = ["md_escape", "render_markdown"]

#: Characters with inline meaning anywhere in a line (cells and the bold summary never start
#: a line, so block syntax such as "#" or "-" cannot trigger); <, > and & become entities.
_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md_escape(text: str) -> str:
    """Text that renders literally in Markdown, also inside a table cell."""
    text = " ".join(text.split())  # a newline would end a table row
    return _SPECIAL.sub(r"\\\1", html.escape(text, quote=False))


def _num(value: float | int | None, fmt: str = "{}") -> str:
    return "-" if value is None else fmt.format(value)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines + [""]


def _kernel_time(graphs: list[GraphReport], frameworks: dict[str, str]) -> list[str]:
    """"Kernel time": per graph with profiled clusters, their hottest steps first."""
    out: list[str] = []
    for graph in graphs:
        rows = [[md_escape(cell) for cell in row]
                for times in cluster_times(graph) for row in kernel_cells(times)]
        if rows:
            framework = md_escape(frameworks.get(graph.run, "?"))
            out += [f"**{md_escape(graph.name)}** ({framework})", ""]
            out += _table(["cluster", "step", "kind", "ops", "shape", "calls", "total (ms)",
                           "mean (µs/call)", "share"], rows)
    if not out:
        return []
    return ["## Kernel time", "", "Hottest steps of each profiled cluster first; share of the "
            "cluster's profiled time (kernels, library calls and host work).", "", *out]


def render_markdown(report: Report, *, top: int = 10) -> str:
    """A Markdown document: summary line, runs, graphs, fallbacks, clusters, compiles per
    cluster key across runs (several runs only), kernel time."""
    summary = report.summary()
    out = ["# DISC coverage report", "", f"**{md_escape(summary_line(summary))}**", ""]
    if report.runs:
        out += ["## Runs", ""]
        out += _table(["run", "where"], [[f"`{r.id}`", md_escape(describe_run(r))]
                                        for r in report.runs])
    frameworks = {run.id: run.framework or "no framework" for run in report.runs}
    if report.graphs:
        out += ["## Graphs", ""]
        rows = []
        for graph in report.graphs:
            g = graph.summary()
            rows.append([
                md_escape(graph.name), md_escape(frameworks.get(graph.run, "?")), str(g.ops),
                f"{g.compiled} ({format_pct(g.compiled, g.ops)})", str(g.clusters),
                _num(g.kernels), str(graph.calls),
            ])
        out += _table(["graph", "framework", "ops", "compiled", "clusters", "kernels", "calls"],
                      rows)
    if summary.reasons:
        out += ["## Fallback reasons", ""]
        out += _table(["reason", "code", "nodes"], [
            [md_escape(reason.label), f"`{reason.value}`", str(n)]
            for reason, n in summary.reasons.items()
        ])
        out += [f"## Top fallbacks ({min(top, len(summary.top_fallbacks))} of "
                f"{plural(len(summary.top_fallbacks), 'op/reason pair')})", ""]
        out += _table(["op", "reason", "nodes"], [
            [md_escape(f.op), md_escape(f.reason.label), str(f.count)]
            for f in summary.top_fallbacks[:top]
        ])
    clusters = [(graph, c) for graph in report.graphs for c in graph.clusters]
    if clusters:
        out += ["## Clusters", ""]
        out += _table(
            ["graph", "cluster", "engine", "nodes", "fusions", "kernels", "library calls",
             "compile (s)", "cache hit/miss", "calls", "time (s)", "key"],
            [[md_escape(g.name), str(c.id), c.engine.label if c.engine else "not built",
              str(len(c.nodes)), _num(c.fusions), _num(c.kernels),
              _num(c.library_calls), _num(c.compile_seconds, "{:.3f}"),
              f"{c.cache_hits}/{c.cache_misses}",
              str(c.calls), _num(c.seconds, "{:.3f}"),
              f"`{c.key[:12]}`" if c.key else ""] for g, c in clusters],
        )
    items = key_compiles(report)
    if len(report.runs) > 1 and items:
        out += ["## Across runs (per compile-cache key)", "",
                md_escape(sharing_line(items, len(report.runs))), ""]
        out += _table(["key", "compiles", "cache hits", "runs", "compiled by"], [
            [f"`{k.key[:12]}`", str(k.compiles), str(k.cache_hits), str(len(k.runs)),
             md_escape(", ".join(k.compiled_by)) or "-"] for k in items])
    out += _kernel_time(report.graphs, frameworks)
    return "\n".join(out).rstrip("\n") + "\n"
