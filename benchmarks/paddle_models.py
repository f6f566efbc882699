"""Paddle model benchmark (issue 22): DISC vs Paddle dynamic mode vs paddle.jit.to_static
without DISC, on a GPT-style model (hidden 256, 2 layers; examples/paddle_train.py) over 20
sequence lengths and a small CNN over 20 image sizes, inference and training step.

    bash ci/test.sh -e bench-paddle                  # full run (tox env `bench-paddle`)
    python benchmarks/paddle_models.py --quick

Contenders, each on its own copy of the same weights, same threads, same inputs:
``dynamic`` (Paddle's eager mode), ``static`` (``paddle.jit.to_static`` with every input
dim dynamic, full graph: one trace; Paddle's CPU wheel has no compiler, CINN is off) and
``disc`` (``disc_paddle.compile``: the same programs with DISC clusters, whose GEMMs run
Paddle's own MKL: the headline, at a fixed GEMM library) and ``disc_own_blas`` (the same,
GEMMs on disc-runtime's library choice: a second, labelled column). Every contender
runs the whole stream once (the *first pass*: tracing and compilation included, as a user
sees it; DISC starts from an empty compile cache, its launch-op library built beforehand,
an install-time cost), then the steady state is timed in interleaved rounds over five shapes
of the stream (benchmarks/model_harness.py). The training step is forward + backward + SGD.

Results: a table on stdout and benchmarks/results/paddle_models.json (paddle_models.quick.json
for --quick), with the machine (CPU model and flags, threads), date, commit, versions and
the GEMM library of each contender. Targets print as PASS/MISS; a missed target does not
fail the run, a result that disagrees with Paddle does (exit 1), and so does, in training,
the gradient of any parameter on the first batch (judged as the other model benchmarks
judge theirs).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import allocator  # benchmarks/, the script's own directory
import model_harness as harness  # benchmarks/, the script's own directory

ROOT = Path(__file__).resolve().parents[1]
ARGS = harness.parser(__doc__.split("\n\n")[0], "small models, 6 shapes (smoke run)").parse_args()
THREADS = harness.thread_count(ARGS)
os.environ["DISC_CACHE_DIR"] = tempfile.mkdtemp(prefix="disc-bench-paddle-cache-")  # cold
os.environ.setdefault("GLOG_minloglevel", "2")

import numpy as np  # noqa: E402
import paddle  # noqa: E402

paddle.base.core.set_num_threads(THREADS)

import disc_paddle  # noqa: E402
from disc_paddle import custom_op  # noqa: E402

sys.path.insert(0, str(ROOT / "examples"))
from paddle_train import GPT, SmallCNN  # noqa: E402


def machine() -> dict[str, Any]:
    """What the numbers were measured on (benchmarks/provenance.py), with each contender's
    GEMM library."""
    import provenance

    import disc_core
    from disc_runtime.native import blas_choice

    return provenance.machine(THREADS, {
        "paddlepaddle": paddle.__version__, "disc_core": disc_core.__version__,
        "disc_paddle": disc_paddle.__version__}, {
        "dynamic": "Paddle's MKL (libmklml_intel.so, cblas_sgemm)",
        "static": "Paddle's MKL (libmklml_intel.so, cblas_sgemm)",
        "disc": custom_op.use_gemm("paddle"),
        "disc_own_blas": {"now": custom_op.use_gemm("disc"), "choice": blas_choice()},
    })


def gpt_case(mode: str) -> tuple[Callable[[], Any], list[tuple[Any, Any]], str]:
    """(model factory, batches, loss) of the GPT model."""
    hidden, layers = (64, 1) if ARGS.quick else (256, 2)
    lengths = [16 + 49 * i for i in range(6)] if ARGS.quick else [16 + 13 * i for i in range(20)]
    rng = np.random.default_rng(0)
    vocab = 512
    batches = []
    for s in lengths:
        idx = rng.integers(0, vocab, (4, s + 1))
        batches.append((paddle.to_tensor(idx[:, :-1]), paddle.to_tensor(idx[:, 1:])))

    def make() -> Any:
        return GPT(vocab=vocab, hidden=hidden, heads=4, layers=layers)

    return make, batches, "lm"


def cnn_case(mode: str) -> tuple[Callable[[], Any], list[tuple[Any, Any]], str]:
    sizes = [16 + 4 * i for i in range(6)] if ARGS.quick else [16 + 2 * i for i in range(20)]
    rng = np.random.default_rng(1)
    batches = [(paddle.to_tensor(rng.standard_normal((8, 3, s, s)).astype("float32")),
                paddle.to_tensor(rng.integers(0, 10, (8,)))) for s in sizes]

    return lambda: SmallCNN(width=8 if ARGS.quick else 16), batches, "classify"


class Wrapped(paddle.nn.Layer):
    """The model and its loss as one layer, so to_static and DISC capture the loss too
    (written out, not a closure: to_static converts the code of the methods it calls,
    and a lambda's ``x.shape`` would stay a static -1)."""

    def __init__(self, model: Any, loss: str):
        super().__init__()
        self.model = model
        self.loss = loss

    def forward(self, x, y):
        if self.loss == "lm":
            return self.model(x, y)
        return paddle.nn.functional.cross_entropy(self.model(x), y)


def contender(name: str, make: Callable[[], Any], state: dict[str, Any],
              loss: str, mode: str) -> Callable[[Any, Any], Any]:
    model = make()
    model.set_state_dict(state)
    layer = Wrapped(model, loss)
    if mode == "inference":
        layer.eval()
    if name == "static":
        from paddle.static import InputSpec

        specs = None  # per call rank/dtype: every dim dynamic, as DISC does

        def static_step(x: Any, y: Any) -> Any:
            nonlocal specs, fn
            if specs is None:
                specs = [InputSpec([None] * len(x.shape), str(x.dtype).split(".")[-1]),
                         InputSpec([None] * len(y.shape), str(y.dtype).split(".")[-1])]
                fn = paddle.jit.to_static(layer.forward, input_spec=specs, full_graph=True)
            return fn(x, y)

        fn: Any = None
        forward = static_step
    elif name.startswith("disc"):
        # "disc": DISC's GEMMs on Paddle's own MKL (the headline: same library);
        # "disc_own_blas": on disc-runtime's choice (a second, labelled column)
        compiled = disc_paddle.compile(layer).forward
        which = "disc" if name == "disc_own_blas" else "paddle"

        def forward(x: Any, y: Any) -> Any:
            custom_op.use_gemm(which)
            return compiled(x, y)
    else:
        forward = layer
    if mode == "inference":
        def infer(x: Any, y: Any) -> Any:
            with paddle.no_grad():
                return forward(x, y)
        return infer
    opt = paddle.optimizer.SGD(0.01, parameters=layer.parameters())

    def train(x: Any, y: Any) -> Any:
        out = forward(x, y)
        out.backward()
        opt.step()
        opt.clear_grad()
        return out
    return train


def gradients(name: str, make: Callable[[], Any], state: dict[str, Any],
              loss: str, batch: tuple[Any, Any], dtype: str = "float32"
              ) -> tuple[list[str], list[np.ndarray]]:
    model = make()
    model.set_state_dict(state)
    if dtype != "float32":
        model = model.to(dtype=dtype)
    layer = Wrapped(model, loss)
    if name == "disc":
        layer = disc_paddle.compile(layer)
    x, y = batch
    if dtype != "float32" and x.dtype == paddle.float32:
        x = x.astype(dtype)
    out = layer(x, y)
    out.backward()
    names = [n for n, _ in model.named_parameters()]
    return names, [None if p.grad is None else p.grad.numpy().astype(np.float64)
                   for p in model.parameters()]


def coverage(graphs: list[Any]) -> float:
    nodes = [n for g in graphs for n in g.nodes]
    return 100.0 * sum(n.status.value == "compiled" for n in nodes) / max(len(nodes), 1)


def run_case(model_name: str, mode: str) -> dict[str, Any]:
    make, batches, loss = (gpt_case if model_name == "gpt" else cnn_case)(mode)
    paddle.seed(0)
    state = make().state_dict()
    names = ["dynamic", "static", "disc", "disc_own_blas"]
    steps: dict[str, Any] = {}
    firsts: dict[str, float] = {}
    outs: dict[str, list[np.ndarray]] = {}
    graphs_before = len(disc_paddle.report().graphs)
    compiles_before = disc_paddle.compile_count()
    later_compiles = 0
    for n in names:
        steps[n] = contender(n, make, state, loss, mode)
        t1, o1 = harness.first_pass(steps[n], batches[:1], lambda t: t.numpy())
        after_first = disc_paddle.compile_count()
        t2, o2 = harness.first_pass(steps[n], batches[1:], lambda t: t.numpy())
        if n == "disc":
            later_compiles = disc_paddle.compile_count() - after_first
        firsts[n], outs[n] = t1 + t2, o1 + o2
    compiles = disc_paddle.compile_count() - compiles_before
    graphs = disc_paddle.report().graphs[graphs_before:]
    worst = {n: max(float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-3)))
                    for a, b in zip(outs[n], outs["dynamic"])) for n in names if n != "dynamic"}
    grads: dict[str, Any] = {}
    if mode == "training":
        pnames, want = gradients("dynamic", make, state, loss, batches[0])
        _, exact = gradients("dynamic", make, state, loss, batches[0], "float64")
        _, got = gradients("disc", make, state, loss, batches[0])
        judged = harness.judge_gradients(pnames, got, want, exact)
        grads = {"max_grad_rel_err_vs_dynamic": judged["max_grad_rel_err"],
                 "worst_grad_parameter": judged["worst_grad_parameter"],
                 "grad_rounding_level": judged["grad_rounding_level"],
                 "grad_mismatches": judged["grad_mismatches"]}
    timed = batches[:: max(len(batches) // 5, 1)]
    medians = harness.steady(steps, timed, ARGS.rounds, lambda t: t.numpy(), ARGS.repeat)
    fallbacks: dict[str, int] = {}
    for g in graphs:
        for node in g.nodes:
            if node.status.value != "compiled":
                key = f"{node.op} ({node.reason.value if node.reason else '?'})"
                fallbacks[key] = fallbacks.get(key, 0) + 1
    return {
        "model": model_name, "mode": mode,
        "shapes": [str(list(x.shape)) for x, _ in batches], "threads": THREADS,
        "disc_compiles": compiles,
        # compilations after the first shape: 0 when one compile serves every shape
        "disc_compiles_after_first_shape": later_compiles,
        "disc_programs": len(graphs),
        "speedup_vs_dynamic": round(harness.median_ratio(medians, "dynamic", "disc"), 3),
        "speedup_vs_static": round(harness.median_ratio(medians, "static", "disc"), 3),
        # a second column, not the claim: DISC's GEMMs on disc-runtime's library choice
        "own_blas_speedup_vs_dynamic": round(
            harness.median_ratio(medians, "dynamic", "disc_own_blas"), 3),
        "static_vs_dynamic": round(harness.median_ratio(medians, "dynamic", "static"), 3),
        "coverage_pct": round(coverage(graphs), 1),
        "fallbacks": dict(sorted(fallbacks.items(), key=lambda kv: -kv[1])),
        "first_pass_s": {n: round(v, 3) for n, v in firsts.items()},
        "steady_ms": {n: round(1e3 * statistics.median(v), 3) for n, v in medians.items()},
        "steady_ms_per_shape": {n: [round(1e3 * s, 3) for s in v] for n, v in medians.items()},
        "steady_shapes": [str(list(x.shape)) for x, _ in timed],
        "max_rel_diff_vs_dynamic": worst,
        **grads,
    }


def targets(row: dict[str, Any]) -> list[str]:
    out = []
    if row["model"] == "gpt":
        want = 1.5 if row["mode"] == "inference" else 1.3
        out.append(f"steady >= {want}x dynamic: "
                   f"{'PASS' if row['speedup_vs_dynamic'] >= want else 'MISS'} "
                   f"(x{row['speedup_vs_dynamic']}, DISC's GEMMs on Paddle's MKL)")
        out.append(f"coverage >= 95%: {'PASS' if row['coverage_pct'] >= 95 else 'MISS'} "
                   f"({row['coverage_pct']}%)")
    first = row["first_pass_s"]["disc"]
    out.append(f"first pass incl. compile <= 10 s: {'PASS' if first <= 10 else 'MISS'} "
               f"({first} s)")
    later = row["disc_compiles_after_first_shape"]
    out.append(f"one compile per program and rank: {'PASS' if later == 0 else 'MISS'} "
               f"({row['disc_compiles']} compilations, all on the first shape, "
               f"{later} on the {len(row['shapes']) - 1} later shapes)")
    return out


def main() -> int:
    allocator.pin()  # one heap behaviour for every contender (benchmarks/allocator.py)
    load_start = os.getloadavg()
    from disc_paddle import custom_op

    t0 = time.perf_counter()
    custom_op.load_library()
    op_build_s = round(time.perf_counter() - t0, 2)
    print(f"disc_launch op library built in {op_build_s} s (not in the timings below)")
    info = machine()
    import provenance

    print(provenance.headline(info), flush=True)
    rows = []
    for model_name in ("gpt", "cnn"):
        for mode in ARGS.modes.split(","):
            r = run_case(model_name, mode)
            rows.append(r)
            print(f"{model_name:4} {mode:9} vs dynamic x{r['speedup_vs_dynamic']:.2f} "
                  f"(own BLAS x{r['own_blas_speedup_vs_dynamic']:.2f})  vs "
                  f"to_static x{r['speedup_vs_static']:.2f}  (to_static vs dynamic "
                  f"x{r['static_vs_dynamic']:.2f})  first pass s {r['first_pass_s']}  "
                  f"steady ms {r['steady_ms']}  compiles {r['disc_compiles']}  coverage "
                  f"{r['coverage_pct']}%  max diff {r['max_rel_diff_vs_dynamic']}"
                  + (f"  grad err {r['max_grad_rel_err_vs_dynamic']}"
                     if mode == "training" else ""), flush=True)
            print("     " + "; ".join(targets(r)), flush=True)
            if r["fallbacks"]:
                print(f"     fallbacks: {r['fallbacks']}", flush=True)
    load_end = os.getloadavg()
    print(provenance.finish(info), flush=True)
    result = {"machine": info, "op_library_build_s": op_build_s,
              "load_avg_1m": {"start": round(load_start[0], 2), "end": round(load_end[0], 2)},
              "rows": rows}
    out = ARGS.output or ROOT / "benchmarks" / "results" / (
        "paddle_models.quick.json" if ARGS.quick else "paddle_models.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    bad = [r for r in rows if max(r["max_rel_diff_vs_dynamic"].values()) > 2e-3
           or r.get("grad_mismatches")]
    for r in bad:
        print(f"FAIL {r['model']} {r['mode']}: DISC disagrees with Paddle (results "
              f"{r['max_rel_diff_vs_dynamic']}, gradients {r.get('grad_mismatches')})",
              file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
