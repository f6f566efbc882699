"""Small-batch serving of transformers models: DISC's ahead-of-time path against eager,
Inductor and DISC through torch.compile, side by side in one process.

    python benchmarks/torch_serving.py [--models gpt2,bert] [--threads N] [--rounds R]
                                       [--quick] [--output FILE]

A server answers one request at a time: batch 1 (``--batch``), a prompt length that
changes with every request. Each call of a compiled model then pays the framework's own
per-call work before any kernel runs: dynamo evaluates the frame's guards (hundreds for a
transformers model, one per module attribute it read) and aot_autograd's wrappers run.
Contenders:

* eager: the model itself, under ``torch.no_grad()``;
* inductor: ``torch.compile(model, dynamic=True)``;
* inductor_frozen: the same with Inductor's ``freezing`` option (weights folded in as
  constants and prepacked for oneDNN/MKL where Inductor does that): the peer of
  disc_aot_frozen;
* disc: ``torch.compile(model, backend="disc", dynamic=True)``;
* disc_aot: ``disc_torch.aot_compile(model, example)``: ``torch.export`` once, DISC once,
  calls without dynamo (inputs checked against the exported signature); the result
  records how long ``aot_load`` of it, saved to a file, takes in a new process;
* disc_aot_frozen: the same with ``freeze_weights=True``: the GEMM weights stay in MKL's
  packed format between calls (the same library, its packed API: the GEMMs of 16-127
  rows skip the packing plain sgemm repeats on every call).

Models (transformers, built from configs, no download; hidden 256 (``--hidden``; 768 is
GPT-2 small's and BERT-base's width, with 12 heads), 2 layers, 4 heads, vocabulary 1000,
eval mode): ``gpt2`` (``GPT2LMHeadModel``, the logits of ``input_ids``)
and ``bert`` (``BertModel``, the last hidden state of ``input_ids`` and an
``attention_mask`` whose last positions are padding). Lengths: 20 from 5 to 252
(``--quick``: 6); each contender is first called once on every length (the first pass,
compiles included, timed), then timed in interleaved rounds (benchmarks/model_harness.py
``steady``). Every result carries benchmarks/provenance.py's record; DISC's GEMMs run on
torch's own MKL (``DISC_BLAS_TUNE=0``), the library eager and Inductor use.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import allocator  # noqa: E402  (benchmarks/, the script's own directory)
import model_harness as harness  # noqa: E402  (benchmarks/, the script's own directory)
import provenance  # noqa: E402  (benchmarks/, the script's own directory)


def parse_args(argv: list[str] | None = None):
    p = harness.parser(__doc__, "2 models' smaller configs, 6 lengths, 2 rounds")
    p.add_argument("--models", default="gpt2,bert")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--hidden", type=int, default=256,
                   help="hidden size (768: GPT-2 small's and BERT-base's width; the "
                        "feed-forward is 4x, 12 heads then)")
    p.add_argument("--no-inductor", action="store_true", help="skip torch.compile (Inductor)")
    return p.parse_args(argv)


ARGS = parse_args() if __name__ == "__main__" else parse_args([])
torch, THREADS = provenance.import_torch_same_library(ARGS.threads)
CONTENDERS = ("eager", "inductor", "inductor_frozen", "disc", "disc_aot", "disc_aot_frozen")


def _config(quick: bool) -> dict[str, Any]:
    hidden = 64 if quick else ARGS.hidden
    return dict(vocab_size=1000, hidden=hidden, layers=1 if quick else 2,
                heads=12 if hidden % 64 == 0 and hidden >= 768 else 4)


class GPT2Logits(torch.nn.Module):
    """transformers' GPT2LMHeadModel as a server calls it: token ids -> logits."""

    def __init__(self, quick: bool) -> None:
        super().__init__()
        import transformers

        c = _config(quick)
        self.model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=c["vocab_size"], n_embd=c["hidden"], n_layer=c["layers"],
            n_head=c["heads"],
            n_positions=512, use_cache=False))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids).logits


