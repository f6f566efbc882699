"""A self-contained HTML page: summary, op-type bar chart, reasons, clusters, kernel time
(when profiled), fallback nodes.

One file with inline CSS, an inline SVG chart drawn here (so it shows even with scripts
off) and a little vanilla JS for sorting and filtering tables. It loads nothing: a Content
Security Policy forbids every fetch, so the page works offline, attached to a CI run or
mailed around, and a stray external reference would show up as a console error in the
browser test instead of silently loading.

Every string from the report (op names such as ``<lambda>`` or ``a&b``, details, graph
names) goes through :func:`html.escape`; the script embeds no report data at all. When the
script has run to its end it sets ``document.body.dataset.rendered = "ok"``, which the
browser test checks.
"""

from __future__ import annotations

import html

from .model import ClusterRecord, GraphReport, Report, Status
from .render_text import summary_line
from .sharing import key_compiles, sharing_line
from .summary import (
    ClusterTimes,
    OpCount,
    Summary,
    cluster_times,
    engine_split,
    format_pct,
    mean_us,
    plural,
    step_ops,
)

__all__ = ["COMPILED_COLOR", "FALLBACK_COLOR", "INTERPRETED_COLOR", "render_html"]

COMPILED_COLOR = "#2a9d8f"
FALLBACK_COLOR = "#e76f51"
#: clustered but not native code (the reference interpreter, or not built yet)
INTERPRETED_COLOR = "#e9c46a"
#: Rows of the chart and of the fallback-node table; beyond, the JSON file has the rest.
MAX_CHART_ROWS = 40
MAX_NODE_ROWS = 2000

_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)

_STYLE = f"""
body {{ font: 14px/1.45 system-ui, sans-serif; margin: 24px 32px; color: #1d2733;
  background: #ffffff; }}
h1 {{ font-size: 22px; margin: 0 0 4px; }}
h2 {{ font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #d8dee4; }}
.summary {{ font-size: 15px; margin: 4px 0 14px; }}
.cards {{ display: flex; flex-wrap: wrap; gap: 12px; }}
.card {{ border: 1px solid #d8dee4; border-radius: 6px; padding: 8px 14px; min-width: 110px; }}
.card b {{ display: block; font-size: 20px; }}
.card span {{ color: #57606a; font-size: 12px; }}
table {{ border-collapse: collapse; margin: 4px 0; }}
th, td {{ border: 1px solid #d8dee4; padding: 3px 8px; text-align: left; vertical-align: top; }}
th {{ background: #f3f5f7; }}
table.sortable th {{ cursor: pointer; }}
td.n {{ text-align: right; font-variant-numeric: tabular-nums; }}
code {{ font: 12px ui-monospace, monospace; }}
.legend i {{ display: inline-block; width: 12px; height: 12px; margin: 0 4px 0 12px; }}
.compiled {{ background: {COMPILED_COLOR}; }}
.fallback {{ background: {FALLBACK_COLOR}; }}
.interpreted {{ background: {INTERPRETED_COLOR}; }}
.muted {{ color: #57606a; }}
svg text {{ font: 12px system-ui, sans-serif; fill: #1d2733; }}
"""

