"""Model benchmark (issue #4): DISC vs PyTorch eager vs torch.compile(dynamic=True) (Inductor)
on a GPT-style transformer, a small CNN and two third-party models (transformers' Llama and GPT-2),
inference and training, over streams of shapes.

    bash ci/test.sh -e bench-models                     # full run (tox env `bench-models`)
    python benchmarks/torch_models.py --quick --no-inductor

Per (model, mode) every contender starts from the same weights and runs the whole stream
once (the *first pass*: tracing and compilation included, as a user sees it), then the
steady state is timed in interleaved rounds over a few shapes of the stream (per round, shape
and contender one untimed call, then ``--repeat`` timed calls back to back; median per
shape, then the median of the per-shape ratios). DISC's first pass starts from an empty
compile cache, and so does Inductor's (a fresh TORCHINDUCTOR_CACHE_DIR: a warm Inductor
cache left in $TMPDIR by an earlier run would make its first pass several times shorter than
a new machine's). Eager's and DISC's first passes are also measured in a new process each
(``first_pass_fresh_process_s``), as a user's job starts: in this process DISC's runs after
the other contenders. A second new process then runs DISC's again over the disk cache the
first left (``disc_warm_cache_first_pass_s``: native modules and traced graphs, as the
next run of a deployed job sees it); the target compares it with eager's new process. In
new processes the time counts from making the contender (``optimize`` loads the cache
there), imports excluded. Every
contender runs with the same thread count. Training steps are forward + backward + SGD.

After the steady state, ``unseen_shapes`` times a stream whose every step has a shape no
contender saw before (the timed shapes' sequences 1 and 2 tokens shorter, images 1 and 2
pixels smaller): one call per shape and contender, interleaved, as a job whose shapes
change every step runs. A dynamic-shape compiler should cost nothing extra there; its
DISC compiles and the graphs dynamo traced meanwhile (every contender's) are recorded.

The headline ratios hold the GEMM library fixed: DISC's GEMMs run torch's own MKL, as
eager's do (``DISC_BLAS_TUNE=0`` keeps the runtime on the library the bridge prefers), so
they measure what the compiler earns. The runtime's own choice of BLAS (it measures torch's
MKL against numpy's OpenBLAS with oneDNN's sgemm on the CPU at hand) is a second, labelled
column (``own_blas``): DISC against eager again, steady state only, timed in a child
process (the BLAS is chosen once per process).

Results: a table on stdout and benchmarks/results/torch_models.json (torch_models.quick.json
for --quick): ``machine`` (benchmarks/provenance.py: CPU model and flags, threads, commit,
date, versions, each contender's GEMM library) and one row per (model, mode). Targets
are printed as PASS/MISS; a missed target does not fail the run, a loss that disagrees with
eager does (exit 1), and so does, in training, the gradient of any parameter on the first
batch (``max_grad_rel_err_vs_eager``: ‖g_disc − g_eager‖ / ‖g_eager‖ over every parameter,
a fresh copy of the model each; a gradient that is zero in exact arithmetic is judged
against a float64 copy's, see gradient_check): losses can agree while gradients do not.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import allocator  # benchmarks/, the script's own directory
import model_harness as harness  # benchmarks/, the script's own directory

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = harness.parser(__doc__.split("\n\n")[0], "small models, 6 shapes (smoke run)")
    p.add_argument("--models", default="gpt,cnn,llama,gpt2",
                   help="comma list of gpt, cnn, llama (transformers' LlamaForCausalLM), "
                        "gpt2 (transformers' GPT2LMHeadModel)")
    p.add_argument("--no-inductor", action="store_true", help="skip torch.compile (Inductor)")
    p.add_argument("--fresh-first-pass", nargs=3, metavar=("MODEL", "MODE", "CONTENDER"),
                   help=argparse.SUPPRESS)  # the child process of fresh_first_pass()
    p.add_argument("--own-blas-steady", action="store_true",
                   help=argparse.SUPPRESS)  # the child process of own_blas_column()
    return p.parse_args(argv)


ARGS = parse_args()
THREADS = harness.thread_count(ARGS)
# the same GEMM library as eager (torch's MKL) unless this is the own-BLAS child
os.environ["DISC_BLAS_TUNE"] = "1" if ARGS.own_blas_steady else "0"
# no background pool of Inductor compile workers competing with the timed contenders
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch  # noqa: E402  (after OMP_NUM_THREADS)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(THREADS)
sys.path.insert(0, str(ROOT / "examples"))
import library_bound  # noqa: E402  (benchmarks/; it imports torch)
from torch_transformer_train import GPT  # noqa: E402


class CNN(nn.Module):
    """conv-BN-ReLU-maxpool, strided conv, avgpool, linear head: the usual CNN pieces."""

    def __init__(self, width: int = 32, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.bn2 = nn.BatchNorm2d(2 * width)
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.avg_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return F.cross_entropy(self.fc(x.mean((2, 3))), y)


def gpt_stream(quick: bool):
    lengths = [32 + 11 * i for i in range(6 if quick else 20)]
    g = torch.Generator().manual_seed(1)
    batches = []
    for t in lengths:
        tok = torch.randint(0, 1000, (4, t + 1), generator=g)
        batches.append((tok[:, :-1], tok[:, 1:]))
    model = GPT(1000, 64 if quick else 256, 1 if quick else 2, 4)
    return model, batches, [f"[4, {t}]" for t in lengths]


def cnn_stream(quick: bool):
    sizes = [16 + 2 * i for i in range(6 if quick else 20)]
    g = torch.Generator().manual_seed(2)
    batches = [(torch.randn(8, 3, s, s, generator=g), torch.randint(0, 10, (8,), generator=g))
               for s in sizes]
    return CNN(16 if quick else 32), batches, [f"[8, 3, {s}, {s}]" for s in sizes]


class CausalLM(nn.Module):
    """A transformers causal LM as the harness calls models: ``(tokens, labels) -> loss``,
    with the loss transformers picks itself (its ``loss_function``)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=x, labels=y).loss


