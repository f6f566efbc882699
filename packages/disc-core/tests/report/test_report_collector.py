"""The process-wide collector: cheap thread-safe recording, DISC_REPORT at exit, safe writes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest
import report_samples as samples

import disc_core.report as report_api
from disc_core.report import (
    Collector,
    GraphReport,
    ReasonCode,
    Report,
    ReportWriteWarning,
    load,
    write_report,
)


def graph(name: str = "g") -> GraphReport:
    return samples.torch_report().graphs[0] if name == "g" else samples.tf_report().graphs[0]


def test_runs_are_one_per_framework_and_graphs_get_their_run():
    c = Collector()
    a = c.add_graph(graph(), framework="torch", framework_version="2.13.0").graph
    b = c.add_graph(graph(), framework="torch", framework_version="2.13.0").graph
    t = c.add_graph(graph("tf"), framework="tensorflow", framework_version="2.21.0").graph
    report = c.report()
    report.validate()
    assert [r.framework for r in report.runs] == ["torch", "tensorflow"]
    assert a.run == b.run != t.run
    run = report.runs[0]
    assert run.framework_version == "2.13.0" and run.pid == os.getpid()
    assert run.disc_versions["disc-core"] and run.started_at.endswith("Z")
    only_tf = c.report("tensorflow")
    assert [g.name for g in only_tf.graphs] == ["serving_default"]
    assert [r.framework for r in only_tf.runs] == ["tensorflow"]
    nothing = c.report("paddle")  # still names the process and versions
    assert nothing.graphs == [] and nothing.runs[0].framework == "paddle"


def test_snapshots_do_not_change_when_recording_goes_on():
    c = Collector()
    rec = c.add_graph(graph(), framework="torch")
    before = c.report()
    rec.cluster_call(0, 1.0)
    rec.graph_call(0.5)
    after = c.report()
    assert before.graphs[0].clusters[0].calls == 10
    assert after.graphs[0].clusters[0].calls == 11
    assert after.graphs[0].clusters[0].seconds == pytest.approx(1.5)
    assert after.graphs[0].calls == 11 and after.graphs[0].fallback_seconds == pytest.approx(0.625)


def test_flush_hooks_bring_pending_counts_into_every_snapshot(tmp_path):
    """A bridge that counts cluster calls natively registers a hook; every snapshot and
    write runs it first, once per hook, and a failing hook only warns."""
    c = Collector()
    rec = c.add_graph(graph(), framework="torch")
    pending = [3]

    def flush():
        for _ in range(pending[0]):
            rec.cluster_call(0, 0.1)
        pending[0] = 0

    c.add_flush_hook(flush)
    c.add_flush_hook(flush)  # registered once
    assert c.report().graphs[0].clusters[0].calls == 13
    pending[0] = 2
    path = c.write(tmp_path / "r.json")
    assert load(path).graphs[0].clusters[0].calls == 15
    assert c.report().graphs[0].clusters[0].calls == 15

    def broken():
        raise RuntimeError("native counters gone")

    c.add_flush_hook(broken)
    with pytest.warns(ReportWriteWarning, match="native counters gone"):
        assert c.report().graphs[0].clusters[0].calls == 15


def test_recorder_counts_compiles_and_cache_hits():
    g = graph()
    g.clusters[0].cache_hits = g.clusters[0].cache_misses = 0
    g.clusters[0].compile_seconds = g.clusters[0].kernels = None
    rec = Collector().add_graph(g, framework="torch")
    rec.cluster_compiled(0, seconds=2.0, kernels=4, fusions=3, library_calls=2)
    rec.cluster_compiled(0, seconds=0.5, cache_hit=True)
    c = rec.graph.clusters[0]
    assert (c.cache_misses, c.cache_hits, c.compile_seconds, c.kernels, c.fusions,
            c.library_calls) == (1, 1, 2.5, 4, 3, 2)
    with pytest.raises(KeyError):
        rec.cluster_call(99)


def test_recording_is_thread_safe():
    c = Collector()
    recs = [c.add_graph(graph(), framework="torch") for _ in range(2)]
    threads_n, calls_n = 8, 3000
    barrier = threading.Barrier(threads_n + 1)

    def work(i: int) -> None:
        rec = recs[i % 2]
        barrier.wait()
        for _ in range(calls_n):
            rec.cluster_call(0, 1.0)
            rec.graph_call(1.0)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(threads_n)]
    for t in threads:
        t.start()
    barrier.wait()
    for _ in range(30):  # snapshots and new graphs while the threads record
        c.report().validate()
        c.add_graph(graph(), framework="torch")
    for t in threads:
        t.join()
    per_graph = threads_n // 2 * calls_n
    for rec in recs:
        assert rec.graph.clusters[0].calls == 10 + per_graph
        assert rec.graph.clusters[0].seconds == 0.5 + per_graph
        assert rec.graph.calls == 10 + per_graph


def test_tallies_count_per_thread_and_every_report_brings_them_in():
    """A bridge's per-call path counts into tallies (per thread, no lock): reports read
    while threads count see totals that only grow, the final one every call exactly
    once, and a graph's tally feeds its calls and fallback time."""
    c = Collector()
    rec = c.add_graph(graph(), framework="torch")
    base_calls, base_seconds = rec.graph.clusters[0].calls, rec.graph.clusters[0].seconds
    graph_calls, graph_fallback = rec.graph.calls, rec.graph.fallback_seconds or 0.0
    cluster, whole = rec.cluster_tally(0), rec.graph_tally()
    threads_n, calls_n = 6, 4000
    barrier = threading.Barrier(threads_n + 1)

    def work() -> None:
        barrier.wait()
        for _ in range(calls_n):
            for tally, seconds in ((cluster, 0.5), (whole, 0.25)):
                try:
                    cell = tally.local.cell
                except AttributeError:
                    cell = tally.cell()
                cell[0] += 1
                cell[1] += seconds

    threads = [threading.Thread(target=work) for _ in range(threads_n)]
    for t in threads:
        t.start()
    barrier.wait()
    seen = []
    for _ in range(20):
        seen.append(c.report().graphs[0].clusters[0].calls)
    for t in threads:
        t.join()
    assert seen == sorted(seen)
    final = c.report().graphs[0]
    total = threads_n * calls_n
    assert final.clusters[0].calls == base_calls + total
    assert final.clusters[0].seconds == pytest.approx((base_seconds or 0) + 0.5 * total)
    assert final.calls == graph_calls + total
    assert final.fallback_seconds == pytest.approx(graph_fallback + 0.25 * total)
    assert c.report().graphs[0].clusters[0].calls == base_calls + total  # drained once
    with pytest.raises(KeyError):
        rec.cluster_tally(99)


