"""Training with dropout on (issue 24): transformers' BERT and GPT-2 as they train by default.

    python benchmarks/dropout_training.py [--models bert,gpt2] [--rounds 9] [--output F]

A model in training mode calls dropout after its embeddings, attention probabilities and
MLP. DISC draws dropout's random numbers from the shape (``disc_torch.dropout_decomposition``)
so the mask compiles next to its producer and users; torch's own decomposition draws them
with ``rand_like(input)``, which cuts the graph at every dropout. Contenders, timed in one
process, interleaved round by round, every contender at the same thread count and DISC on
torch's MKL (``DISC_BLAS_TUNE=0``: the library held fixed):

    eager              PyTorch eager
    disc               disc_torch.optimize
    disc_torch_decomp  the same, with torch's decomposition of native_dropout (rand_like)
    disc_eager_random  the same, with ``eager_random=True``: native_dropout runs in torch
                       with eager's stream (what DISC did before the shape-drawn dropout)
    inductor           torch.compile(dynamic=True)

Per model: a stream of sequence lengths (batch 4), each contender's steady-state training
step (forward with the model's own loss, backward) timed per length (median of --rounds
rounds), the ratio per length, and its median over lengths. The DISC rows also give the
number of clusters of the forward graph and the ops that ran in torch. Dropout draws
differ between contenders (eager's bernoulli_ against the decompositions' rand), so no
gradient is compared here; tests/test_dropout.py compares DISC against eager with the
same draws. Writes benchmarks/results/dropout_training.json with the provenance record.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="bert,gpt2")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--no-inductor", action="store_true")
    p.add_argument("--output", type=Path,
                   default=ROOT / "benchmarks" / "results" / "dropout_training.json")
    return p.parse_args()


ARGS = parse_args()
sys.path.insert(0, str(Path(__file__).resolve().parent))
import allocator  # noqa: E402  (benchmarks/, the script's own directory)
import provenance  # noqa: E402

torch, _ = provenance.import_torch_same_library(ARGS.threads)
import transformers  # noqa: E402

import disc_core  # noqa: E402
import disc_torch  # noqa: E402
import disc_torch.backend as disc_backend_module  # noqa: E402
from disc_torch.decompositions import decomposition_table  # noqa: E402

LENGTHS = [32, 57, 80, 101, 128, 160]
BATCH = 4


class LossOf(torch.nn.Module):
    """``tokens -> loss`` with the loss transformers computes itself."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=tokens, labels=tokens).loss


