"""PyTorch DistributedDataParallel (gloo, CPU, torchrun) with DISC.

Real multi-process jobs (torch_ddp_worker.py under torchrun): DISC compiles the graphs
dynamo's DDPOptimizer splits per gradient bucket, DDP keeps its all-reduce, and

* the ranks' losses average to the single-process run's on the same global batch, step by
  step, over sequence lengths the job has not seen before;
* every parameter's gradient matches DDP without DISC (relative norm 1e-4, float32);
* the ranks share one compile cache: the merged report (``disc report merge`` of the
  ranks' ``DISC_REPORT=report-{rank}.json``) has each cluster key compiled once and loaded
  from the cache by each other rank, with 2 ranks (``torch.compile``) and 4 ranks
  (``disc_torch.optimize``, a smaller model to keep the job short).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from ranks import child_env, free_port, run_job  # noqa: E402
from torch_ddp_worker import global_batches, make_model  # noqa: E402

from disc_core.report import Report, load  # noqa: E402
from disc_core.report.sharing import key_compiles  # noqa: E402

HERE = Path(__file__).parent
#: the whole job, compilation included: a hang in a collective fails within this
JOB_TIMEOUT = 300
GRAD_RTOL = 1e-4
LOSS_RTOL = 1e-4


def torchrun(tmp_path: Path, ranks: int, *worker_args: str) -> tuple[list[dict], Report]:
    """Run the worker on ``ranks`` processes sharing a fresh compile cache; their saved
    results (by rank) and the merged report of their ``report-{rank}.json`` files."""
    out = tmp_path / "out"
    out.mkdir()
    env = child_env({"DISC_CACHE_DIR": str(tmp_path / "cache"),
                     "DISC_REPORT": str(tmp_path / "report-{rank}.json")})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
           "--nproc_per_node", str(ranks), "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), str(HERE / "torch_ddp_worker.py"), str(out),
           *worker_args]
    run_job([cmd], envs=[env], timeout=JOB_TIMEOUT, cwd=tmp_path)
    results = [torch.load(out / f"rank{r}.pt") for r in range(ranks)]
    files = [tmp_path / f"report-{r}.json" for r in range(ranks)]
    merged = tmp_path / "merged.json"
    cli = subprocess.run([sys.executable, "-m", "disc_core.cli", "report", "merge",
                          *map(str, files), "-o", str(merged)],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert "each key compiled once" in cli.stdout, cli.stdout
    return results, load(merged)


def single_process_losses(d: int, layers: int, steps: int, world: int) -> list[float]:
    """The same model trained in one process, without DDP or DISC, on the global batches."""
    model = make_model(d, layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for tokens, targets in global_batches(steps, world):
        loss = model(tokens, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def check_losses(results: list[dict], expected: list[float]) -> None:
    """The ranks' mean loss is the global batch's (equal slices, equal token counts)."""
    world = len(results)
    for step, want in enumerate(expected):
        got = sum(r["disc"]["losses"][step] for r in results) / world
        assert got == pytest.approx(want, rel=LOSS_RTOL), f"step {step}"


def check_one_compile_per_key(results: list[dict], merged: Report) -> None:
    world = len(results)
    assert sorted(run.rank for run in merged.runs) == list(range(world))
    assert {run.world_size for run in merged.runs} == {world}
    items = key_compiles(merged)
    assert items
    for k in items:
        assert (k.compiles, k.cache_hits, len(k.runs)) == (1, world - 1, world), k
    # DISC's own count agrees: the job compiled each key once, all on its first step,
    # and no later sequence length compiled anything
    assert sum(r["compiles"][-1] for r in results) == len(items)
    assert all(r["compiles"][0] == r["compiles"][-1] for r in results)
    # the collectives stay in torch: DDP all-reduces outside the compiled graphs
    ops = {node.op for graph in merged.graphs for node in graph.nodes}
    assert not [op for op in ops if "c10d" in op or "all_reduce" in op], ops


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def test_two_ranks_train_a_gpt_like_ddp_without_disc(tmp_path):
    d, layers, steps = 128, 3, 4
    results, merged = torchrun(tmp_path, 2, "--entry", "compile", "--width", str(d),
                               "--layers", str(layers), "--steps", str(steps), "--eager")
    check_losses(results, single_process_losses(d, layers, steps, 2))
    for r in results:
        assert len(r["disc"]["grads"]) == steps
        for step, (disc, eager) in enumerate(zip(r["disc"]["grads"], r["eager"]["grads"])):
            assert disc.keys() == eager.keys()
            for name in eager:
                err = relative_error(disc[name], eager[name])
                assert err <= GRAD_RTOL, f"rank {r['rank']} step {step} {name}: {err:.2e}"
    # gradients are all-reduced: both ranks hold the same ones
    for name, g in results[0]["disc"]["grads"][-1].items():
        assert torch.equal(g, results[1]["disc"]["grads"][-1][name]), name
    # dynamo's DDPOptimizer split the step at bucket boundaries: one DISC graph per bucket
    # and direction, and the forwards cover every layer between them
    forwards = [g for g in merged.graphs if g.name.startswith("forward")]
    assert len(forwards) >= 2 * 2, [g.name for g in merged.graphs]  # >= 2 buckets, 2 ranks
    summary = merged.summary()
    assert summary.failed_clusters == 0 and summary.compiled >= 0.99 * summary.ops
    check_one_compile_per_key(results, merged)


def test_four_ranks_share_one_compile_per_cluster_through_optimize(tmp_path):
    d, layers, steps = 64, 1, 3
    results, merged = torchrun(tmp_path, 4, "--entry", "optimize", "--width", str(d),
                               "--layers", str(layers), "--steps", str(steps))
    check_losses(results, single_process_losses(d, layers, steps, 4))
    check_one_compile_per_key(results, merged)


def test_the_ddp_example_runs(tmp_path):
    """examples/torch_ddp_train.py under torchrun: it checks its own losses against DDP
    without DISC (exit status) and leaves one report per rank for ``disc report merge``."""
    example = HERE.parents[1] / "examples" / "torch_ddp_train.py"
    reports = tmp_path / "reports"
    env = child_env({"DISC_CACHE_DIR": str(tmp_path / "cache")})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
           "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), str(example), "--quick", "--steps", "3",
           "--report-dir", str(reports)]
    (result,) = run_job([cmd], envs=[env], timeout=JOB_TIMEOUT, cwd=tmp_path)
    assert "max rel diff" in result.stdout and "disc report merge" in result.stdout
    merged = Report.merge(load(reports / f"report-{r}.json") for r in range(2))
    assert all(k.compiles == 1 for k in key_compiles(merged))
