"""Per-kernel time profiles on cluster records: schema, validation, collector, renderers, merge.

A profiled cluster says how long each of its steps (generated kernels, library calls, host
work) took; renderers then rank them, hottest first, by share of the cluster's time.
"""

from __future__ import annotations

import copy
import json
import re
from html.parser import HTMLParser

import pytest
import report_samples as samples
from test_report_model import DOCS
from test_report_render import ALLOWED_TAGS, parse

from disc_core.report import (
    KERNEL_KINDS,
    SCHEMA_VERSION,
    ClusterRecord,
    Collector,
    KernelTime,
    Report,
    ReportFormatError,
    ReportWriteWarning,
    render_html,
    render_markdown,
    render_text,
)
from disc_core.report.summary import KERNEL_ROWS, cluster_times, mean_us, step_ops

STEP = "graphs[0].clusters[0].profile[2]"


def two_clusters() -> Report:
    """tf_report with both clusters profiled: cluster 1 spends 1 ms in all, cluster 0 10 ms,
    so a share of the graph's time would differ from a share of the cluster's."""
    report = samples.tf_report()
    c0, c1 = report.graphs[0].clusters
    c0.profile = [KernelTime("kernel0", "kernel", ["add"], 4, 0.002),
                  KernelTime("host", "host", [], 4, 0.008)]
    c1.profile = [KernelTime("gemm0", "library", ["dot_general"], 4, 0.00075, "[N, K] x [K, M]"),
                  KernelTime("host", "host", [], 4, 0.00025)]
    return report


def render_all(report: Report) -> dict[str, str]:
    return {"text": render_text(report), "markdown": render_markdown(report),
            "html": render_html(report)}


# ------------------------------------------------------------------ schema


def test_profile_round_trips_through_json():
    report = samples.profiled()
    data = json.loads(report.to_json())
    steps = data["graphs"][0]["clusters"][0]["profile"]
    assert len(steps) == 12
    assert steps[-1] == {"name": "gemm0", "kind": "library", "ops": ["dot_general"],
                         "calls": 10, "seconds": 0.05, "shape": "[s0, 64] x [64, 32]"}
    assert "shape" not in steps[10]  # host: no shape, omitted like every optional field
    back = Report.from_json(report.to_json())
    assert back == report
    assert back.graphs[0].clusters[0].profile[-1] == KernelTime(
        "gemm0", "library", ["dot_general"], 10, 0.05, shape="[s0, 64] x [64, 32]")
    assert data["schema_version"] == 1 < SCHEMA_VERSION  # additive optional field


def test_not_profiled_and_profiled_without_steps_stay_apart():
    """None (profiling off) is omitted; [] (on, nothing yet) is written and read back as []."""
    cluster = ClusterRecord(id=0, nodes=["n0"])
    assert "profile" not in cluster.to_dict()
    assert ClusterRecord.from_dict(cluster.to_dict()).profile is None
    cluster.profile = []
    assert cluster.to_dict()["profile"] == []
    assert ClusterRecord.from_dict(cluster.to_dict()).profile == []
    data = cluster.to_dict()
    data["profile"] = None
    assert ClusterRecord.from_dict(data).profile is None


def test_readers_take_new_step_kinds_and_ignore_unknown_step_fields():
    assert KERNEL_KINDS == ("kernel", "library", "scatter", "scan", "host")
    data = samples.profiled().to_dict()
    step = data["graphs"][0]["clusters"][0]["profile"][0]
    step["kind"], step["future"] = "copy", {"x": 1}
    read = Report.from_dict(data).graphs[0].clusters[0].profile[0]
    assert read.kind == "copy" and read.name == "kernel0"


def _set(path: str, value: object):
    def edit(step: dict) -> None:
        step[path] = value
    return edit