def build(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if name == "bert":
        config = transformers.BertConfig(vocab_size=1000, hidden_size=256, num_hidden_layers=2,
                                         num_attention_heads=4, intermediate_size=1024)
        model = transformers.BertForMaskedLM(config)
    elif name == "gpt2":
        config = transformers.GPT2Config(vocab_size=1000, n_embd=256, n_layer=2, n_head=4)
        model = transformers.GPT2LMHeadModel(config)
    else:
        raise SystemExit(f"unknown model {name!r}")
    return LossOf(model).train()  # the configs' default dropout, 0.1


@contextlib.contextmanager
def torchs_dropout_decomposition() -> Iterator[None]:
    """DISC's table with native_dropout left to torch's decomposition (rand_like)."""
    from torch._decomp import decomposition_table as torch_table

    table = dict(decomposition_table())
    native = torch.ops.aten.native_dropout.default
    table[native] = torch_table[native]
    real = disc_backend_module.decomposition_table
    disc_backend_module.decomposition_table = lambda *args: table
    try:
        yield
    finally:
        disc_backend_module.decomposition_table = real


def contenders(name: str) -> dict[str, tuple[torch.nn.Module, Callable, Callable]]:
    """name -> (module, callable, context each call runs in)."""
    base = build(name)
    out: dict[str, tuple[torch.nn.Module, Callable, Callable]] = {}
    m = copy.deepcopy(base)
    out["eager"] = (m, m, contextlib.nullcontext)
    m = copy.deepcopy(base)
    out["disc"] = (m, disc_torch.optimize(m, cache_graphs=False), contextlib.nullcontext)
    m = copy.deepcopy(base)
    out["disc_torch_decomp"] = (m, disc_torch.optimize(m, cache_graphs=False),
                                torchs_dropout_decomposition)
    m = copy.deepcopy(base)
    out["disc_eager_random"] = (m, disc_torch.optimize(m, cache_graphs=False,
                                                       eager_random=True),
                                contextlib.nullcontext)
    if not ARGS.no_inductor:
        m = copy.deepcopy(base)
        out["inductor"] = (m, torch.compile(m, dynamic=True), contextlib.nullcontext)
    return out


def step(entry: tuple[torch.nn.Module, Callable, Callable], tokens: torch.Tensor) -> float:
    module, fn, ctx = entry
    with ctx():
        loss = fn(tokens)
        loss.backward()
    for p in module.parameters():
        p.grad = None
    return float(loss.detach())


def forward_structure(before: int) -> dict[str, Any]:
    """Clusters and eager ops of the forward graphs the report gained since ``before``."""
    graphs = [g for g in disc_torch.report().graphs[before:] if g.name.startswith("forward")]
    eager: dict[str, int] = {}
    for g in graphs:
        for n in g.nodes:
            if n.status.value != "compiled":
                eager[n.op] = eager.get(n.op, 0) + 1
    return {"forward_graphs": len(graphs),
            "forward_clusters": [len(g.clusters) for g in graphs], "forward_eager_ops": eager}


def run_model(name: str) -> dict[str, Any]:
    g = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, 1000, (BATCH, t), generator=g) for t in LENGTHS]
    entries = contenders(name)
    structure: dict[str, Any] = {}
    losses: dict[str, list[float]] = {}
    for cname, entry in entries.items():  # first pass: every length once (compiles)
        before = len(disc_torch.report().graphs)
        losses[cname] = [step(entry, tok) for tok in batches]
        if cname.startswith("disc"):
            structure[cname] = forward_structure(before)
    times: dict[str, dict[int, list[float]]] = {c: {t: [] for t in LENGTHS} for c in entries}
    order = list(entries)
    for r in range(ARGS.rounds):
        for tok in batches:
            for cname in order[r % len(order):] + order[:r % len(order)]:
                t0 = time.perf_counter()
                step(entries[cname], tok)
                times[cname][tok.shape[1]].append(time.perf_counter() - t0)
    med = {c: {t: statistics.median(v) for t, v in per.items()} for c, per in times.items()}

    def ratio(peer: str, who: str = "disc") -> float | None:
        if peer not in med:
            return None
        return round(statistics.median(med[peer][t] / med[who][t] for t in LENGTHS), 3)

    return {
        "model": name, "lengths": LENGTHS, "batch": BATCH,
        "steady_ms": {c: {t: round(v * 1e3, 2) for t, v in per.items()} for c, per in med.items()},
        "disc_vs_eager": ratio("eager"), "disc_vs_inductor": ratio("inductor"),
        "disc_vs_disc_torch_decomp": ratio("disc_torch_decomp"),
        "disc_torch_decomp_vs_eager": ratio("eager", "disc_torch_decomp"),
        "disc_vs_disc_eager_random": ratio("disc_eager_random"),
        "disc_eager_random_vs_eager": ratio("eager", "disc_eager_random"),
        "structure": structure,
        "mean_loss_first_pass": {c: round(statistics.fmean(v), 4) for c, v in losses.items()},
    }


def main() -> int:
    allocator.pin()  # one heap behaviour for every contender (benchmarks/allocator.py)
    info = provenance.machine(ARGS.threads, {
        "torch": torch.__version__, "transformers": transformers.__version__,
        "disc_core": disc_core.__version__, "disc_torch": disc_torch.__version__}, {
        "eager": "torch's MKL", "inductor": "torch's MKL (extern mm kernels)",
        "disc": "torch's MKL (DISC_BLAS_TUNE=0)",
        "disc_torch_decomp": "torch's MKL (DISC_BLAS_TUNE=0)",
        "disc_eager_random": "torch's MKL (DISC_BLAS_TUNE=0)"})
    print(provenance.headline(info), flush=True)
    rows = []
    for name in ARGS.models.split(","):
        r = run_model(name)
        rows.append(r)
        s = r["structure"]
        print(f"{name:5} training, dropout 0.1: DISC vs eager x{r['disc_vs_eager']}  vs Inductor "
              f"x{r['disc_vs_inductor']}  vs DISC with torch's dropout decomposition "
              f"x{r['disc_vs_disc_torch_decomp']} (that one vs eager "
              f"x{r['disc_torch_decomp_vs_eager']}), vs DISC with eager_random "
              f"x{r['disc_vs_disc_eager_random']} (that one vs eager "
              f"x{r['disc_eager_random_vs_eager']})\n      forward clusters: DISC "
              f"{s['disc']['forward_clusters']} (in torch: {s['disc']['forward_eager_ops']}); "
              f"torch's decomposition {s['disc_torch_decomp']['forward_clusters']} "
              f"(in torch: {s['disc_torch_decomp']['forward_eager_ops']}); eager_random "
              f"{s['disc_eager_random']['forward_clusters']}", flush=True)
    print(provenance.finish(info), flush=True)
    ARGS.output.parent.mkdir(parents=True, exist_ok=True)
    ARGS.output.write_text(json.dumps({"machine": info, "rows": rows}, indent=1) + "\n")
    print(f"wrote {ARGS.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
