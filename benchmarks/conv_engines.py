"""Convolution engines per shape: DISC with oneDNN's convolution primitive against DISC's
im2col + GEMM lowering and PyTorch eager, forward (conv + bias + ReLU) and the backward
primitives (input and filter gradients), side by side in one process.

    python benchmarks/conv_engines.py [--quick] [--threads N] [--output FILE]

Contenders, timed in interleaved rounds (the best round counts):

* disc_onednn: a core graph of the problem compiled once with symbolic N, H, W; its
  convolution runs as oneDNN's primitive (bias and ReLU as post-ops forward; backward-data
  and backward-weights primitives backward);
* disc_im2col: the same graph compiled with ``DISC_ONEDNN_CONV=0`` (im2col gather fused
  into one GEMM per image, bias/ReLU as its epilogue; torch's MKL for the GEMMs);
* eager: ``F.relu(F.conv2d(x, w, b, stride, padding))`` forward and
  ``aten.convolution_backward`` backward: torch's own oneDNN (mkldnn).

Shapes cover batch 1..32, channels 3..256, 1x1 / 3x3 / 7x7 kernels, stride 1 and 2: the
question is on which shapes oneDNN loses to the im2col path (it would then be chosen per
shape at run time). Every result is checked against eager. Needs oneDNN
(``disc-runtime[onednn]``). Figures from a shared machine are indicative only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import allocator  # noqa: E402  (benchmarks/, the script's own directory)
import provenance  # noqa: E402  (benchmarks/, the script's own directory)

# (batch, in channels, out channels, spatial size, kernel, stride)
SHAPES = [(1, 3, 16, 32, 3, 1), (8, 3, 32, 64, 3, 1), (4, 3, 64, 112, 7, 2),
          (4, 32, 32, 8, 3, 1), (4, 32, 32, 32, 3, 1), (4, 32, 32, 96, 3, 1),
          (8, 16, 32, 32, 3, 1), (8, 32, 64, 32, 3, 2), (32, 64, 64, 16, 3, 1),
          (1, 128, 128, 8, 3, 1), (4, 256, 256, 14, 3, 1), (16, 64, 256, 14, 1, 1),
          (16, 256, 64, 14, 1, 1), (8, 128, 256, 28, 1, 2), (2, 64, 64, 56, 3, 1)]
QUICK = (0, 3, 4, 7, 11, 13)
CONTENDERS = ("disc_onednn", "disc_im2col", "eager")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="6 shapes, fewer rounds")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--modes", default="forward,backward")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--shapes", default=None,
                   help="indices into the shape list, comma-separated (default: all)")
    p.add_argument("--output", type=Path, default=None)
    return p.parse_args(argv)


ARGS = parse_args() if __name__ == "__main__" else parse_args([])
torch, THREADS = provenance.import_torch_same_library(ARGS.threads)

import numpy as np  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def forward_graph(c: int, o: int, k: int, s: int):
    from disc_core import GraphBuilder

    b = GraphBuilder("conv_fwd")
    N, H, W = b.symbol("N"), b.symbol("H"), b.symbol("W")
    x = b.input("x", "f32", [N, c, H, W])
    w = b.input("w", "f32", [o, c, k, k])
    bias = b.input("bias", "f32", [o])
    y = b.convolution(x, w, window_strides=[s, s], padding=[[k // 2, k // 2]] * 2,
                      lhs_dilation=[1, 1], rhs_dilation=[1, 1], feature_group_count=1,
                      batch_group_count=1, input_layout="NCHW", kernel_layout="OIHW",
                      output_layout="NCHW")
    y = b.add(y, b.broadcast_in_dim(bias, shape=list(y.shape), broadcast_dimensions=[1]))
    return b.build(b.max(y, b.full(0.0, "f32", list(y.shape))))


def backward_graph(c: int, o: int, k: int, s: int):
    from disc_core import GraphBuilder

    b = GraphBuilder("conv_bwd")
    N, H, W = b.symbol("N"), b.symbol("H"), b.symbol("W")
    x = b.input("x", "f32", [N, c, H, W])
    w = b.input("w", "f32", [o, c, k, k])
    kw = dict(window_strides=[s, s], padding=[[k // 2, k // 2]] * 2, rhs_dilation=[1, 1],
              feature_group_count=1, input_layout="NCHW", kernel_layout="OIHW",
              output_layout="NCHW")
    y = b.convolution(x, w, lhs_dilation=[1, 1], batch_group_count=1, **kw)
    dy = b.input("dy", "f32", list(y.shape))
    return b.build(b.conv_input_grad(dy, w, x.shape, **kw),
                   b.conv_filter_grad(x, dy, w.shape, **kw))


def compiled(graph, onednn: bool) -> Callable[..., Any]:
    """``graph`` compiled now (the option is read while compiling), as a function of its
    arrays: the executable itself, as a bridge calls it."""
    from disc_core import Compiler

    os.environ["DISC_ONEDNN_CONV"] = "1" if onednn else "0"
    try:
        exe = Compiler(target="native").compile(graph)
    finally:
        os.environ.pop("DISC_ONEDNN_CONV", None)
    return lambda *arrays: exe.run(list(arrays))


def best(calls: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    for f in calls.values():
        f()
    t0 = time.perf_counter()
    next(iter(calls.values()))()
    reps = max(1, int(0.02 / max(time.perf_counter() - t0, 1e-7)))
    times: dict[str, list[float]] = {n: [] for n in calls}
    order = list(calls)
    for r in range(rounds):
        for n in order[r % len(order):] + order[:r % len(order)]:
            t = time.perf_counter()
            for _ in range(reps):
                calls[n]()
            times[n].append((time.perf_counter() - t) / reps)
    return {n: min(v) for n, v in times.items()}


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def run_shape(shape: tuple[int, ...], mode: str, rounds: int) -> dict[str, Any]:
    n, c, o, hw, k, s = shape
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, c, hw, hw, generator=g)
    w = torch.randn(o, c, k, k, generator=g) * 0.1
    b = torch.randn(o, generator=g)
    p = k // 2
    if mode == "forward":
        graph = forward_graph(c, o, k, s)
        args = [x.numpy(), w.numpy(), b.numpy()]
        want = [F.relu(F.conv2d(x, w, b, s, p)).numpy()]
        eager = lambda: F.relu(F.conv2d(x, w, b, s, p))  # noqa: E731
    else:
        graph = backward_graph(c, o, k, s)
        dy = torch.randn(F.conv2d(x, w, None, s, p).shape, generator=g)
        args = [x.numpy(), w.numpy(), dy.numpy()]
        back = torch.ops.aten.convolution_backward
        call = (dy, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], 1,
                [True, True, False])
        dx, dw, _ = back(*call)
        want = [dx.numpy(), dw.numpy()]
        eager = lambda: back(*call)  # noqa: E731
    fns = {"disc_onednn": compiled(graph, True), "disc_im2col": compiled(graph.clone(), False)}
    errors = {}
    for name, fn in fns.items():
        got = fn(*args)
        errors[name] = max(rel(a, b) for a, b in zip(got, want, strict=True))
        if errors[name] > 1e-4:
            raise SystemExit(f"{name} disagrees with eager on {shape} {mode}: {errors[name]}")
    calls = {"disc_onednn": lambda: fns["disc_onednn"](*args),
             "disc_im2col": lambda: fns["disc_im2col"](*args), "eager": eager}
    secs = best(calls, rounds)
    return {"shape": list(shape), "mode": mode, "seconds": secs,
            "onednn_vs_im2col": secs["disc_im2col"] / secs["disc_onednn"],
            "onednn_vs_eager": secs["eager"] / secs["disc_onednn"],
            "im2col_vs_eager": secs["eager"] / secs["disc_im2col"],
            "max_rel_error_vs_eager": errors}


def main() -> int:
    allocator.pin()  # one heap behaviour for every contender (benchmarks/allocator.py)
    from disc_core.native.onednn_conv import onednn_conv_library

    if onednn_conv_library() is None:
        print("oneDNN is not installed (pip install disc-runtime[onednn]): nothing to compare")
        return 1
    pick = [int(i) for i in ARGS.shapes.split(",")] if ARGS.shapes else (
        list(QUICK) if ARGS.quick else range(len(SHAPES)))
    shapes = [SHAPES[i] for i in pick]
    rounds = ARGS.rounds or (3 if ARGS.quick else 7)
    rows = [run_shape(sh, m, rounds) for m in ARGS.modes.split(",") for sh in shapes]
    import disc_core

    record = provenance.machine(THREADS, {"torch": torch.__version__,
                                          "disc-core": disc_core.__version__},
                                {"disc_onednn": provenance.library_name(onednn_conv_library()),
                                 "disc_im2col": "torch's MKL (DISC_BLAS_TUNE=0)",
                                 "eager": "torch's own oneDNN (mkldnn)"})
    print(provenance.headline(record))
    print("shared machine: figures are indicative")
    print(f"{'mode':9} {'N,C,O,HW,k,s':22} " + " ".join(f"{n:>12}" for n in CONTENDERS)
          + "  oneDNN/im2col  oneDNN/eager  im2col/eager")
    for r in rows:
        cols = " ".join(f"{r['seconds'][n] * 1e6:10.0f}us" for n in CONTENDERS)
        print(f"{r['mode']:9} {','.join(map(str, r['shape'])):22} {cols}  "
              f"{r['onednn_vs_im2col']:12.2f}x {r['onednn_vs_eager']:12.2f}x "
              f"{r['im2col_vs_eager']:12.2f}x")
    for m in ARGS.modes.split(","):
        sel = [r for r in rows if r["mode"] == m]
        print(f"{m}: median speedup of oneDNN over im2col "
              f"{statistics.median(r['onednn_vs_im2col'] for r in sel):.2f}x, over eager "
              f"{statistics.median(r['onednn_vs_eager'] for r in sel):.2f}x; oneDNN slower "
              f"than im2col on {sum(r['onednn_vs_im2col'] < 1 for r in sel)} of {len(sel)}")
    if ARGS.output:
        ARGS.output.write_text(json.dumps({"machine": record, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