def _drop(key: str):
    def edit(step: dict) -> None:
        del step[key]
    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_set("seconds", "0.1"), f"{STEP}.seconds: expected a number, got a string"),
        (_set("seconds", -0.5), f"{STEP}.seconds: expected a finite number >= 0, got -0.5"),
        (_set("seconds", True), f"{STEP}.seconds: expected a number, got a boolean"),
        (_drop("seconds"), f"{STEP}.seconds: required field is missing"),
        (_set("calls", -1), f"{STEP}.calls: expected an integer >= 0, got -1"),
        (_set("calls", 2.5), f"{STEP}.calls: expected an integer, got a number"),
        (_drop("calls"), f"{STEP}.calls: required field is missing"),
        (_set("name", 7), f"{STEP}.name: expected a string, got a number"),
        (_drop("name"), f"{STEP}.name: required field is missing"),
        (_set("kind", ["kernel"]), f"{STEP}.kind: expected a string, got an array"),
        (_set("ops", "add"), f"{STEP}.ops: expected an array, got a string"),
        (_set("ops", ["add", 3]), f"{STEP}.ops[1]: expected a string"),
        (_drop("ops"), f"{STEP}.ops: required field is missing"),
        (_set("shape", [3, 4]), f"{STEP}.shape: expected a string, got an array"),
    ],
)
def test_bad_steps_are_named_by_their_path(edit, message):
    data = samples.profiled().to_dict()
    edit(data["graphs"][0]["clusters"][0]["profile"][2])
    with pytest.raises(ReportFormatError) as info:
        Report.from_dict(data)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        ({"kernel0": 1.0}, "graphs[0].clusters[0].profile: expected an array, got an object"),
        ([1], "graphs[0].clusters[0].profile[0]: expected an object, got a number"),
    ],
)
def test_a_profile_that_is_no_list_of_steps_is_refused(profile, message):
    data = samples.profiled().to_dict()
    data["graphs"][0]["clusters"][0]["profile"] = profile
    with pytest.raises(ReportFormatError) as info:
        Report.from_dict(data)
    assert str(info.value) == message


def test_schema_doc_documents_the_profile():
    text = DOCS.read_text()
    assert "| `profile` | array of KernelTime, optional |" in text
    assert "## KernelTime" in text and "DISC_PROFILE=1" in text
    for key in KernelTime("k", "kernel", [], 0, 0.0, "[1]").to_dict():
        assert f"| `{key}` |" in text.split("## KernelTime")[1].split("\n## ")[0], key
    for kind in KERNEL_KINDS:
        assert f'`"{kind}"`' in text, kind


# ------------------------------------------------------------------ collector and merge


def test_cluster_profile_from_a_flush_hook_reaches_the_snapshot():
    c = Collector()
    rec = c.add_graph(samples.torch_report().graphs[0], framework="torch")
    native = {"kernel0": 0.0}  # what a native module would have summed so far

    def flush() -> None:
        rec.cluster_profile(0, [KernelTime("kernel0", "kernel", ["add"], 3, native["kernel0"]),
                                KernelTime("host", "host", [], 3, 0.001)])

    assert c.report().graphs[0].clusters[0].profile is None  # no hook yet: not profiled
    c.add_flush_hook(flush)
    native["kernel0"] = 0.25
    first = c.report()
    assert [s.name for s in first.graphs[0].clusters[0].profile] == ["kernel0", "host"]
    assert first.graphs[0].clusters[0].profile[0].seconds == 0.25
    native["kernel0"] = 0.5
    second = c.report()  # replaced, not appended
    assert [s.seconds for s in second.graphs[0].clusters[0].profile] == [0.5, 0.001]
    assert first.graphs[0].clusters[0].profile[0].seconds == 0.25  # snapshots are copies
    assert Report.from_json(second.to_json()) == second


def test_cluster_profile_keeps_its_own_list_and_refuses_raw_dicts():
    c = Collector()
    rec = c.add_graph(samples.torch_report().graphs[0], framework="torch")
    steps = [KernelTime("kernel0", "kernel", ["add"], 1, 0.1)]
    rec.cluster_profile(0, steps)
    steps.append(KernelTime("host", "host", [], 1, 0.1))
    assert len(c.report().graphs[0].clusters[0].profile) == 1
    with pytest.raises(TypeError, match=r"entries\[0\] is a dict, not a KernelTime"):
        rec.cluster_profile(0, [{"name": "kernel0"}])  # type: ignore[list-item]
    with pytest.raises(KeyError):
        rec.cluster_profile(9, [])


def test_a_failing_profile_hook_only_warns():
    c = Collector()
    rec = c.add_graph(samples.torch_report().graphs[0], framework="torch")
    c.add_flush_hook(lambda: rec.cluster_profile(0, [{"bad": 1}]))  # type: ignore[list-item]
    with pytest.warns(ReportWriteWarning, match="TypeError"):
        report = c.report()
    assert report.graphs[0].clusters[0].profile is None