_SCRIPT = """
(function () {
  "use strict";
  function key(row, i) {
    var cell = row.cells[i];
    var v = cell.getAttribute("data-v");
    return v !== null ? parseFloat(v) : cell.textContent.trim().toLowerCase();
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
      th.title = "sort";
      th.addEventListener("click", function () {
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var dir = th.getAttribute("data-dir") === "asc" ? -1 : 1;
        rows.sort(function (a, b) {
          var x = key(a, i), y = key(b, i);
          return (x < y ? -1 : x > y ? 1 : 0) * dir;
        });
        th.setAttribute("data-dir", dir === 1 ? "asc" : "desc");
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  var filter = document.getElementById("node-filter");
  if (filter) {
    filter.addEventListener("input", function () {
      var q = filter.value.toLowerCase();
      var rows = document.querySelectorAll("#fallback-nodes tbody tr");
      Array.prototype.forEach.call(rows, function (r) {
        r.hidden = q !== "" && r.textContent.toLowerCase().indexOf(q) < 0;
      });
    });
  }
  document.body.dataset.rendered = "ok";
})();
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _num(value: float | int | None, fmt: str = "{}") -> str:
    """A right-aligned numeric cell that sorts by value (unknown sorts first, shows "-")."""
    if value is None:
        return '<td class="n" data-v="-1">-</td>'
    return f'<td class="n" data-v="{value}">{_e(fmt.format(value))}</td>'


def _table(header: list[str], rows: list[str], *, sortable: bool = True, ident: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    attrs = (' class="sortable"' if sortable else "") + (f' id="{ident}"' if ident else "")
    body = "\n".join(f"<tr>{row}</tr>" for row in rows)
    return f"<table{attrs}><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>"


def _chart(op_types: list[OpCount]) -> str:
    """Horizontal stacked bars, one per op type: compiled then fallback node counts."""
    if not op_types:
        return '<p class="muted">No ops captured.</p>'
    rows = list(op_types[:MAX_CHART_ROWS])
    rest = op_types[MAX_CHART_ROWS:]
    if rest:
        rows.append(OpCount(f"({len(rest)} more op types)", sum(o.compiled for o in rest),
                            sum(o.fallback for o in rest), sum(o.interpreted for o in rest)))
    label_w, bar_w, row_h = 280, 620, 22
    scale = bar_w / max(o.total for o in rows)
    parts = []
    for i, o in enumerate(rows):
        y = i * row_h
        label = o.op if len(o.op) <= 40 else o.op[:39] + "\u2026"
        cw, iw, fw = o.compiled * scale, o.interpreted * scale, o.fallback * scale
        other = f", {o.interpreted} clustered but not native" if o.interpreted else ""
        parts.append(
            f"<g><title>{_e(o.op)}: {o.compiled} compiled{other}, {o.fallback} fallback"
            "</title>"
            f'<text x="{label_w - 8}" y="{y + 15}" text-anchor="end">{_e(label)}</text>'
            f'<rect x="{label_w}" y="{y + 3}" width="{cw:.2f}" height="16" '
            f'fill="{COMPILED_COLOR}"/>'
            f'<rect x="{label_w + cw:.2f}" y="{y + 3}" width="{iw:.2f}" height="16" '
            f'fill="{INTERPRETED_COLOR}"/>'
            f'<rect x="{label_w + cw + iw:.2f}" y="{y + 3}" width="{fw:.2f}" height="16" '
            f'fill="{FALLBACK_COLOR}"/>'
            f'<text x="{label_w + cw + iw + fw + 6:.2f}" y="{y + 15}">'
            f"{o.compiled}/{o.total}</text>"
            "</g>"
        )
    height = len(rows) * row_h + 4
    return (
        f'<svg width="{label_w + bar_w + 90}" '
        f'height="{height}" role="img" aria-label="op types, compiled vs fallback" '
        f'shape-rendering="crispEdges">{"".join(parts)}</svg>'
    )


def _cards(s: Summary) -> str:
    cards = [
        (str(s.ops), "ops"),
        (format_pct(s.compiled, s.ops), "compiled (native)"),
        (str(s.fallback), "fallback ops"),
        (str(s.clusters), "clusters"),
        ("-" if s.kernels is None else f"{s.kernels}{'+' if s.kernels_partial else ''}",
         "kernels"),
    ]
    if s.interpreted:
        cards.insert(3, (str(s.interpreted), "interpreted ops"))
    if s.unbuilt:
        cards.insert(3, (str(s.unbuilt), "ops not built"))
    if s.flops:
        cards.append((format_pct(s.flops_compiled or 0.0, s.flops), "FLOPs compiled"))
    if s.cluster_seconds is not None:
        cards.append((f"{s.cluster_seconds:.3f} s", "in compiled clusters"))
    if s.fallback_seconds is not None:
        cards.append((f"{s.fallback_seconds:.3f} s", "in fallback ops"))
    return '<div class="cards">' + "".join(
        f'<div class="card"><b>{_e(v)}</b><span>{_e(k)}</span></div>' for v, k in cards
    ) + "</div>"


def _cluster_ops(graph: GraphReport, cluster: ClusterRecord) -> str:
    op_of = {n.name: n.op for n in graph.nodes}
    counts: dict[str, int] = {}
    for name in cluster.nodes:
        counts[op_of[name]] = counts.get(op_of[name], 0) + 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{op} x{n}" for op, n in top[:6])
    return text + (f", +{len(top) - 6} more" if len(top) > 6 else "")


def _share(times: ClusterTimes, seconds: float) -> str:
    pct = 100.0 * seconds / times.seconds if times.seconds else 0.0
    return f'<td class="n" data-v="{pct:.3f}">{_e(times.share(seconds))}</td>'


def _kernel_rows(times: ClusterTimes) -> list[str]:
    """A cluster's hottest steps (ops abbreviated; the cell's tooltip lists them all), then
    one row for the steps left out."""
    rows = [_num(times.cluster) + f"<td><code>{_e(step.name)}</code></td><td>{_e(step.kind)}</td>"
            f'<td title="{_e(", ".join(step.ops))}">{_e(step_ops(step))}</td>'
            f"<td><code>{_e(step.shape or '-')}</code></td>" + _num(step.calls)
            + _num(1e3 * step.seconds, "{:.3f}") + _num(mean_us(step), "{:.1f}")
            + _share(times, step.seconds) for step in times.steps]
    if times.more:
        rows.append(_num(times.cluster)
                    + f'<td colspan="5" class="muted">+{_e(plural(times.more, "more step"))}</td>'
                    + _num(1e3 * times.more_seconds, "{:.3f}") + "<td></td>"
                    + _share(times, times.more_seconds))
    return rows


def _kernel_time(report: Report, framework: dict[str, str]) -> list[str]:
    """"Kernel time", one table per graph with profiled clusters; nothing without any. The
    tables do not sort: a cluster's rows and its "+N more" row belong together."""
    out = []
    for g in report.graphs:
        rows = [row for times in cluster_times(g) for row in _kernel_rows(times)]
        if rows:
            out.append(f"<p><b>{_e(g.name)}</b> "
                       f'<span class="muted">({_e(framework.get(g.run, "?"))})</span></p>'
                       + _table(["cluster", "step", "kind", "ops", "shape", "calls",
                                 "total (ms)", "mean (\u00b5s/call)", "share"], rows,
                                sortable=False))
    if not out:
        return []
    return ["<h2>Kernel time</h2>"
            '<p class="muted">Hottest steps of each profiled cluster first; share of the '
            "cluster's profiled time (kernels, library calls and host work).</p>", *out]


