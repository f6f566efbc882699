"""Train a small GPT-style model with and without DISC on sequences of varying length.

    python examples/torch_transformer_train.py [--steps 30] [--quick]

Prints loss parity against eager PyTorch, the step-time ratio, DISC's compile count and the
coverage summary. The same seeds drive both runs, so the losses should agree to float32
rounding (the tolerance is printed and checked).
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    """Pre-LN transformer block with causal self-attention written out in plain ops."""

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
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        att = scores.softmax(dim=-1) @ v
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int = 1000, d: int = 256, layers: int = 2, heads: int = 4,
                 max_len: int = 512):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        x = self.tok(tokens) + self.pos(torch.arange(t, device=tokens.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def batches(steps: int, batch: int, vocab: int, lengths: list[int], seed: int):
    g = torch.Generator().manual_seed(seed)
    for i in range(steps):
        t = lengths[i % len(lengths)]
        tokens = torch.randint(0, vocab, (batch, t + 1), generator=g)
        yield tokens[:, :-1], tokens[:, 1:]


def train(model: nn.Module, step_fn, data) -> tuple[list[float], list[float]]:
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses, times = [], []
    for tokens, targets in data:
        start = time.perf_counter()
        loss = step_fn(tokens, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    return losses, times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--quick", action="store_true", help="a smaller model (CI smoke run)")
    p.add_argument("--tolerance", type=float, default=2e-3,
                   help="max relative loss difference accepted (float32 reassociation)")
    args = p.parse_args(argv)
    import disc_torch

    torch.manual_seed(0)
    d, layers = (64, 1) if args.quick else (256, 2)
    vocab, batch = 1000, 4
    lengths = [32 + 11 * i for i in range(20)]
    eager_model = GPT(vocab, d, layers)
    disc_model = copy.deepcopy(eager_model)
    compiled = disc_torch.optimize(disc_model)

    eager_losses, eager_times = train(eager_model, eager_model,
                                      batches(args.steps, batch, vocab, lengths, 1))
    disc_losses, disc_times = train(disc_model, compiled,
                                    batches(args.steps, batch, vocab, lengths, 1))

    worst = max(abs(a - b) / max(abs(a), 1e-6) for a, b in zip(eager_losses, disc_losses))
    first = len(lengths)  # the first pass over the shapes includes compilation
    steady_e = statistics.median(eager_times[first:] or eager_times)
    steady_d = statistics.median(disc_times[first:] or disc_times)
    print(f"steps {args.steps}, {len(set(lengths))} sequence lengths {lengths[0]}..{lengths[-1]}, "
          f"model d={d} layers={layers}")
    print(f"loss  eager {eager_losses[0]:.4f} -> {eager_losses[-1]:.4f}   "
          f"disc {disc_losses[0]:.4f} -> {disc_losses[-1]:.4f}   max rel diff {worst:.2e} "
          f"(tolerance {args.tolerance:g})")
    print(f"step time (median after the first pass)  eager {steady_e * 1e3:.1f} ms  "
          f"disc {steady_d * 1e3:.1f} ms  speedup {steady_e / steady_d:.2f}x")
    print(f"first pass incl. compilation  eager {sum(eager_times[:first]):.2f} s  "
          f"disc {sum(disc_times[:first]):.2f} s")
    print(f"DISC compilations: {disc_torch.compile_count()}")
    from disc_core.report import summary_line

    print(summary_line(disc_torch.report().summary()))
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
