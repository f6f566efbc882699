"""Fused attention over a stream of sequence lengths: DISC's blocked attention op against
DISC without it, PyTorch eager and Inductor, forward and forward+backward, side by side.

    python benchmarks/attention.py [--quick] [--threads N] [--cases sdpa_causal,...]

Contenders (one process, one run, timed in interleaved rounds):

* disc: `torch.compile(fn, backend="disc", dynamic=True)`. SDPA becomes the fused
  `attention` / `attention_grad` ops; hand-written attention becomes `attention` through
  the core pass `fuse-attention` (forward only: a training graph keeps the probabilities
  for its backward).
* disc_unfused: the same, compiled with `DISC_FUSED_ATTENTION=0`: GEMMs, row-fused
  softmax kernels and the [B, H, S, S] scores in memory (SDPA through DISC's exact
  decomposition).
* eager: PyTorch eager (SDPA runs torch's CPU flash-attention kernel).
* inductor: `torch.compile(fn, dynamic=True)`.

DISC runs its GEMMs on torch's own MKL (`DISC_BLAS_TUNE=0`, set here), so both sides
multiply with the same library. Cases (q, k, v [2, 8, S, 64], f32):

* `sdpa_causal`: `F.scaled_dot_product_attention(q, k, v, is_causal=True)`
* `sdpa_padding`: SDPA with a boolean key-padding mask [2, 1, 1, S]
* `manual_causal`: GPT-style `softmax(masked_fill(q @ kᵀ * c, ~tril, -inf)) @ v`

Every result carries benchmarks/provenance.py's record and the share of the CPUs other
processes used during the run (figures with more than 10% are indicative only).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import allocator  # noqa: E402  (benchmarks/, the script's own directory)
import provenance  # noqa: E402  (benchmarks/, the script's own directory)

CASES = ("sdpa_causal", "sdpa_padding", "manual_causal")
MODES = ("forward", "forward_backward")
CONTENDERS = ("disc", "disc_unfused", "eager", "inductor")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="6 lengths, fewer rounds")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--output", type=Path, default=None)
    return p.parse_args(argv)


ARGS = parse_args() if __name__ == "__main__" else parse_args([])
torch, THREADS = provenance.import_torch_same_library(ARGS.threads)

import torch.nn.functional as F  # noqa: E402


def sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def sdpa_padding(q, k, v, keep):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


def manual_causal(q, k, v):
    t = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) * (1.0 / 8.0)
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    return scores.masked_fill(~causal, float("-inf")).softmax(dim=-1) @ v


FUNCTIONS = {"sdpa_causal": sdpa_causal, "sdpa_padding": sdpa_padding,
             "manual_causal": manual_causal}


def lengths(quick: bool) -> list[int]:
    if quick:
        return [64, 127, 200, 333, 512, 777]
    return [33, 64, 97, 128, 160, 200, 255, 256, 300, 384, 421, 512, 600, 640, 700, 768, 850,
            900, 1000, 1024]


def inputs(case: str, s: int, grad: bool, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    qkv = [torch.randn(2, 8, s, 64, generator=g).requires_grad_(grad) for _ in range(3)]
    for t in qkv:  # the head size is a model constant: sequence and batch stay dynamic
        torch._dynamo.mark_static(t, 3)
    if case == "sdpa_padding":
        keep = torch.ones(2, 1, 1, s, dtype=torch.bool)
        keep[1, ..., s - s // 4:] = False
        return [*qkv, keep]
    return qkv


def step(fn: Callable[..., torch.Tensor], mode: str) -> Callable[..., Any]:
    if mode == "forward":
        def fwd(*xs):
            with torch.no_grad():
                return fn(*xs)
        return fwd

    def fwd_bwd(*xs):
        out = fn(*xs)
        return torch.autograd.grad(out, [x for x in xs if x.requires_grad],
                                   grad_outputs=torch.ones_like(out))
    return fwd_bwd


def make(name: str, case: str) -> Callable[..., torch.Tensor]:
    base = FUNCTIONS[case]
    if name == "eager":
        return base
    # a code object of its own: dynamo keeps compiled code on the code object, so two
    # compiled contenders of one function would otherwise share one compilation
    fn = types.FunctionType(base.__code__.replace(co_name=f"{case}_{name}"), base.__globals__,
                            f"{case}_{name}")
    if name == "eager":
        return fn
    if name == "inductor":
        return torch.compile(fn, dynamic=True)
    import disc_torch  # noqa: F401  (registers the backend)

    return torch.compile(fn, backend="disc", dynamic=True)


def warm(name: str, call: Callable[..., Any], case: str, mode: str, ss: list[int]) -> float:
    """One call per length (compilation included), with fused attention off for
    disc_unfused while it compiles; seconds."""
    prev = os.environ.get("DISC_FUSED_ATTENTION")
    if name == "disc_unfused":
        os.environ["DISC_FUSED_ATTENTION"] = "0"
    try:
        t0 = time.perf_counter()
        for s in ss:
            call(*inputs(case, s, mode != "forward", s))
        return time.perf_counter() - t0
    finally:
        if name == "disc_unfused":
            if prev is None:
                os.environ.pop("DISC_FUSED_ATTENTION", None)
            else:
                os.environ["DISC_FUSED_ATTENTION"] = prev


def check(calls: dict[str, Callable[..., Any]], case: str, mode: str, s: int) -> dict:
    """Largest relative difference of each contender's outputs from eager's."""
    xs = inputs(case, s, mode != "forward", 7)
    want = calls["eager"](*xs)
    want = want if isinstance(want, tuple) else (want,)
    out = {}
    for name, call in calls.items():
        got = call(*xs)
        got = got if isinstance(got, tuple) else (got,)
        out[name] = max(float((g - w).abs().max() / w.abs().max().clamp_min(1e-30))
                        for g, w in zip(got, want))
    return out


def run_case(case: str, mode: str, names: list[str], ss: list[int], rounds: int) -> dict:
    calls = {n: step(make(n, case), mode) for n in names}
    first = {n: round(warm(n, calls[n], case, mode, ss), 3) for n in names}
    errors = check(calls, case, mode, ss[len(ss) // 2]) if "eager" in calls else {}
    times: dict[str, list[float]] = {n: [] for n in names}
    for s in ss:
        xs = inputs(case, s, mode != "forward", s)
        per: dict[str, list[float]] = {n: [] for n in names}
        for _ in range(rounds):  # interleaved: every contender once per round
            for n in names:
                t0 = time.perf_counter()
                calls[n](*xs)
                per[n].append(time.perf_counter() - t0)
        for n in names:
            times[n].append(statistics.median(per[n]))
    total = {n: sum(t) for n, t in times.items()}
    row: dict[str, Any] = {"case": case, "mode": mode, "lengths": ss,
                           "total_seconds": {n: round(v, 5) for n, v in total.items()},
                           "first_pass_seconds": first, "max_rel_error_vs_eager": errors,
                           "per_length_seconds": {n: [round(x, 6) for x in t]
                                                  for n, t in times.items()}}
    if "disc" in total:
        row["disc_speedup"] = {n: round(total[n] / total["disc"], 3) for n in names
                               if n != "disc"}
    return row


def main() -> int:
    allocator.pin()  # one heap behaviour for every contender (benchmarks/allocator.py)
    ss = lengths(ARGS.quick)
    rounds = ARGS.rounds or (3 if ARGS.quick else 5)
    names = ARGS.contenders.split(",")
    others = provenance.OtherLoad()
    rows = [run_case(c, m, names, ss, rounds) for c in ARGS.cases.split(",")
            for m in ARGS.modes.split(",")]
    import disc_core

    record = provenance.machine(THREADS, {"torch": torch.__version__,
                                          "disc-core": disc_core.__version__},
                                provenance.torch_same_library())
    busy = others.pct()
    record["other_processes_pct"] = None if busy is None else round(busy, 1)
    print(provenance.headline(record))
    print("DISC_BLAS_TUNE=0 (same GEMM library); other processes used "
          + ("an unknown share" if busy is None else f"{busy:.0f}%") + " of the CPUs during "
          "the run" + (": figures are indicative" if busy is None or busy > 10 else ""))
    head = f"{'case':15} {'mode':17} " + " ".join(f"{n:>13}" for n in names)
    print(head + "   disc speedup over " + ", ".join(n for n in names if n != "disc"))
    for r in rows:
        cols = " ".join(f"{r['total_seconds'][n] * 1e3:11.2f}ms" for n in names)
        sp = ", ".join(f"{r['disc_speedup'][n]:.2f}x" for n in names if n != "disc") \
            if "disc_speedup" in r else ""
        print(f"{r['case']:15} {r['mode']:17} {cols}   {sp}")
    print("max relative error vs eager (middle length): " + "; ".join(
        f"{r['case']}/{r['mode']}: " + ", ".join(f"{n} {e:.1e}" for n, e in
                                              r["max_rel_error_vs_eager"].items())
        for r in rows))
    if ARGS.output:
        ARGS.output.write_text(json.dumps({"machine": record, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