def test_recording_a_call_is_cheap_and_touches_no_file(tmp_path, monkeypatch):
    c = Collector(tmp_path / "r.json")
    rec = c.add_graph(graph(), framework="torch")
    monkeypatch.setattr("disc_core.report.collector.write_report",
                        lambda *a: pytest.fail("file written on the hot path"))
    n = 100_000
    t0 = time.perf_counter()
    for _ in range(n):
        rec.cluster_call(0, 1e-6)
    per_call = (time.perf_counter() - t0) / n
    assert per_call < 20e-6, f"{per_call * 1e6:.2f} us per recorded call"
    assert list(tmp_path.iterdir()) == []


def test_write_is_atomic_and_loads_back(tmp_path):
    c = Collector()
    c.add_graph(graph(), framework="torch")
    assert c.write() is None  # no path configured: nothing to do
    target = tmp_path / "report.json"
    assert c.write(target) == target
    assert load(target) == c.report()
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temp file left
    pid = c.write(tmp_path / "r-{pid}.json")
    assert pid == tmp_path / f"r-{os.getpid()}.json" and pid.exists()


def test_write_report_cleans_up_when_it_fails(tmp_path, monkeypatch):
    def boom(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_report(samples.torch_report(), tmp_path / "x.json")
    assert list(tmp_path.iterdir()) == []


def test_write_errors_warn_once_and_never_raise(tmp_path):
    c = Collector()
    c.add_graph(graph(), framework="torch")
    bad = tmp_path / "missing-dir" / "r.json"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert c.write(bad) is None
        assert c.write(bad) is None
        assert c.write(tmp_path) is None  # a directory
    assert len(caught) == 1
    assert caught[0].category is ReportWriteWarning
    assert f"could not write its coverage report to {bad}" in str(caught[0].message)


@pytest.fixture
def process_collector():
    c = report_api.get_collector()
    path = c.path
    c.clear()
    yield c
    c.clear()
    c.configure(path)


def test_module_level_api_uses_the_process_collector(process_collector, tmp_path):
    process_collector.add_graph(graph(), framework="torch")
    assert [g.name for g in report_api.current().graphs] == ["forward"]
    assert report_api.current("tensorflow").graphs == []
    assert report_api.write(tmp_path / "now.json") == tmp_path / "now.json"
    assert load(tmp_path / "now.json").graphs[0].name == "forward"


SCRIPT = textwrap.dedent(
    """
    import sys
    from disc_core.report import get_collector
    import report_samples as samples

    g = samples.torch_report().graphs[0]
    rec = get_collector().add_graph(g, framework="torch", framework_version="2.13.0")
    rec.cluster_failed(0, samples.ReasonCode.RUNTIME_ERROR, "kernel crashed")
    if sys.argv[1] == "exit3":
        sys.exit(3)
    if sys.argv[1] == "raise":
        raise RuntimeError("user bug")
    print("done")
    """
)


def run_script(tmp_path, report_path: str, mode: str = "ok") -> subprocess.CompletedProcess:
    env = dict(os.environ, DISC_REPORT=report_path,
               PYTHONPATH=os.pathsep.join([os.path.dirname(__file__),
                                           os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)


@pytest.mark.parametrize(("mode", "code"), [("ok", 0), ("exit3", 3), ("raise", 1)])
def test_disc_report_is_written_at_exit(tmp_path, mode, code):
    result = run_script(tmp_path, str(tmp_path / "out-{pid}.json"), mode)
    assert result.returncode == code, result.stderr
    (written,) = tmp_path.glob("out-*.json")
    assert written.name != "out-{pid}.json"
    report = load(written)
    assert report.runs[0].framework == "torch"
    assert report.graphs[0].nodes[0].reason is ReasonCode.RUNTIME_ERROR
    assert "ReportWriteWarning" not in result.stderr


def test_unwritable_disc_report_only_warns(tmp_path):
    result = run_script(tmp_path, str(tmp_path / "no" / "such" / "dir" / "r.json"))
    assert result.returncode == 0
    assert result.stdout == "done\n"
    assert "ReportWriteWarning: DISC could not write its coverage report" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_empty_process_still_writes_a_report(tmp_path):
    env = dict(os.environ, DISC_REPORT=str(tmp_path / "r.json"))
    subprocess.run([sys.executable, "-c", "import disc_core.report"], env=env, check=True,
                   timeout=120)
    report = load(tmp_path / "r.json")
    assert report.graphs == [] and len(report.runs) == 1
    assert report == Report(runs=report.runs)
