"""PyTorch's own op test samples (OpInfo) through ``torch.compile(backend="disc")``.

A third-party op suite for disc-torch: every OpInfo op with CPU samples of one dtype
(``--dtype``: float32 by default, float64, int32, int64; random, linear-algebra and FFT ops
aside) runs its first samples eagerly and through DISC, dynamic shapes on, forward and
(``--grad``, floating dtypes) input gradients. DISC may fall back; it may never give
a different result or raise where eager and dynamo's own ``eager`` backend do not.

    bash ci/test.sh -e opinfo                       # forward, then gradients
    python ci/opinfo_sweep.py --grad --ops trapz,split --min-cluster-size 1
    python ci/opinfo_sweep.py --dtype int32

Prints one line per op and a summary; writes the findings as JSON (``--output``); exits 1
on any wrong result or DISC-only failure.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import warnings
from typing import Any

SKIP = ("rand", "normal", "uniform", "bernoulli", "dropout", "multinomial", "cauchy",
        "exponential", "geometric", "log_normal", "empty", "item", "allclose", "equal",
        "nonzero_static", "sparse", "_refs", "jiterator", "svd", "eig", "lstsq", "pca",
        "lobpcg", "linalg", "cholesky", "lu", "qr", "inverse", "det", "solve", "pinv",
        "matrix_exp", "fft", "stft", "istft")
DTYPES = ("float32", "float64", "int32", "int64")


def tolerance(t: Any) -> tuple[float, float]:
    """(rtol, atol) a forward result is held to, by the result's own dtype (an integer
    input may give a float result): integers and booleans exact."""
    import torch

    if not t.dtype.is_floating_point and not t.dtype.is_complex:
        return 0.0, 0.0
    return (1e-7, 1e-7) if t.dtype in (torch.float64, torch.complex128) else (1e-4, 1e-4)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--grad", action="store_true", help="also compare input gradients")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES),
                   help="dtype of the samples (default float32)")
    p.add_argument("--samples", type=int, default=2, help="samples per op (default 2)")
    p.add_argument("--ops", default="", help="comma list of op names (default: all)")
    p.add_argument("--min-cluster-size", type=int, default=1,
                   help="DISC's min_cluster_size (default 1: a single op is compiled)")
    p.add_argument("--timeout", type=int, default=90, help="seconds per sample")
    p.add_argument("--output", default="opinfo_sweep.json")
    return p.parse_args()


def tensors(x: Any) -> list:
    import torch

    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for e in x for t in tensors(e)]
    return []


class Timeout(Exception):
    pass


def _alarm(*_: Any) -> None:
    raise Timeout


def main() -> int:
    args = parse_args()
    warnings.filterwarnings("ignore")
    import torch
    import torch._dynamo
    from torch.testing._internal.common_methods_invocations import op_db

    import disc_torch

    torch._dynamo.config.cache_size_limit = 64
    dtype = getattr(torch, args.dtype)
    if args.grad and not dtype.is_floating_point:
        print(f"--grad needs a floating-point --dtype, not {args.dtype}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGALRM, _alarm)
    wanted = set(filter(None, args.ops.split(",")))
    ops = [o for o in op_db if dtype in o.supported_dtypes("cpu")
           and not any(w in o.name for w in SKIP) and (not wanted or o.name in wanted)
           and (o.supports_autograd or not args.grad)]
    found: dict[str, list] = {"pass": [], "wrong": [], "disc_failure": [], "skipped": []}
    start = time.time()
    for o in ops:
        name = o.name + (f".{o.variant_test_name}" if o.variant_test_name else "")
        try:
            samples = list(o.sample_inputs("cpu", dtype,
                                           requires_grad=args.grad))[:args.samples]
        except Exception:
            continue
        for i, s in enumerate(samples):
            tag = f"{name}[{i}]"
            leaves = [t for t in tensors(s.input) + tensors(list(s.args)) if t.requires_grad]

            def fn(inp: Any, *rest: Any, _s: Any = s, _o: Any = o) -> Any:
                return _o.op(inp, *rest, **_s.kwargs)

            def run(f: Any, s: Any = s, leaves: list = leaves) -> tuple:
                out = f(s.input, *s.args)
                outs = [t for t in tensors(out) if t.requires_grad and t.dtype.is_floating_point]
                if not (args.grad and leaves and outs):
                    return out, None
                loss = sum((t * torch.linspace(-1, 1, t.numel()).reshape(t.shape)).sum()
                           for t in outs)
                return out, torch.autograd.grad(loss, leaves, allow_unused=True)

            try:
                want = run(fn)
            except Exception:
                found["skipped"].append(tag)
                continue
            torch._dynamo.reset()
            signal.alarm(args.timeout)
            try:
                got = run(disc_torch.optimize(fn, min_cluster_size=args.min_cluster_size))
                signal.alarm(0)
            except Exception as exc:
                signal.alarm(0)
                torch._dynamo.reset()
                try:  # dynamo's own failure is not DISC's
                    run(torch.compile(fn, backend="eager", dynamic=True))
                except Exception:
                    found["skipped"].append(tag)
                    continue
                found["disc_failure"].append([tag, f"{type(exc).__name__}: {exc}"[:400]])
                continue
            try:
                w_leaves = tensors(want[0])
                rtol, atol = tolerance(w_leaves[0]) if w_leaves else (1e-4, 1e-4)
                torch.testing.assert_close(got[0], want[0], rtol=rtol, atol=atol,
                                           equal_nan=True)
                for g, w in zip(got[1] or (), want[1] or ()):
                    if g is not None or w is not None:
                        torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-3, equal_nan=True)
                found["pass"].append(tag)
            except Exception as exc:
                found["wrong"].append([tag, str(exc)[:400]])
        print(f"{name}: {len(found['pass'])} pass, {len(found['wrong'])} wrong, "
              f"{len(found['disc_failure'])} DISC failures", flush=True)
    summary = {k: len(v) for k, v in found.items()}
    print(f"summary ({args.dtype}, {'forward+grad' if args.grad else 'forward'}, "
          f"{time.time() - start:.0f} s):"
          f" {summary}")
    for tag, detail in found["wrong"] + found["disc_failure"]:
        print(f"  {tag}: {detail.splitlines()[0] if detail else ''}")
    with open(args.output, "w") as f:
        json.dump(found, f, indent=1)
    return 1 if found["wrong"] or found["disc_failure"] else 0


if __name__ == "__main__":
    sys.exit(main())
