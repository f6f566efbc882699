"""PyTorch's own op test samples (OpInfo) through ``torch.compile(backend="disc")``.

A third-party op suite for disc-torch: every OpInfo op with CPU samples of one dtype
(``--dtype``: float32 by default, float64, int32, int64; random, linear-algebra and FFT ops
aside) runs its first samples eagerly and through DISC, dynamic shapes on, forward and
(``--grad``, floating dtypes) input gradients. One compiled function serves all samples of
an op, so a sample of a rank seen before runs on a graph compiled for other shapes.
``--isolate`` puts ops forced to stay in torch around the op (``neg`` twice on every
floating input and output, excluded from DISC), so its clusters sit next to eager ops
in the forward and the backward graph. DISC may fall back; it may never give a different
result or raise where eager and dynamo's own ``eager`` backend do not.

    bash ci/test.sh -e opinfo                       # forward, gradients, isolated gradients
    python ci/opinfo_sweep.py --grad --ops trapz,split --min-cluster-size 1
    python ci/opinfo_sweep.py --grad --isolate
    python ci/opinfo_sweep.py --dtype int32

Prints one line per op and a summary; writes the findings as JSON (``--output``); exits 1
on any wrong result or DISC-only failure. disc-torch's tests import :func:`sweep` for a
fast slice of the same checks.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import time
import warnings
from typing import Any

#: OpInfo names containing one of these are not swept (random, uninitialized, linear
#: algebra and FFT ops)...
SKIP = ("rand", "normal", "uniform", "bernoulli", "dropout", "multinomial", "cauchy",
        "exponential", "geometric", "log_normal", "rrelu", "empty", "item", "allclose",
        "equal", "nonzero_static", "sparse", "_refs", "jiterator", "lstsq", "lobpcg",
        "linalg", "cholesky", "inverse", "solve", "pinv", "matrix_exp", "fft", "stft")
#: ...nor those with one of these as a word of their name (as substrings they would
#: also match relu, gelu, silu, rsqrt: the sweep once skipped all of those)
SKIP_WORDS = {"svd", "eig", "pca", "lu", "qr", "det"}
DTYPES = ("float32", "float64", "int32", "int64")
#: the op that --isolate wraps around every floating input and output, excluded from DISC
ISOLATING_OP = "aten.neg"


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
    p.add_argument("--isolate", action="store_true",
                   help="surround the op with ops that stay in torch")
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


def _isolated(x: Any) -> Any:
    """``x`` with every floating tensor passed through neg twice (same values)."""
    import torch

    if isinstance(x, torch.Tensor):
        return x.neg().neg() if x.dtype.is_floating_point else x
    if isinstance(x, (list, tuple)):
        return type(x)(_isolated(e) for e in x)
    return x


def _run(f: Any, sample: Any, grad: bool) -> tuple:
    """f's result on the sample and, with ``grad``, the gradients of a weighted sum of its
    floating outputs with respect to the sample's leaves that require them."""
    import torch

    leaves = [t for t in tensors(sample.input) + tensors(list(sample.args)) if t.requires_grad]
    out = f(sample.input, *sample.args, **sample.kwargs)
    outs = [t for t in tensors(out) if t.requires_grad and t.dtype.is_floating_point]
    if not (grad and leaves and outs):
        return out, None
    loss = sum((t * torch.linspace(-1, 1, t.numel()).reshape(t.shape)).sum() for t in outs)
    return out, torch.autograd.grad(loss, leaves, allow_unused=True)