def test_merge_keeps_profiles_as_copies():
    source = samples.profiled()
    merged = Report.merge([source, two_clusters()])
    assert merged.graphs[0].clusters[0].profile == source.graphs[0].clusters[0].profile
    assert [s.name for s in merged.graphs[1].clusters[1].profile] == ["gemm0", "host"]
    merged.graphs[0].clusters[0].profile[0].seconds = 9.0
    assert source.graphs[0].clusters[0].profile[0].seconds == 0.001
    assert Report.from_json(merged.to_json()) == merged
    assert "gemm0" in render_text(merged) and "kernel0" in render_text(merged)


# ------------------------------------------------------------------ shared numbers


def test_cluster_times_rank_fold_and_share_per_cluster():
    [times] = cluster_times(samples.profiled().graphs[0])
    assert KERNEL_ROWS == 10 and len(times.steps) == 10
    assert [s.name for s in times.steps[:3]] == ["gemm0", "kernel9", "kernel8"]
    assert times.more == 2 and times.more_seconds == pytest.approx(0.0015)  # kernel0 + host
    assert times.seconds == pytest.approx(0.1055)
    assert times.share(0.05) == "47.4%"
    c0, c1 = cluster_times(two_clusters().graphs[0])
    assert (c0.cluster, c0.share(c0.steps[0].seconds)) == (0, "80.0%")  # host, of 10 ms
    assert (c1.cluster, c1.share(c1.steps[0].seconds)) == (1, "75.0%")  # gemm0, of 1 ms


def test_mean_and_ops_abbreviations():
    assert mean_us(KernelTime("k", "kernel", [], 4, 0.002)) == pytest.approx(500.0)
    assert mean_us(KernelTime("k", "kernel", [], 0, 0.0)) is None
    assert step_ops(KernelTime("host", "host", [], 1, 0.1)) == "-"
    assert step_ops(KernelTime("k", "kernel", ["a", "b", "c"], 1, 0.1)) == "a, b, c"
    many = KernelTime("k", "kernel", [f"op{i}" for i in range(7)], 1, 0.1)
    assert step_ops(many) == "op0, op1, op2, +4 more"
    long = KernelTime("k", "kernel", ["x" * 30, "y" * 30, "z"], 1, 0.1)
    assert step_ops(long) == "x" * 30 + ", +2 more"
    huge = step_ops(KernelTime("k", "kernel", ["w" * 100], 1, 0.1))
    assert len(huge) == 40 and huge.endswith("\u2026")


def test_clusters_without_steps_show_nothing():
    report = samples.tf_report()
    report.graphs[0].clusters[0].profile = []
    assert cluster_times(report.graphs[0]) == []
    assert render_all(report) == render_all(samples.tf_report())


# ------------------------------------------------------------------ renderers


@pytest.mark.parametrize(
    "make",
    [samples.issue_example, samples.torch_report, samples.tf_report, samples.all_fallback,
     samples.empty_graph, samples.hostile, Report],
)
def test_no_kernel_time_section_without_profiles(make):
    for name, text in render_all(make()).items():
        assert "kernel time" not in text.lower(), name
        assert "\u00b5s" not in text and "us/call" not in text, name


def test_text_lists_the_hottest_step_first_with_its_share():
    text = render_text(samples.profiled())
    lines = text.splitlines()
    start = lines.index("Kernel time, forward [torch] "
                        "(hottest steps first; share of the cluster's profiled time):")
    header, *rows = lines[start + 1:]
    assert header.split() == ["cluster", "step", "kind", "ops", "shape", "calls", "total", "ms",
                              "us/call", "share"]
    assert rows[0].split() == ["0", "gemm0", "library", "dot_general", "[s0,", "64]", "x",
                               "[64,", "32]", "10", "50.000", "5000.0", "47.4%"]
    assert rows[1].split()[:2] == ["0", "kernel9"] and rows[1].endswith(" 9.5%")
    assert "op_0, op_1, op_2, +6 more" in rows[7]
    assert rows[-1].split() == ["0", "+2", "more", "steps", "1.500", "1.4%"]
    assert len(rows) == 11 and text.endswith("1.4%\n")
    assert len({len(line) for line in [header, rows[0], rows[5]]}) == 1  # aligned columns


