"""Terminal, Markdown and HTML renderers on synthetic reports (empty, all-fallback, hostile)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
import report_samples as samples

from disc_core.report import (
    ReasonCode,
    Report,
    render_html,
    render_markdown,
    render_text,
    summary_line,
)
from disc_core.report.render_html import COMPILED_COLOR, FALLBACK_COLOR, MAX_CHART_ROWS

ALL = [samples.issue_example, samples.torch_report, samples.tf_report, samples.all_fallback,
       samples.empty_graph, samples.hostile, Report]


def without_flops(report: Report) -> Report:
    for g in report.graphs:
        for n in g.nodes:
            n.flops = None
    return report


# ------------------------------------------------------------------ terminal


def test_the_issue_summary_line():
    report = without_flops(samples.issue_example())
    assert summary_line(report.summary(), top=1) == (
        "142 ops, 138 compiled (97.2%), 3 clusters, 9 kernels; "
        "top fallbacks: aten.nonzero x2 (data-dependent shape)"
    )
    assert summary_line(report.summary()).endswith(
        "aten.nonzero x2 (data-dependent shape), aten.fft_fft x1 (no converter), "
        "aten.item x1 (data-dependent shape)"
    )


@pytest.mark.parametrize(
    ("make", "line"),
    [
        (Report, "no graphs captured"),
        (samples.empty_graph, "0 ops, 0 compiled (n/a), 0 clusters; no fallbacks"),
        (samples.all_fallback, "4 ops, 0 compiled (0.0%; 0.0% of FLOPs), 0 clusters; "
         "top fallbacks: pd_op.where x3 (no converter), pd_op.foo x1 (excluded by user)"),
        (samples.tf_report, "10 ops, 7 compiled (70.0%; 95.9% of FLOPs), 2 clusters; "
         "top fallbacks: StringSplit x2 (unsupported dtype), Where x1 (data-dependent shape)"),
    ],
)
def test_summary_line_edge_cases(make, line):
    assert summary_line(make().summary()) == line


def test_summary_line_counts_failed_clusters_and_partial_kernel_counts():
    merged = Report.merge([samples.torch_report(), samples.tf_report()])
    assert "3 clusters, 1+ kernels;" in summary_line(merged.summary())
    merged.graphs[1].mark_cluster_failed(0, ReasonCode.RUNTIME_ERROR, "boom")
    assert "2 clusters (+1 failed), 1+ kernels;" in summary_line(merged.summary())
    single = samples.torch_report()
    assert "1 cluster, 1 kernel;" in summary_line(single.summary())


def test_text_report_sections():
    text = render_text(Report.merge([samples.torch_report(), samples.tf_report()]))
    lines = text.splitlines()
    assert lines[0].startswith("16 ops, 12 compiled (75.0%")
    assert "runs:" in lines and "graphs:" in lines and "fallbacks by reason:" in lines
    assert "  forward [torch]: 6 ops, 5 compiled (83.3%), 1 cluster, 10 calls" in lines
    assert ("  unsupported dtype (unsupported_dtype): 2 - StringSplit x2" in lines)
    assert lines[-1] == ("compile: 0.750 s (3 misses, 6 hits); clusters ran 30 times, 1.500 s; "
                         "fallback ops 0.250 s")
    assert text.endswith("\n")


@pytest.mark.parametrize("make", ALL)
def test_every_renderer_handles_every_sample(make):
    report = make()
    assert render_text(report).startswith(summary_line(report.summary()))
    assert render_markdown(report).startswith("# DISC coverage report\n")
    assert render_html(report).startswith("<!DOCTYPE html>")


# ------------------------------------------------------------------ markdown


def _unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def test_markdown_escapes_hostile_names_and_keeps_tables_intact():
    md = render_markdown(samples.hostile())
    assert "<script>" not in md and "</table>" not in md and "<graph" not in md
    assert "&lt;script&gt;alert" in md and r"a\|b \`c\` \*d\*" in md
    table = []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table:  # every row of a table has as many cells as its header
            assert len({_unescaped_pipes(row) for row in table}) == 1, table
            table = []


def test_markdown_of_a_merged_report():
    md = render_markdown(Report.merge([samples.torch_report(), samples.tf_report()]))
    assert "| forward | torch | 6 | 5 (83.3%) | 1 | 1 | 10 |" in md
    assert "| serving\\_default | tensorflow | 10 | 7 (70.0%) | 2 | - | 10 |" in md
    assert "| data-dependent shape | `data_dependent_shape` | 2 |" in md
    assert "## Clusters" in md


def test_markdown_of_empty_reports_has_no_empty_tables():
    md = render_markdown(Report())
    assert md == "# DISC coverage report\n\n**no graphs captured**\n"
    assert "## Clusters" not in render_markdown(samples.all_fallback())


# ------------------------------------------------------------------ html


class Tags(HTMLParser):
    """Every tag and attribute, and the text, of an HTML document."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parse(page: str) -> Tags:
    parser = Tags()
    parser.feed(page)
    parser.close()
    return parser


ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "div", "b",
                "span", "table", "thead", "tbody", "tr", "th", "td", "code", "i", "svg", "g",
                "text", "rect", "input", "script"}