def sweep(ops: list[Any], dtype: Any, *, grad: bool = False, isolate: bool = False,
          samples: int = 2, min_cluster_size: int = 1, timeout: int = 90,
          log: Any = print) -> dict[str, list]:
    """Run OpInfo ``ops`` eagerly and through DISC; returns {"pass", "wrong",
    "disc_failure", "skipped"} lists of sample tags (with details for the failures)."""
    import torch
    import torch._dynamo

    import disc_torch

    torch._dynamo.config.cache_size_limit = 64
    signal.signal(signal.SIGALRM, _alarm)
    options: dict[str, Any] = {"min_cluster_size": min_cluster_size}
    if isolate:
        options["excluded_ops"] = [ISOLATING_OP]
    found: dict[str, list] = {"pass": [], "wrong": [], "disc_failure": [], "skipped": []}
    for o in ops:
        name = o.name + (f".{o.variant_test_name}" if o.variant_test_name else "")
        try:
            cases = list(o.sample_inputs("cpu", dtype, requires_grad=grad))[:samples]
        except Exception:
            continue

        def fn(inp: Any, *rest: Any, _o: Any = o, **kwargs: Any) -> Any:
            if isolate:
                return _isolated(_o.op(_isolated(inp), *_isolated(rest), **kwargs))
            return _o.op(inp, *rest, **kwargs)

        torch._dynamo.reset()
        compiled = disc_torch.optimize(fn, **options)  # one per op: later samples reuse it
        for i, s in enumerate(cases):
            tag = f"{name}[{i}]"
            try:
                want = _run(fn, s, grad)
            except Exception:
                found["skipped"].append(tag)
                continue
            signal.alarm(timeout)
            try:
                got = _run(compiled, s, grad)
                signal.alarm(0)
            except Exception as exc:
                signal.alarm(0)
                try:  # dynamo's own failure is not DISC's
                    torch._dynamo.reset()
                    _run(torch.compile(fn, backend="eager", dynamic=True), s, grad)
                except Exception:
                    found["skipped"].append(tag)
                    continue
                finally:
                    torch._dynamo.reset()
                    compiled = disc_torch.optimize(fn, **options)
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
        log(f"{name}: {len(found['pass'])} pass, {len(found['wrong'])} wrong, "
            f"{len(found['disc_failure'])} DISC failures")
    return found


def select(names: set[str], dtype: Any, grad: bool) -> list[Any]:
    """The OpInfo ops swept: CPU samples of ``dtype``, not random, linear algebra or FFT,
    differentiable when ``grad``; only ``names`` (op or op.variant) when given."""
    from torch.testing._internal.common_methods_invocations import op_db

    def full_name(o: Any) -> str:
        return o.name + (f".{o.variant_test_name}" if o.variant_test_name else "")

    def skipped(name: str) -> bool:
        return any(w in name for w in SKIP) or bool(
            SKIP_WORDS & set(re.split(r"[._]", name)))

    return [o for o in op_db if dtype in o.supported_dtypes("cpu") and not skipped(o.name)
            and (not names or o.name in names or full_name(o) in names)
            and (o.supports_autograd or not grad)]


def main() -> int:
    args = parse_args()
    warnings.filterwarnings("ignore")
    import torch

    dtype = getattr(torch, args.dtype)
    if args.grad and not dtype.is_floating_point:
        print(f"--grad needs a floating-point --dtype, not {args.dtype}", file=sys.stderr)
        return 2
    start = time.time()
    ops = select(set(filter(None, args.ops.split(","))), dtype, args.grad)
    found = sweep(ops, dtype, grad=args.grad, isolate=args.isolate, samples=args.samples,
                  min_cluster_size=args.min_cluster_size, timeout=args.timeout,
                  log=lambda line: print(line, flush=True))
    summary = {k: len(v) for k, v in found.items()}
    kind = ("forward+grad" if args.grad else "forward") + (", isolated" if args.isolate else "")
    print(f"summary ({args.dtype}, {kind}, {time.time() - start:.0f} s): {summary}")
    for tag, detail in found["wrong"] + found["disc_failure"]:
        print(f"  {tag}: {detail.splitlines()[0] if detail else ''}")
    with open(args.output, "w") as f:
        json.dump(found, f, indent=1)
    return 1 if found["wrong"] or found["disc_failure"] else 0


if __name__ == "__main__":
    sys.exit(main())