def test_text_shares_are_of_each_cluster():
    text = render_text(two_clusters())
    rows = [line.split() for line in text.splitlines() if line.startswith("  0 ")
            or line.startswith("  1 ")]
    assert [(r[0], r[1], r[-1]) for r in rows] == [
        ("0", "host", "80.0%"), ("0", "kernel0", "20.0%"),
        ("1", "gemm0", "75.0%"), ("1", "host", "25.0%"),
    ]
    assert rows[2][-3:] == ["0.750", "187.5", "75.0%"]  # ms, us per call, share


def _unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def test_markdown_kernel_time_table():
    md = render_markdown(samples.profiled())
    section = md[md.index("## Kernel time"):]
    assert "**forward** (torch)" in section
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert rows[0] == ("| cluster | step | kind | ops | shape | calls | total (ms) | "
                       "mean (\u00b5s/call) | share |")
    assert rows[2] == (r"| 0 | gemm0 | library | dot\_general | \[s0, 64\] x \[64, 32\] | 10 | "
                       "50.000 | 5000.0 | 47.4% |")
    assert rows[3].startswith("| 0 | kernel9 |") and rows[3].endswith("| 9.5% |")
    assert r"| &lt;s0&gt; &amp; \|s1\| |" in section  # hostile shape escaped, table intact
    assert rows[-1] == "| 0 | +2 more steps |  |  |  |  | 1.500 |  | 1.4% |"
    assert len({_unescaped_pipes(row) for row in rows}) == 1


class Cells(HTMLParser):
    """The text of each cell, row by row, of an HTML fragment."""

    def __init__(self, fragment: str) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.feed(fragment)
        self.close()

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.rows[-1].append("")

    def handle_data(self, data):
        if self.rows and self.rows[-1]:
            self.rows[-1][-1] += data


def test_html_kernel_time_table():
    page = render_html(samples.profiled())
    assert "<h2>Kernel time</h2>" in page
    assert page.index("<h2>Clusters</h2>") < page.index("<h2>Kernel time</h2>")
    section = page[page.index("<h2>Kernel time</h2>"):page.index("<h2>Fallback nodes")]
    cells = [[cell.strip() for cell in row] for row in Cells(section).rows]
    assert cells[0] == ["cluster", "step", "kind", "ops", "shape", "calls", "total (ms)",
                        "mean (\u00b5s/call)", "share"]
    assert cells[1] == ["0", "gemm0", "library", "dot_general", "[s0, 64] x [64, 32]", "10",
                        "50.000", "5000.0", "47.4%"]
    assert cells[2][1] == "kernel9" and cells[2][-1] == "9.5%"
    assert cells[-1] == ["0", "+2 more steps", "1.500", "", "1.4%"]  # colspan, empty mean
    assert "<code>&lt;s0&gt; &amp; |s1|</code>" in section
    assert 'title="op_0, op_1, op_2, op_3, op_4, op_5, op_6, op_7, op_8"' in section
    assert 'class="sortable"' not in section  # a cluster's "+N more" row stays with it


def test_html_with_hostile_profile_stays_self_contained():
    report = samples.hostile()
    report.graphs[0].clusters[0].profile = [KernelTime(
        samples.HOSTILE_OP, samples.HOSTILE_OP, [samples.HOSTILE_OP], 1, 0.1, samples.HOSTILE_OP)]
    page = render_html(report)
    parsed = parse(page)
    assert {tag for tag, _ in parsed.tags} <= ALLOWED_TAGS
    assert [tag for tag, _ in parsed.tags].count("script") == 1
    for tag, attrs in parsed.tags:
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
    assert "".join(parsed.text).count(samples.HOSTILE_OP) >= 4  # name, kind, shape, + node
    md = render_markdown(report)
    assert "<script>" not in md
    rows = [line for line in md[md.index("## Kernel time"):].splitlines() if line.startswith("|")]
    assert len({_unescaped_pipes(row) for row in rows}) == 1


def test_profiles_do_not_change_the_other_sections():
    plain, profiled = render_all(samples.torch_report()), render_all(samples.profiled())
    assert profiled["text"].startswith(plain["text"])
    assert profiled["markdown"].startswith(plain["markdown"].rstrip("\n"))
    unprofiled = copy.deepcopy(samples.profiled())
    unprofiled.graphs[0].clusters[0].profile = None
    assert render_all(unprofiled) == plain