class BertEncoder(torch.nn.Module):
    """transformers' BertModel: token ids and attention mask -> last hidden state."""

    def __init__(self, quick: bool) -> None:
        super().__init__()
        import transformers

        c = _config(quick)
        self.model = transformers.BertModel(transformers.BertConfig(
            vocab_size=c["vocab_size"], hidden_size=c["hidden"],
            num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
            intermediate_size=4 * c["hidden"], max_position_embeddings=512),
            add_pooling_layer=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


MODELS = {"gpt2": GPT2Logits, "bert": BertEncoder}


def requests(model: str, lengths: list[int], batch: int) -> list[tuple[torch.Tensor, ...]]:
    """One request per length: token ids (and for BERT a mask whose last quarter is
    padding, as a batch padded to its longest prompt has)."""
    g = torch.Generator().manual_seed(7)
    out = []
    for t in lengths:
        ids = torch.randint(0, 1000, (batch, t), generator=g)
        if model == "bert":
            mask = torch.ones(batch, t, dtype=torch.long)
            mask[:, t - t // 4:] = 0
            out.append((ids, mask))
        else:
            out.append((ids,))
    return out


def contender(name: str, model: torch.nn.Module, example: tuple[torch.Tensor, ...]
              ) -> tuple[Callable[..., Any], float]:
    """The callable and the seconds making it took (aot_compile compiles here; the
    torch.compile contenders compile in their first calls)."""
    start = time.perf_counter()
    if name == "eager":
        fn = model
    elif name == "inductor":
        fn = torch.compile(model, dynamic=True)
    elif name == "inductor_frozen":
        fn = torch.compile(model, dynamic=True, options={"freezing": True})
    elif name == "disc":
        fn = torch.compile(model, backend="disc", dynamic=True)
    else:
        import disc_torch

        fn = disc_torch.aot_compile(model, example,
                                    freeze_weights=name == "disc_aot_frozen")
    return fn, time.perf_counter() - start


def saved_model_load_s(served: Any) -> dict[str, float]:
    """Seconds a new process takes to import torch and disc-torch, and then for
    ``disc_torch.aot_load`` of ``served`` saved to a file (what a server's start costs
    after the model was compiled once): no export, no tracing, native modules from the
    compile cache."""
    path = Path(tempfile.mkdtemp(prefix="disc-serving-saved-")) / "model.disc"
    served.save(path)
    code = ("import time\n"
            "t0 = time.perf_counter()\n"
            "import torch, disc_torch\n"
            "from disc_torch import aot_load\n"
            "t1 = time.perf_counter()\n"
            f"aot_load({str(path)!r})\n"
            "print(t1 - t0, time.perf_counter() - t1)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=dict(os.environ))
    imports, load = (float(v) for v in out.stdout.strip().splitlines()[-1].split())
    return {"imports_s": round(imports, 3), "aot_load_s": round(load, 3)}


def run_model(name: str, lengths: list[int], names: list[str]) -> dict[str, Any]:
    import torch._dynamo

    import disc_torch

    torch.manual_seed(0)
    model = MODELS[name](ARGS.quick).eval()
    reqs = requests(name, lengths, ARGS.batch)
    # the example the program is exported with: a length none of the requests has
    example = requests(name, [lengths[0] + 3], ARGS.batch)[0]
    torch._dynamo.reset()
    calls, setup_s, first_s, errors = {}, {}, {}, {}
    compiles_before = disc_torch.compile_count()
    with torch.no_grad():
        want = [model(*r) for r in reqs]
        for n in names:
            calls[n], setup_s[n] = contender(n, model, example)
            start = time.perf_counter()
            got = [calls[n](*r) for r in reqs]
            first_s[n] = time.perf_counter() - start
            errors[n] = max(float((g - w).abs().max()) for g, w in zip(got, want))
        disc_compiles = disc_torch.compile_count() - compiles_before
        medians = harness.steady({n: (lambda c: lambda x, y: c(*x))(calls[n]) for n in names},
                                 [(r, None) for r in reqs], ARGS.rounds, lambda r: r,
                                 ARGS.repeat)
    load_s = saved_model_load_s(calls["disc_aot"]) if "disc_aot" in calls else None
    ms = {n: [round(1e3 * s, 4) for s in v] for n, v in medians.items()}
    ratios = {f"{n}_vs_eager": round(harness.median_ratio(medians, "eager", n), 3)
              for n in names if n != "eager"}
    if "inductor" in names:
        ratios.update({f"{n}_vs_inductor": round(harness.median_ratio(medians, "inductor", n), 3)
                       for n in names if n not in ("eager", "inductor")})
    if "inductor_frozen" in names and "disc_aot_frozen" in names:
        ratios["disc_aot_frozen_vs_inductor_frozen"] = round(
            harness.median_ratio(medians, "inductor_frozen", "disc_aot_frozen"), 3)
    return {
        "model": name, "batch": ARGS.batch, "hidden": _config(ARGS.quick)["hidden"],
        "lengths": lengths, "threads": THREADS,
        "ratios": ratios,
        "median_ms": {n: round(statistics.median(v), 4) for n, v in ms.items()},
        "per_length_ms": ms,
        "setup_s": {n: round(v, 3) for n, v in setup_s.items()},
        "first_pass_s": {n: round(v, 3) for n, v in first_s.items()},
        # aot_load of the saved disc_aot model in a new process (its compile cache warm)
        "disc_aot_load_fresh_process_s": load_s,
        "disc_compiles_all_disc_contenders": disc_compiles,
        "max_abs_error_vs_eager": errors,
    }


def main() -> int:
    allocator.pin()  # one heap behaviour for every contender (benchmarks/allocator.py)
    os.environ["DISC_CACHE_DIR"] = tempfile.mkdtemp(prefix="disc-serving-cache-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-serving-")
    import transformers

    import disc_core
    import disc_torch

    info = provenance.machine(THREADS, {
        "torch": torch.__version__, "transformers": transformers.__version__,
        "disc_core": disc_core.__version__, "disc_torch": disc_torch.__version__},
        provenance.torch_same_library(), provenance.host_speed())
    print(provenance.headline(info), flush=True)
    lengths = [5 + 13 * i for i in range(6 if ARGS.quick else 20)]
    names = [n for n in CONTENDERS if not (ARGS.no_inductor and n.startswith("inductor"))]
    rows = []
    for m in ARGS.models.split(","):
        r = run_model(m, lengths, names)
        rows.append(r)
        print(f"{m:5} batch {r['batch']}: median ms {r['median_ms']}  ratios {r['ratios']}  "
              f"setup s {r['setup_s']}  first pass s {r['first_pass_s']}  aot_load in a new "
              f"process s {r['disc_aot_load_fresh_process_s']}  DISC compiles "
              f"{r['disc_compiles_all_disc_contenders']}  max abs error "
              f"{ {n: f'{e:.1e}' for n, e in r['max_abs_error_vs_eager'].items()} }",
              flush=True)
    print(provenance.finish(info), flush=True)
    harness.write_results(info, rows, "torch_serving", ARGS.quick, ARGS.output)
    bad = [r for r in rows if max(r["max_abs_error_vs_eager"].values()) > 1e-3]
    for r in bad:
        print(f"FAIL {r['model']}: a contender disagrees with eager "
              f"{r['max_abs_error_vs_eager']}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
