"""Paddle data parallel with DISC: a 2-rank ``paddle.distributed.launch`` job on CPU (gloo).

One job on a cold, shared ``DISC_CACHE_DIR`` (``paddle_dp_worker.py ... dp``): a model
wrapped as ``disc_paddle.compile(paddle.DataParallel(model))`` trains for 6 steps on
global batches of varying size, each rank taking half; Paddle all-reduces the gradients.
The reference is the same training in one process on each whole global batch, in Paddle
alone (``... single``). Checked:

* every step's loss (the mean of the ranks' losses), every parameter's gradient and the
  final parameters equal the single process's: the all-reduce happened, DISC's forward
  and backward compute what Paddle does;
* the ranks end identical (same all-reduced gradients);
* a DISC-compiled function with ``paddle.distributed.all_reduce`` between two computations
  returns the mean over the ranks (the collective stayed in Paddle and ran in order) and is
  reported as Paddle's by design;
* one compilation per cluster across the job: each cluster key compiled by one rank and a
  disk-cache hit on the other (per-rank reports, ``DISC_REPORT`` with ``{pid}``), and the
  launch-op library built once.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from ranks import JobFailed, child_env, free_port, run_job

WORKER = Path(__file__).with_name("paddle_dp_worker.py")
RANKS = 2
STEPS = 6  # len(paddle_dp_worker.GLOBAL_BATCHES)
#: a cold job on 2 shared cores: Paddle's start (~5 s a rank), the launch-op library's
#: C++ build (~25-40 s, once), the clusters' compilations, 6 steps
JOB_TIMEOUT_S = 300


def _worker_logs(log_dir: Path) -> str:
    parts = []
    for f in sorted(log_dir.glob("workerlog.*")):
        parts.append(f"--- {f.name}\n...{f.read_text(errors='replace')[-3000:]}")
    return "\n".join(parts)


def _load(out: Path, ranks: int) -> list[tuple[dict, dict]]:
    found = []
    for r in range(ranks):
        with np.load(out / f"arrays-{r}.npz") as arrays:
            found.append((json.loads((out / f"result-{r}.json").read_text()), dict(arrays)))
    return found


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("paddle-dp")
    cache, dp, single = base / "cache", base / "dp", base / "single"
    dp.mkdir()
    single.mkdir()
    env = child_env({"DISC_CACHE_DIR": str(cache),  # cold, shared by the ranks
                     "DISC_REPORT": str(dp / "report-{pid}.json")})
    launcher = [sys.executable, "-m", "paddle.distributed.launch",
                "--nproc_per_node", str(RANKS), "--max_restart", "0",
                "--master", f"127.0.0.1:{free_port()}", "--log_dir", str(dp / "log"),
                str(WORKER), str(dp), "dp"]
    try:
        run_job([launcher], envs=[env], timeout=JOB_TIMEOUT_S, cwd=base)
    except JobFailed as exc:
        raise JobFailed(f"{exc}\n{_worker_logs(dp / 'log')}") from None
    ref_env = child_env()
    ref_env.pop("DISC_REPORT", None)
    run_job([[sys.executable, str(WORKER), str(single), "single"]], envs=[ref_env],
            timeout=120, cwd=base)
    reports = [json.loads(f.read_text()) for f in sorted(dp.glob("report-*.json"))]
    return {"ranks": _load(dp, RANKS), "single": _load(single, 1)[0], "reports": reports}


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12))


def test_losses_gradients_and_parameters_match_one_process(job) -> None:
    (single, ref), ranks = job["single"], job["ranks"]
    assert [r["rank"] for r, _ in ranks] == list(range(RANKS))
    assert all(r["world"] == RANKS for r, _ in ranks)
    for step in range(STEPS):
        mean = np.mean([r["losses"][step] for r, _ in ranks])
        np.testing.assert_allclose(mean, single["losses"][step], rtol=1e-5)
    names = [k for k in ref if k.startswith("param/")]
    assert len(names) == 6  # layer norm, two linear layers: weight and bias each
    for _, arrays in ranks:
        for key, want in ref.items():
            assert _rel(arrays[key], want) <= 1e-5, key  # every gradient, every step
    # the ranks' halves differ: had the gradients not been all-reduced, they would too
    assert ranks[0][0]["losses"] != ranks[1][0]["losses"]


def test_ranks_end_identical(job) -> None:
    (_, a), (_, b) = job["ranks"][:2]
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_a_collective_inside_a_compiled_function_runs_in_paddle(job) -> None:
    ranks = job["ranks"]
    for step in range(STEPS):
        mean = np.mean([r["losses"][step] for r, _ in ranks])
        for r, _ in ranks:
            np.testing.assert_allclose(r["averages"][step], mean, rtol=1e-6)
    for report in job["reports"]:
        graphs = [g for g in report["graphs"] if g["name"].startswith("averaged")]
        nodes = [n for g in graphs for n in g["nodes"]]
        collective = [n for n in nodes if n["op"] == "pd_op.all_reduce_"]
        assert collective and all(n["status"] == "fallback" and
                                  n["reason"] == "framework_op" for n in collective)
        # DISC compiled the computations on both sides of it, in two clusters
        assert len({n["cluster"] for n in nodes if n["status"] == "compiled"}) == 2


def test_one_compilation_per_cluster_across_the_ranks(job) -> None:
    reports, ranks = job["reports"], job["ranks"]
    assert len(reports) == RANKS  # one per rank process
    misses, hits, seen = defaultdict(int), defaultdict(int), defaultdict(int)
    for report in reports:
        for g in report["graphs"]:
            for c in g["clusters"]:
                if not c.get("key"):
                    continue
                misses[c["key"]] += c["cache_misses"]
                hits[c["key"]] += c["cache_hits"]
                seen[c["key"]] += 1
                if g["name"].startswith("Net"):
                    assert c["calls"] == STEPS, c  # ran compiled at every step, every size
    assert seen and all(n == RANKS for n in seen.values()), dict(seen)  # same keys
    for key in seen:
        assert (misses[key], hits[key]) == (1, RANKS - 1), key
    assert sum(r["compile_count"] for r, _ in ranks) == len(seen)
    # forward and backward programs traced and rewritten once for 6 batch sizes
    assert all(r["rewrites"] == {"forward": 1, "backward": 1} for r, _ in ranks)
    # the launch ops' library: built by one rank, loaded by the other
    assert sum(r["library_builds"] for r, _ in ranks) == 1
