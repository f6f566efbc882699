"""Reports of a distributed job: each rank's file (``{rank}``), its rank in the run record,
and the merged report's compiles and cache hits per cluster key across ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import report_samples as samples

from disc_core.report import (
    Collector,
    Report,
    load,
    render_html,
    render_markdown,
    render_text,
    write_report,
)
from disc_core.report.ranks import RankInfo, process_rank, rank_label
from disc_core.report.sharing import key_compiles, sharing_line

TESTS = Path(__file__).parent
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "PADDLE_TRAINER_ID",
                 "PADDLE_TRAINERS_NUM", "TF_CONFIG")


def tf_config(kind: str, index: int, *, chief: bool) -> str:
    cluster = {"worker": ["h:1", "h:2", "h:3"], "ps": ["h:9"]}
    if chief:
        cluster["chief"] = ["h:0"]
    return json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})


@pytest.mark.parametrize("env, expected", [
    ({}, None),
    ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, RankInfo(3, 4, "3")),
    ({"RANK": "0"}, RankInfo(0, None, "0")),
    ({"PADDLE_TRAINER_ID": "2", "PADDLE_TRAINERS_NUM": "3"}, RankInfo(2, 3, "2")),
    ({"TF_CONFIG": tf_config("worker", 1, chief=False)}, RankInfo(1, 3, "1")),
    # the chief is rank 0 and the workers follow it (tf.distribute's task numbering)
    ({"TF_CONFIG": tf_config("worker", 1, chief=True)}, RankInfo(2, 4, "2")),
    ({"TF_CONFIG": tf_config("chief", 0, chief=True)}, RankInfo(0, 4, "0")),
    ({"TF_CONFIG": tf_config("ps", 0, chief=True)}, RankInfo(None, 4, "ps-0")),
    ({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, RankInfo(1, 2, "1")),
    # a value that does not parse is no rank: the next launcher's variable is asked
    ({"RANK": "x", "PADDLE_TRAINER_ID": "1"}, RankInfo(1, None, "1")),
    ({"TF_CONFIG": "{not json"}, None),
    ({"RANK": "-1"}, None),
])
def test_process_rank_from_each_launchers_environment(env, expected):
    assert process_rank(env) == expected
    assert rank_label(env) == ("0" if expected is None else expected.label)


@pytest.fixture
def no_launcher(monkeypatch):
    for var in LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_rank_in_the_path_and_in_the_run_record(tmp_path, no_launcher):
    no_launcher.setenv("RANK", "1")
    no_launcher.setenv("WORLD_SIZE", "2")
    c = Collector()
    c.add_graph(samples.torch_report().graphs[0], framework="torch")
    written = c.write(tmp_path / "r-{rank}-{pid}.json")
    assert written == tmp_path / f"r-1-{os.getpid()}.json"
    run = load(written).runs[0]
    assert (run.rank, run.world_size) == (1, 2)
    assert "rank 1 of 2" in render_text(load(written))


def test_outside_a_job_rank_is_0_in_the_path_and_absent_from_the_file(tmp_path, no_launcher):
    c = Collector()
    c.add_graph(samples.torch_report().graphs[0], framework="torch")
    written = c.write(tmp_path / "r-{rank}.json")
    assert written == tmp_path / "r-0.json"
    data = json.loads(written.read_text())
    assert "rank" not in data["runs"][0] and "world_size" not in data["runs"][0]
    assert load(written).runs[0].rank is None


def test_rank_is_an_optional_field_of_the_same_schema_version(tmp_path):
    report = samples.torch_report()
    before = report.written_version()
    report.runs[0].rank, report.runs[0].world_size = 3, 4
    assert report.written_version() == before  # nothing an older reader would misread
    write_report(report, tmp_path / "r.json")
    assert load(tmp_path / "r.json") == report
    data = json.loads((tmp_path / "r.json").read_text())
    del data["runs"][0]["rank"], data["runs"][0]["world_size"]  # a file from before ranks
    old = Report.from_dict(data)
    assert old.runs[0].rank is None and old.runs[0].world_size is None
    data["runs"][0]["rank"] = -1
    with pytest.raises(ValueError, match=r"runs\[0\]\.rank"):
        Report.from_dict(data)


def rank_reports(world: int, *, compiled_by: list[int] | None = None) -> list[Report]:
    """What the ranks of a job write: two clusters, each compiled by one rank (by default
    rank 0 compiles the first, the last rank the second) and loaded by the others."""
    compiled_by = compiled_by if compiled_by is not None else [0, world - 1]
    reports = []
    for rank in range(world):
        report = samples.tf_report()  # two clusters
        run = report.runs[0]
        run.id, run.rank, run.world_size, run.pid = f"r{rank}", rank, world, 100 + rank
        report.graphs[0].run = run.id
        for cid, cluster in enumerate(report.graphs[0].clusters):
            cluster.key = f"{cid:02d}" + "ab" * 31
            compiled = rank == compiled_by[cid]
            cluster.cache_misses, cluster.cache_hits = int(compiled), int(not compiled)
        reports.append(report)
    return reports


@pytest.mark.parametrize("world", [2, 4])
def test_merged_ranks_compile_each_key_once(world):
    merged = Report.merge(rank_reports(world))
    items = key_compiles(merged)
    assert [(k.compiles, k.cache_hits, len(k.runs)) for k in items] == [(1, world - 1, world)] * 2
    assert items[0].compiled_by == ("rank 0",)
    assert items[1].compiled_by == (f"rank {world - 1}",)
    line = sharing_line(items, world)
    assert line == (f"2 cluster keys over {world} runs: 2 compiles, {2 * (world - 1)} cache "
                    "hits; each key compiled once")
    text = render_text(merged)
    assert "across runs (per compile-cache key): " + line in text
    rows = [ln.split() for ln in text.splitlines() if ln.startswith("  00abab")]
    assert rows == [["00ababababab", "1", str(world - 1), str(world), "rank", "0"]]


def test_markdown_lists_keys_across_runs_too():
    md = render_markdown(Report.merge(rank_reports(4)))
    assert "## Across runs (per compile-cache key)" in md
    assert "| `00ababababab` | 1 | 3 | 4 | rank 0 |" in md
    assert "Across runs" not in render_markdown(rank_reports(1)[0])


def test_html_lists_keys_across_runs_too():
    page = render_html(Report.merge(rank_reports(4)))
    assert "<h2>Across runs (per compile-cache key)</h2>" in page
    assert ('<p id="sharing">2 cluster keys over 4 runs: 2 compiles, 6 cache hits; each key '
            "compiled once</p>") in page
    row = ('<code>00ababababab</code></td><td class="n" data-v="1">1</td>'
           '<td class="n" data-v="3">3</td><td class="n" data-v="4">4</td><td>rank 0</td>')
    assert row in page
    assert "Across runs" not in render_html(rank_reports(1)[0])


def test_a_key_compiled_by_two_ranks_is_called_out():
    merged = Report.merge(rank_reports(2, compiled_by=[0, 0]))
    merged.graphs[1].clusters[1].cache_misses = 1  # rank 1 built the second key too
    merged.graphs[1].clusters[1].cache_hits = 0
    items = key_compiles(merged)
    assert [(k.compiles, k.compiled_by) for k in items] == [
        (1, ("rank 0",)), (2, ("rank 0", "rank 1"))]
    assert sharing_line(items, 2).endswith("; 1 key compiled more than once")


def test_a_warm_cache_says_keys_were_only_loaded():
    reports = rank_reports(2)
    for report in reports:
        for cluster in report.graphs[0].clusters:
            cluster.cache_misses, cluster.cache_hits = 0, 1
    assert sharing_line(key_compiles(Report.merge(reports)), 2).endswith(
        "; 2 keys only loaded from the cache")


def test_a_key_with_no_lookup_recorded_is_neither_compiled_nor_loaded():
    reports = rank_reports(2)
    for report in reports:  # the second key was left out (DISC_BISECT_CLUSTERS)
        report.graphs[0].clusters[1].cache_misses = report.graphs[0].clusters[1].cache_hits = 0
    line = sharing_line(key_compiles(Report.merge(reports)), 2)
    assert line == ("2 cluster keys over 2 runs: 1 compile, 1 cache hit; 1 key with no lookup "
                    "recorded")


def test_one_run_has_no_across_runs_section():
    report = rank_reports(1)[0]
    assert "across runs" not in render_text(report)


def test_ranks_sharing_a_cache_merge_to_one_compile_per_key(tmp_path, no_launcher):
    """Four processes with a launcher's RANK share one compile cache and write
    ``DISC_REPORT=.../r-{rank}.json``; ``disc report merge`` shows each key compiled once
    and loaded by the three others."""
    go = tmp_path / "go"
    env = {**os.environ, "WORLD_SIZE": "4", "DISC_REPORT": str(tmp_path / "r-{rank}.json")}
    procs = [subprocess.Popen([sys.executable, str(TESTS / "rank_worker.py"),
                               str(tmp_path / "cache"), str(go)],
                              env={**env, "RANK": str(rank)}, stderr=subprocess.PIPE, text=True)
             for rank in range(4)]
    go.touch()
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    files = [tmp_path / f"r-{rank}.json" for rank in range(4)]
    assert [load(f).runs[0].rank for f in files] == [0, 1, 2, 3]
    out = tmp_path / "all.json"
    result = subprocess.run([sys.executable, "-m", "disc_core.cli", "report", "merge",
                             *map(str, files), "-o", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    items = key_compiles(load(out))
    assert [(k.compiles, k.cache_hits, len(k.runs), len(k.compiled_by)) for k in items] == [
        (1, 3, 4, 1)] * 2
    assert ("across runs (per compile-cache key): 2 cluster keys over 4 runs: 2 compiles, "
            "6 cache hits; each key compiled once") in result.stdout
