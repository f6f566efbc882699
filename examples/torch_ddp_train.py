"""Train a small GPT-style model with DistributedDataParallel and DISC on every rank.

    torchrun --nproc_per_node 2 examples/torch_ddp_train.py [--steps 12] [--quick]

Each rank wraps the model in DDP (gloo, CPU) and then in ``torch.compile(ddp,
backend="disc", dynamic=True)``: dynamo's DDPOptimizer splits the step at DDP's gradient
buckets, DISC compiles each piece, and DDP's all-reduce stays in torch. A DDP copy without
DISC trains alongside on the same data, so the script prints both losses and their largest
relative difference (checked against ``--tolerance``), then what each rank compiled: the
ranks share one compile cache (``DISC_CACHE_DIR``), so one rank builds each cluster and the
others load it. Every rank writes its coverage report to ``REPORT_DIR/report-<rank>.json``
(``DISC_REPORT`` with ``{rank}``); the last lines say how to merge them.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parent))
from torch_transformer_train import GPT  # noqa: E402  (the single-process example's model)


def batches(steps: int, per_rank: int, world: int, vocab: int, lengths: list[int]):
    """This rank's slice of each step's global batch (the same global batch on every rank)."""
    rank = dist.get_rank()
    g = torch.Generator().manual_seed(1)
    for i in range(steps):
        t = lengths[i % len(lengths)]
        tokens = torch.randint(0, vocab, (per_rank * world, t + 1), generator=g)
        mine = tokens[rank * per_rank:(rank + 1) * per_rank]
        yield mine[:, :-1], mine[:, 1:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--quick", action="store_true", help="a smaller model (CI smoke run)")
    p.add_argument("--tolerance", type=float, default=1e-3,
                   help="max relative loss difference against DDP without DISC")
    p.add_argument("--report-dir", default="disc-reports",
                   help="where each rank writes report-<rank>.json")
    args = p.parse_args(argv)
    if "RANK" not in os.environ:
        p.error("start it with torchrun, e.g. torchrun --nproc_per_node 2 "
                "examples/torch_ddp_train.py")

    import disc_torch
    from disc_core.report import configure, summary_line

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    Path(args.report_dir).mkdir(parents=True, exist_ok=True)
    configure(Path(args.report_dir) / "report-{rank}.json")  # as DISC_REPORT=... does

    torch.manual_seed(0)
    d, layers = (128, 2) if args.quick else (256, 2)
    vocab, per_rank = 1000, 4
    lengths = [32 + 11 * i for i in range(8)]
    model = GPT(vocab, d, layers)
    reference = copy.deepcopy(model)
    # bucket_cap_mb: DDP's buckets (and so dynamo's graph pieces); 1 MiB is the least
    # dynamo's DDPOptimizer accepts
    compiled = torch.compile(DDP(model, bucket_cap_mb=1), backend="disc", dynamic=True)
    eager = DDP(reference, bucket_cap_mb=1)
    runs = [(compiled, model), (eager, reference)]
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.05) for _, m in runs]

    losses: list[list[float]] = [[], []]
    seconds = [0.0, 0.0]
    for tokens, targets in batches(args.steps, per_rank, world, vocab, lengths):
        for i, ((step, _), opt) in enumerate(zip(runs, optimizers)):
            start = time.perf_counter()
            loss = step(tokens, targets)
            loss.backward()  # DDP all-reduces the gradients here, bucket by bucket
            opt.step()
            opt.zero_grad(set_to_none=True)
            seconds[i] += time.perf_counter() - start
            mean = loss.detach().clone()
            dist.all_reduce(mean)  # the global batch's loss: the mean of the ranks'
            losses[i].append(mean.item() / world)

    worst = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(*losses))
    summary = disc_torch.report().summary()
    mine = (disc_torch.compile_count(), summary.clusters, summary_line(summary))
    gathered: list = [None] * world
    dist.all_gather_object(gathered, mine)
    if rank == 0:
        print(f"{world} ranks, {args.steps} steps, sequence lengths {lengths[0]}..{lengths[-1]},"
              f" model d={d} layers={layers}, {per_rank} sequences per rank")
        print(f"loss  DDP {losses[1][0]:.4f} -> {losses[1][-1]:.4f}   "
              f"DDP+DISC {losses[0][0]:.4f} -> {losses[0][-1]:.4f}   "
              f"max rel diff {worst:.2e} (tolerance {args.tolerance:g})")
        print(f"rank 0 time over all steps (compilation included): DDP {seconds[1]:.2f} s, "
              f"DDP+DISC {seconds[0]:.2f} s")
        for r, (count, _, line) in enumerate(gathered):
            print(f"rank {r}: DISC compilations {count}; {line}")
        print(f"{gathered[0][1]} clusters on each rank, {sum(g[0] for g in gathered)} "
              "compilations in all ranks together (they share DISC_CACHE_DIR: one rank "
              "builds each cluster, the others load it)")
        print(f"reports: {args.report_dir}/report-<rank>.json (written at exit); merge them:\n"
              f"  disc report merge {args.report_dir}/report-*.json -o "
              f"{args.report_dir}/merged.json")
    dist.destroy_process_group()
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