def causal_lm_stream(model: nn.Module, quick: bool, seed: int):
    """A transformers causal LM (vocabulary 1000) over the stream of lengths every model
    here runs, batch 4, the tokens as their own labels (the model shifts them)."""
    lengths = [32 + 11 * i for i in range(6 if quick else 20)]
    g = torch.Generator().manual_seed(seed)
    batches = []
    for t in lengths:
        tok = torch.randint(0, 1000, (4, t), generator=g)
        batches.append((tok, tok))
    return CausalLM(model), batches, [f"[4, {t}]" for t in lengths]


def llama_stream(quick: bool):
    """transformers' LlamaForCausalLM, built from a config (no download): RMSNorm, rotary
    embeddings, SiLU-gated MLP, SDPA attention; a third-party model DISC was not written
    around. The labels are the tokens (the model shifts them)."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=1000, hidden_size=64 if quick else 256,
        intermediate_size=172 if quick else 688, num_hidden_layers=1 if quick else 2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
        use_cache=False)
    return causal_lm_stream(transformers.LlamaForCausalLM(config), quick, seed=3)


def gpt2_stream(quick: bool):
    """transformers' GPT2LMHeadModel from a config: fused q/k/v (Conv1D), learned
    positions, its own loss, whose path logs (``logger.warning_once``: a graph break for
    torch.compile). Dropout off, no KV cache (a training step's configuration)."""
    import transformers

    config = transformers.GPT2Config(
        vocab_size=1000, n_embd=64 if quick else 256, n_layer=1 if quick else 2, n_head=4,
        n_positions=512, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
    return causal_lm_stream(transformers.GPT2LMHeadModel(config), quick, seed=4)


MODELS = {"gpt": gpt_stream, "cnn": cnn_stream, "llama": llama_stream, "gpt2": gpt2_stream}


def unseen(model_name: str, batches: list[tuple[Any, Any]], cut: int) -> list[tuple[Any, Any]]:
    """The stream's batches cut by ``cut`` (1 or 2) along their dynamic dims: sequences
    ``cut`` tokens shorter, images ``cut`` pixels smaller, so no shape was seen before
    (the lengths step by 11, the image sizes by 2 from an even start)."""
    if model_name == "cnn":
        return [(x[..., :-cut, :-cut], y) for x, y in batches]
    return [(x[:, :-cut], y[:, :-cut]) for x, y in batches]


def unseen_shape_steps(steps: dict[str, Callable[[Any, Any], Any]],
                       streams: list[list[tuple[Any, Any]]]) -> dict[str, list[float]]:
    """Seconds of each contender's first call on each shape of ``streams`` (shapes none of
    them saw before): the steps of a job whose shapes change every step, which is what
    DISC is for. One call per shape and contender, interleaved, the order rotating."""
    names = list(steps)
    per: dict[str, list[float]] = {n: [] for n in names}
    i = 0
    for stream in streams:
        for x, y in stream:
            for n in names[i % len(names):] + names[:i % len(names)]:
                t0 = time.perf_counter()
                steps[n](x, y)
                per[n].append(time.perf_counter() - t0)
            i += 1
    return per


def make_step(model: nn.Module, fn: Callable[..., torch.Tensor], mode: str):
    if mode == "inference":
        model.eval()

        def infer(x, y):
            with torch.no_grad():
                return fn(x, y)
        return infer
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train(x, y):
        loss = fn(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    return train


def dynamo_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def contender(name: str, base: nn.Module, mode: str) -> tuple[nn.Module, Callable]:
    model = copy.deepcopy(base)
    if name == "eager":
        fn = model
    elif name == "inductor":
        fn = torch.compile(model, dynamic=True)
    else:
        import disc_torch

        fn = disc_torch.optimize(model)
    return model, make_step(model, fn, mode)


def gradient_check(base: nn.Module, batch: tuple[Any, Any]) -> dict[str, Any]:
    """Every parameter's gradient of one training step, DISC against eager, from fresh
    copies of ``base``, a float64 copy as referee (harness.judge_gradients)."""
    import torch._dynamo

    import disc_torch

    x, y = batch
    eager, disc = copy.deepcopy(base).train(), copy.deepcopy(base).train()
    exact = copy.deepcopy(base).double().train()
    eager(x, y).backward()
    exact(x.double() if x.is_floating_point() else x, y).backward()
    torch._dynamo.reset()
    disc_torch.optimize(disc)(x, y).backward()
    names = [n for n, _ in base.named_parameters()]

    def grads(model: nn.Module) -> list[Any]:
        return [None if p.grad is None else p.grad.double().numpy()
                for p in model.parameters()]

    judged = harness.judge_gradients(names, grads(disc), grads(eager), grads(exact))
    judged["max_grad_rel_err_vs_eager"] = judged.pop("max_grad_rel_err")
    return judged


def own_blas_column() -> dict[str, Any]:
    """DISC against eager, steady state, with the BLAS the runtime picks by measuring (a
    child process: the library is chosen once per process): the second, labelled column."""
    out = subprocess.run(
        [sys.executable, __file__, "--threads", str(THREADS), "--own-blas-steady",
         "--models", ARGS.models, "--modes", ARGS.modes, "--rounds", str(ARGS.rounds),
         "--repeat", str(ARGS.repeat)] + (["--quick"] if ARGS.quick else []),
        env={**os.environ, "DISC_CACHE_DIR": tempfile.mkdtemp(prefix="disc-bench-own-")},
        capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _child_own_blas() -> int:
    rows = {}
    for m in ARGS.models.split(","):
        for mode in ARGS.modes.split(","):
            torch.manual_seed(0)
            base, batches, _ = MODELS[m](ARGS.quick)
            steps = {n: contender(n, base, mode)[1] for n in ("eager", "disc")}
            for step in steps.values():
                harness.first_pass(step, batches, float)
            timed = batches[:: max(len(batches) // 5, 1)]
            medians = harness.steady(steps, timed, ARGS.rounds, lambda r: r, ARGS.repeat)
            rows[f"{m}/{mode}"] = {
                "speedup_vs_eager": round(harness.median_ratio(medians, "eager", "disc"), 3),
                "steady_ms": {n: round(1e3 * statistics.median(v), 3)
                              for n, v in medians.items()},
                "disc_gemm_library": gemm_library()}
    print(json.dumps(rows))
    return 0


def run_case(model_name: str, mode: str, quick: bool, inductor: bool) -> dict[str, Any]:
    import torch._dynamo

    import disc_core.report as report
    import disc_torch

    torch.manual_seed(0)
    base, batches, shapes = MODELS[model_name](quick)
    names = ["eager"] + (["inductor"] if inductor else []) + ["disc"]
    steps, firsts, losses, compiles = {}, {}, {}, {}
    for n in names:
        torch._dynamo.reset()
        report.get_collector().clear()
        before_graphs, before_disc = dynamo_graphs(), disc_torch.compile_count()
        _, step = contender(n, base, mode)
        firsts[n], losses[n] = harness.first_pass(step, batches, float)
        compiles[n] = dynamo_graphs() - before_graphs
        if n == "disc":
            compiles["disc_kernels"] = disc_torch.compile_count() - before_disc
            summary = disc_torch.report().summary()
            coverage = 100.0 * summary.compiled / max(summary.ops, 1)
        steps[n] = step
    # after the timed first passes: the check's compilations must not warm their cache
    grads = gradient_check(base, batches[0]) if mode == "training" else {}
    job_cache = tempfile.mkdtemp(prefix="disc-bench-fresh-")
    fresh = {"eager": fresh_first_pass(model_name, mode, "eager"),
             "disc": fresh_first_pass(model_name, mode, "disc", job_cache)}
    # the same job again in a new process, with the disk cache the first one left
    # (native modules and traced graphs): as the next run of a deployed job starts
    warm_first = fresh_first_pass(model_name, mode, "disc", job_cache)

    worst = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(losses["disc"], losses["eager"]))
    timed = batches[:: max(len(batches) // 5, 1)]
    # eager's GEMM/conv library calls alone, timed as one more contender: the step no
    # compiler calling the same library can beat (benchmarks/library_bound.py)
    library_only = library_bound.library_only_step(steps["eager"], timed)
    # torch returns finished tensors: nothing to wait for
    medians = harness.steady({**{n: steps[n] for n in names}, "library_only": library_only},
                             timed, ARGS.rounds, lambda r: r, ARGS.repeat)

    # then shapes none of them saw: the same steps, each call the first on its shape
    # (the timed shapes only: Inductor may recompile for some, at seconds each)
    fresh_before, graphs_before = disc_torch.compile_count(), dynamo_graphs()
    first_calls = unseen_shape_steps({n: steps[n] for n in names},
                                     [unseen(model_name, timed, cut) for cut in (1, 2)])
    fresh_compiles = disc_torch.compile_count() - fresh_before
    fresh_graphs = dynamo_graphs() - graphs_before

    def ratio(peer: str) -> float:
        return harness.median_ratio(medians, peer, "disc")

    def unseen_ratio(peer: str) -> float:
        return harness.median_ratio(first_calls, peer, "disc")

    return {
        "model": model_name, "mode": mode, "shapes": shapes, "threads": THREADS,
        "disc_gemm_library": gemm_library(),
        "disc_compiles": compiles["disc_kernels"], "disc_graphs": compiles["disc"],
        "inductor_compiles": compiles.get("inductor"),
        "speedup_vs_eager": round(ratio("eager"), 3),
        "speedup_vs_inductor": round(ratio("inductor"), 3) if inductor else None,
        # eager / (eager's library calls alone): the most any same-library compiler gets
        "same_library_ceiling_vs_eager": round(
            harness.median_ratio(medians, "eager", "library_only"), 3),
        # the same for Inductor, whose GEMMs are the same extern MKL calls
        "same_library_ceiling_vs_inductor": (round(
            harness.median_ratio(medians, "inductor", "library_only"), 3) if inductor else None),
        # DISC's step over the library calls alone: what DISC still spends beside them
        # (its attention, fused kernels, the framework's per-step work), as a factor
        "disc_over_library_only": round(
            harness.median_ratio(medians, "disc", "library_only"), 3),
        "total_speedup_vs_inductor": (round(firsts["inductor"] / firsts["disc"], 3)
                                      if inductor else None),
        # every step on a shape never seen before (unseen_shape_steps), after the above
        "unseen_shapes": {
            "steps": len(first_calls["disc"]),
            "speedup_vs_eager": round(unseen_ratio("eager"), 3),
            "speedup_vs_inductor": round(unseen_ratio("inductor"), 3) if inductor else None,
            "median_ms": {n: round(1e3 * statistics.median(v), 3)
                          for n, v in first_calls.items()},
            "disc_compiles": fresh_compiles,
            "dynamo_graphs_all_contenders": fresh_graphs},
        "first_pass_s": {n: round(v, 3) for n, v in firsts.items()},
        "disc_warm_cache_first_pass_s": round(warm_first, 3),
        "first_pass_fresh_process_s": fresh,
        "steady_ms": {n: round(1e3 * statistics.median(v), 3) for n, v in medians.items()},
        "coverage_pct": round(coverage, 1),
        "max_loss_rel_diff_vs_eager": worst,
        **grads,
    }


def gemm_library() -> dict[str, Any]:
    """Which library ran DISC's GEMMs and why (the runtime measures the candidates on the
    CPU at hand, so a ratio depends on it): file names, reason, measured seconds."""
    from disc_runtime.native import blas_choice

    def name(path: str | None) -> str | None:
        return os.path.basename(path) if path else None

    choice = blas_choice()
    return {"library": name(choice.get("library")), "f32_gemm": name(choice.get("f32_gemm")),
            "reason": choice.get("reason"),
            "seconds": {name(k): round(v, 6) for k, v in choice.get("seconds", {}).items()}}


def fresh_first_pass(model_name: str, mode: str, contender: str,
                     cache_dir: str | None = None) -> float:
    """The first pass of ``contender`` in a new process, as a user's job starts, rather
    than after the other contenders in this one; DISC's from ``cache_dir`` (default: an
    empty one). It counts from making the contender (``disc_torch.optimize`` loads the
    traced-graph cache there) to the end of the pass; imports are not counted for anyone.

    The children may write bytecode: an installed wheel has its modules' .pyc compiled
    at install, as torch's are, while a checkout run from a shell that sets
    PYTHONDONTWRITEBYTECODE (this project's does) would compile DISC's lazily imported
    sources afresh in every new process (about 23 ms of a small CNN's warm-cache first
    pass, measured). The cold child writes them; the warm-cache child reads them."""
    env = {**os.environ,
           "DISC_CACHE_DIR": cache_dir or tempfile.mkdtemp(prefix="disc-bench-fresh-")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run(
        [sys.executable, __file__, "--threads", str(THREADS), "--fresh-first-pass", model_name,
         mode, contender] + (["--quick"] if ARGS.quick else []),
        env=env, capture_output=True, text=True, check=True)
    return round(float(json.loads(out.stdout.strip().splitlines()[-1])), 3)


def _child_first_pass(model_name: str, mode: str, contender_name: str) -> int:
    import torch._dynamo  # noqa: F401  (imports are nobody's first pass)
    import torch.optim  # noqa: F401

    import disc_torch.backend  # noqa: F401

    torch.manual_seed(0)
    base, batches, _ = MODELS[model_name](ARGS.quick)
    start = time.perf_counter()
    _, step = contender(contender_name, base, mode)
    setup = time.perf_counter() - start
    seconds, _ = harness.first_pass(step, batches, float)
    print(json.dumps(seconds + setup))
    return 0


def targets(row: dict[str, Any]) -> list[str]:
    want = 1.3 if row["mode"] == "training" else 1.5
    first = row["first_pass_s"]
    out = [f"steady >= {want}x eager: {'PASS' if row['speedup_vs_eager'] >= want else 'MISS'}"
           f" (same-library ceiling x{row['same_library_ceiling_vs_eager']:.2f})",
           f"cold first pass <= 10 s: {'PASS' if first['disc'] <= 10 else 'MISS'}"
           f" (in a fresh process: {row['first_pass_fresh_process_s']['disc']} s, "
           f"{'PASS' if row['first_pass_fresh_process_s']['disc'] <= 10 else 'MISS'})",
           "warm-cache first pass <= 1.5x eager's (new processes each): "
           + ("PASS" if row["disc_warm_cache_first_pass_s"]
              <= 1.5 * row["first_pass_fresh_process_s"]["eager"] else "MISS")]
    if row["mode"] == "training" and row["speedup_vs_inductor"] is not None:
        out.insert(1, f"steady >= 1.2x Inductor: "
                      f"{'PASS' if row['speedup_vs_inductor'] >= 1.2 else 'MISS'} "
                      f"(same-library ceiling x{row['same_library_ceiling_vs_inductor']:.2f})")
    return out


def main() -> int:
    allocator.pin()  # one heap behaviour for every contender (benchmarks/allocator.py)
    if ARGS.fresh_first_pass:
        return _child_first_pass(*ARGS.fresh_first_pass)
    if ARGS.own_blas_steady:
        return _child_own_blas()
    import provenance

    import disc_core
    import disc_torch

    info = provenance.machine(THREADS, {
        "torch": torch.__version__, "disc_core": disc_core.__version__,
        "disc_torch": disc_torch.__version__}, {
        "eager": "torch's MKL (torch.backends.mkl)" if torch.backends.mkl.is_available()
        else "torch's BLAS", "inductor": "torch's MKL (extern mm kernels)",
        "disc": "torch's MKL (DISC_BLAS_TUNE=0: the library disc-torch prefers)",
        "disc_own_blas": "measured per machine: see own_blas[].disc_gemm_library"})
    print(provenance.headline(info), flush=True)
    cache = tempfile.mkdtemp(prefix="disc-bench-cache-")
    os.environ["DISC_CACHE_DIR"] = cache  # cold: DISC compiles everything in this run
    # cold for Inductor too (read whenever Inductor looks up a cache path)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-bench-cache-")
    rows = []
    for m in ARGS.models.split(","):
        for mode in ARGS.modes.split(","):
            rows.append(run_case(m, mode, ARGS.quick, not ARGS.no_inductor))
            r = rows[-1]
            print(f"{m:4} {mode:9} eager x{r['speedup_vs_eager']:.2f}  inductor "
                  f"x{r['speedup_vs_inductor'] or float('nan'):.2f}  first pass s "
                  f"{r['first_pass_s']} warm {r['disc_warm_cache_first_pass_s']} "
                  f"fresh process {r['first_pass_fresh_process_s']}  "
                  f"steady ms {r['steady_ms']} (DISC / library calls alone "
                  f"x{r['disc_over_library_only']:.2f})  compiles disc {r['disc_compiles']} "
                  f"({r['disc_graphs']} graphs) inductor {r['inductor_compiles']}  "
                  f"coverage {r['coverage_pct']}%  loss diff {r['max_loss_rel_diff_vs_eager']:.1e}"
                  + (f"  grad err {r['max_grad_rel_err_vs_eager']:.1e} "
                     f"({r['worst_grad_parameter']}; rounding-level: "
                     f"{sorted(r['grad_rounding_level'])})" if mode == "training" else ""),
                  flush=True)
            u = r["unseen_shapes"]
            print(f"     every step a shape never seen ({u['steps']} steps): eager "
                  f"x{u['speedup_vs_eager']:.2f}  inductor "
                  f"x{u['speedup_vs_inductor'] or float('nan'):.2f}  median ms "
                  f"{u['median_ms']}  DISC compiles {u['disc_compiles']}, graphs traced "
                  f"{u['dynamo_graphs_all_contenders']} (all contenders)", flush=True)
            print("     " + "; ".join(targets(r)), flush=True)
    own = own_blas_column()
    for r in rows:
        r["own_blas"] = own[f"{r['model']}/{r['mode']}"]
        print(f"{r['model']:4} {r['mode']:9} own-BLAS column (not the headline): eager "
              f"x{r['own_blas']['speedup_vs_eager']:.2f} with "
              f"{r['own_blas']['disc_gemm_library']['f32_gemm']}", flush=True)
    print(provenance.finish(info), flush=True)
    harness.write_results(info, rows, "torch_models", ARGS.quick, ARGS.output)
    bad = [r for r in rows if r["max_loss_rel_diff_vs_eager"] > 2e-3
           or r.get("grad_mismatches")]  # (harness.judge_gradients)
    for r in bad:
        print(f"FAIL {r['model']} {r['mode']}: DISC disagrees with eager (loss "
              f"{r['max_loss_rel_diff_vs_eager']:.1e}, gradients "
              f"{r.get('grad_mismatches')})", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