@pytest.mark.parametrize("make", ALL)
def test_html_is_self_contained(make):
    page = render_html(make())
    parsed = parse(page)
    assert {tag for tag, _ in parsed.tags} <= ALLOWED_TAGS
    assert [tag for tag, _ in parsed.tags].count("script") == 1
    for tag, attrs in parsed.tags:
        assert not {"src", "href", "action", "srcset"} & set(attrs), (tag, attrs)
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
    assert "://" not in page, "the page references a URL"
    assert "url(" not in page and "@import" not in page
    csp = [a for t, a in parsed.tags if a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0]["content"]
    assert 'document.body.dataset.rendered = "ok"' in page


def test_html_escapes_hostile_names():
    page = render_html(samples.hostile())
    parsed = parse(page)
    text = "".join(parsed.text)
    assert samples.HOSTILE_OP in text  # shown literally ...
    assert "</td><img src=x onerror=alert(1)>" in text
    assert "<graph & co>" in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; a|b" in page  # ... escaped
    assert "alert(" not in page.split("<script>")[1]  # our script carries no data


def test_html_sections_and_chart():
    page = render_html(samples.issue_example())
    for heading in ("Runs", "Op types: compiled vs fallback", "Graphs", "Fallback reasons",
                    "Clusters", "Fallback nodes (4)"):
        assert f"<h2>{heading}</h2>" in page
    svg = page[page.index("<svg"):page.index("</svg>")]
    assert svg.count("<g>") == 7  # one bar per op type
    assert f'fill="{COMPILED_COLOR}"' in svg and f'fill="{FALLBACK_COLOR}"' in svg
    assert "<title>aten.nonzero: 0 compiled, 2 fallback</title>" in svg
    assert "142 ops, 138 compiled (97.2%" in page


def test_html_for_empty_and_all_fallback_reports():
    empty = render_html(Report())
    assert "No ops captured." in empty and "No op fell back." in empty
    assert "No clusters." in empty and "<svg" not in empty
    fallback = render_html(samples.all_fallback())
    assert "No clusters." in fallback and "<h2>Fallback nodes (4)</h2>" in fallback
    assert f'fill="{FALLBACK_COLOR}"' in fallback


def test_html_chart_folds_the_long_tail_of_op_types():
    report = samples.all_fallback()
    g = report.graphs[0]
    g.nodes = [type(g.nodes[0])(f"n{i}", f"op{i:03d}", g.nodes[0].status,
                                reason=ReasonCode.NO_CONVERTER) for i in range(60)]
    page = render_html(report)
    svg = page[page.index("<svg"):page.index("</svg>")]
    assert svg.count("<g>") == MAX_CHART_ROWS + 1
    assert f"({60 - MAX_CHART_ROWS} more op types)" in svg