def _across_runs(report: Report) -> list[str]:
    """Compiles and cache hits per compile-cache key over the runs of a merged report (the
    ranks of a job sharing one cache should compile each key once); nothing for one run."""
    items = key_compiles(report)
    if len(report.runs) < 2 or not items:
        return []
    return ['<h2>Across runs (per compile-cache key)</h2>'
            f'<p id="sharing">{_e(sharing_line(items, len(report.runs)))}</p>'
            + _table(["key", "compiles", "cache hits", "runs", "compiled by"], [
                f'<td title="{_e(k.key)}"><code>{_e(k.key[:12])}</code></td>'
                + _num(k.compiles) + _num(k.cache_hits) + _num(len(k.runs))
                + f"<td>{_e(', '.join(k.compiled_by) or '-')}</td>" for k in items],
                ident="across-runs")]


def _sections(report: Report, s: Summary) -> list[str]:
    framework = {r.id: r.framework or "no framework" for r in report.runs}
    out = []
    if report.runs:
        out.append("<h2>Runs</h2>" + _table(
            ["run", "framework", "version", "device", "started (UTC)", "DISC", "host/pid"],
            [f"<td><code>{_e(r.id)}</code></td><td>{_e(r.framework or '-')}</td>"
             f"<td>{_e(r.framework_version or '-')}</td><td>{_e(r.device)}</td>"
             f"<td>{_e(r.started_at)}</td>"
             f"<td>{_e(', '.join(f'{k} {v}' for k, v in r.disc_versions.items()) or '-')}</td>"
             f"<td>{_e(r.host or '-')}/{_e(r.pid if r.pid is not None else '-')}</td>"
             for r in report.runs], sortable=False))
    out.append("<h2>Op types: compiled vs fallback</h2>"
               '<p class="legend"><i class="compiled"></i>compiled (native code)'
               '<i class="interpreted"></i>reference interpreter or not built'
               '<i class="fallback"></i>fallback</p>' + _chart(s.op_types))
    if report.graphs:
        rows = []
        for g in report.graphs:
            gs = g.summary()
            rows.append(
                f"<td>{_e(g.name)}</td><td>{_e(framework.get(g.run, '?'))}</td>"
                + _num(gs.ops) + _num(gs.compiled)
                + f'<td class="n" data-v="{gs.compiled_pct or 0}">'
                f"{_e(format_pct(gs.compiled, gs.ops))}</td>"
                + _num(gs.clusters) + _num(gs.kernels) + _num(g.calls)
                + _num(g.fallback_seconds, "{:.3f}")
            )
        out.append("<h2>Graphs</h2>" + _table(
            ["graph", "framework", "ops", "compiled", "share", "clusters", "kernels", "calls",
             "fallback time (s)"], rows))
    out.append("<h2>Fallback reasons</h2>")
    if s.reasons:
        rows = []
        for reason, n in s.reasons.items():
            ops = [f for f in s.top_fallbacks if f.reason is reason]
            text = ", ".join(f"{f.op} x{f.count}" for f in ops[:8])
            text += f", +{len(ops) - 8} more" if len(ops) > 8 else ""
            rows.append(f"<td>{_e(reason.label)}</td><td><code>{_e(reason.value)}</code></td>"
                        + _num(n) + f"<td>{_e(text)}</td>")
        out.append(_table(["reason", "code", "nodes", "op types"], rows))
    else:
        out.append('<p class="muted">No op fell back.</p>')
    out.append("<h2>Clusters</h2>")
    clusters = [(g, c) for g in report.graphs for c in g.clusters]
    if clusters:
        out.append(f'<p id="engines">Engines: {_e(engine_split(s))}.</p>')
        status = {(id(g), n.cluster): n.status for g in report.graphs for n in g.nodes
                  if n.cluster is not None}
        out.append(_table(
            ["graph", "cluster", "status", "engine", "nodes", "op types", "fusions", "kernels",
             "library calls", "compile (s)", "cache hits", "cache misses", "calls", "time (s)",
             "key"],
            [f"<td>{_e(g.name)}</td>" + _num(c.id)
             + f"<td>{_e(status.get((id(g), c.id), Status.COMPILED).value)}</td>"
             + f"<td>{_e(c.engine.label if c.engine else 'not built')}</td>"
             + _num(len(c.nodes)) + f"<td>{_e(_cluster_ops(g, c))}</td>"
             + _num(c.fusions) + _num(c.kernels) + _num(c.library_calls)
             + _num(c.compile_seconds, "{:.3f}")
             + _num(c.cache_hits) + _num(c.cache_misses) + _num(c.calls)
             + _num(c.seconds, "{:.3f}")
             + (f'<td title="{_e(c.key)}"><code>{_e(c.key[:12])}</code></td>' if c.key
                else "<td></td>") for g, c in clusters]))
    else:
        out.append('<p class="muted">No clusters.</p>')
    out += _across_runs(report)
    out += _kernel_time(report, framework)
    fallbacks = [(g, n) for g in report.graphs for n in g.nodes if n.status is Status.FALLBACK]
    if fallbacks:
        shown = fallbacks[:MAX_NODE_ROWS]
        note = (f'<p class="muted">First {len(shown)} of {len(fallbacks)} fallback nodes; the '
                "JSON report lists all.</p>" if len(shown) < len(fallbacks) else "")
        out.append(
            f"<h2>Fallback nodes ({len(fallbacks)})</h2>{note}"
            '<p><input id="node-filter" type="search" placeholder="filter nodes" '
            'aria-label="filter nodes"></p>'
            + _table(["graph", "node", "op", "reason", "detail"], [
                f"<td>{_e(g.name)}</td><td><code>{_e(n.name)}</code></td><td>{_e(n.op)}</td>"
                f"<td>{_e(n.reason.label if n.reason else '-')}</td><td>{_e(n.detail or '')}</td>"
                for g, n in shown], ident="fallback-nodes"))
    return out


def render_html(report: Report) -> str:
    """The whole page as one string (UTF-8 when written)."""
    s = report.summary()
    body = "\n".join(_sections(report, s))
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>DISC coverage report</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>DISC coverage report</h1>
<p class="summary">{_e(summary_line(s))}</p>
{_cards(s)}
{body}
<p class="muted">Schema version {report.written_version()}; see docs/report-schema.md.</p>
<script>{_SCRIPT}</script>
</body>
</html>
"""
