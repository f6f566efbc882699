"""One rank of the DDP jobs of test_torch_ddp.py (not a test module; torchrun starts it).

    torchrun --nproc_per_node N torch_ddp_worker.py OUT_DIR [--entry compile|optimize]
        [--width 128 --layers 3] [--steps 4] [--eager]

Each rank trains the same GPT-style model under DistributedDataParallel (gloo, CPU) with
DISC (``torch.compile(ddp, backend="disc", dynamic=True)`` or ``disc_torch.optimize(ddp)``)
on its slice of a global batch whose sequence length changes every step; with ``--eager``
a second DDP copy of the model trains without DISC alongside, step by step, on the same
slices. It saves its losses and every parameter's gradient after each step (and DISC's
compile counts) to OUT_DIR/rank<R>.pt; the test compares them with the single-process run
and between the two DDP copies. The model and the data live here so that the test builds
the single-process run from the same definitions.
"""

from __future__ import annotations

import argparse
import copy
import math
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 256
MAX_LEN = 128
#: the sequence length of each step: none repeats before the last, so every step after the
#: first is a shape DISC has not seen
LENGTHS = [16, 23, 31, 9, 40, 12]
#: sequences per rank per step; the global batch is this times the number of ranks
PER_RANK = 2
#: DDP's bucket size; 1 MiB is the smallest dynamo's DDPOptimizer accepts (DDP's first
#: bucket is 1 MiB), so a model of a few MiB makes several buckets, one graph each
BUCKET_MB = 1


class Block(nn.Module):
    """Pre-LN transformer block: causal self-attention and a GELU MLP."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1) @ v
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, d: int, layers: int, heads: int = 4):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Embedding(MAX_LEN, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        x = self.tok(tokens) + self.pos(torch.arange(t, device=tokens.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def make_model(d: int, layers: int) -> GPT:
    torch.manual_seed(0)
    return GPT(d, layers)


def global_batches(steps: int, world: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The global batch of each step, the same in every process: (tokens, targets)."""
    g = torch.Generator().manual_seed(1)
    for i in range(steps):
        t = LENGTHS[i % len(LENGTHS)]
        tokens = torch.randint(0, VOCAB, (PER_RANK * world, t + 1), generator=g)
        yield tokens[:, :-1], tokens[:, 1:]


def gradients(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's gradient (a missing one is an error the test should see)."""
    grads = {}
    for name, p in model.named_parameters():
        if p.grad is None:
            raise AssertionError(f"{name} has no gradient")
        grads[name] = p.grad.detach().clone()
    return grads


def main(argv: list[str] | None = None) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import disc_torch

    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--entry", choices=("compile", "optimize"), default="compile")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--eager", action="store_true", help="train a DDP copy without DISC too")
    args = p.parse_args(argv)

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model(args.width, args.layers)
    reference = copy.deepcopy(model) if args.eager else None
    ddp = DDP(model, bucket_cap_mb=BUCKET_MB)
    step = (torch.compile(ddp, backend="disc", dynamic=True) if args.entry == "compile"
            else disc_torch.optimize(ddp))
    trainers = [("disc", model, step)]
    if reference is not None:
        trainers.append(("eager", reference, DDP(reference, bucket_cap_mb=BUCKET_MB)))
    optimizers = {name: torch.optim.SGD(m.parameters(), lr=0.05) for name, m, _ in trainers}
    result: dict[str, object] = {name: {"losses": [], "grads": []} for name, _, _ in trainers}
    compiles = []
    for tokens, targets in global_batches(args.steps, world):
        mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
        for name, m, fn in trainers:
            loss = fn(tokens[mine], targets[mine])
            loss.backward()
            result[name]["losses"].append(loss.item())
            result[name]["grads"].append(gradients(m))
            optimizers[name].step()
            optimizers[name].zero_grad(set_to_none=True)
        compiles.append(disc_torch.compile_count())
    result.update(rank=rank, world=world, compiles=compiles)
    torch.save(result, args.out / f"rank{rank}.pt")
    print(f"rank {rank}: losses {result['disc']['losses']}, DISC compilations {compiles}",
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
