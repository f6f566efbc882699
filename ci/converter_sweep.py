"""Every disc-torch converter, forward and gradients, on ATen calls PyTorch's own samples make.

The OpInfo sweep (opinfo_sweep.py) tests public ops; which converters their graphs reach
is up to torch's decompositions. This sweep starts from the converter table instead: it
runs the OpInfo samples (forward and backward) under a dispatch mode that records the
ATen calls of every op DISC converts, then calls each converted op directly, through one
compiled function per op (``disc_torch.optimize``, so the second and third recorded shapes
of a rank run on a graph compiled for the first), and compares its result and the
gradients of its floating inputs with eager. ``--isolate`` puts ``neg`` twice, excluded
from DISC, on every floating input and output, so the op's cluster has torch ops on both
sides in the forward and the backward graph.

    python ci/converter_sweep.py                  # every converter, alone and isolated
    python ci/converter_sweep.py --ops aten.mm.default,aten.gelu.default

Prints one line per op, the converters no sample reached, and a summary; exits 1 on any
wrong result or DISC-only failure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import opinfo_sweep  # noqa: E402  (ci/, this script's own directory)

#: recorded calls kept per op (the three used are the most different shapes among them)
KEEP = 48


def harvest(dtype: Any, ops: set[Any], samples: int = 3,
            sources: set[str] = frozenset()) -> dict[Any, list[tuple]]:
    """ATen calls of ``ops`` made by the OpInfo samples of ``dtype``, forward and backward:
    op -> [(args, kwargs)], tensors detached and cloned. Calls without a tensor argument
    (``arange``, ``full``) are left to the OpInfo sweep: there is nothing to feed.
    ``sources``: only these OpInfo ops' samples (default: all)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves, tree_map

    calls: dict[Any, list[tuple]] = defaultdict(list)

    def keep(x: Any) -> Any:
        return x.detach().clone() if isinstance(x, torch.Tensor) else x

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if (func in ops and len(calls[func]) < KEEP and any(
                    isinstance(t, torch.Tensor) for t in tree_leaves((args, kwargs)))):
                calls[func].append(tree_map(keep, (args, kwargs)))
            return func(*args, **kwargs)

    for info in opinfo_sweep.select(set(sources), dtype, grad=False):
        try:
            cases = list(info.sample_inputs("cpu", dtype, requires_grad=True))[:samples]
        except Exception:
            continue
        for s in cases:
            try:
                with Recorder():
                    out = info.op(s.input, *s.args, **s.kwargs)
                    outs = [t for t in opinfo_sweep.tensors(out) if t.requires_grad]
                    if outs:
                        sum(t.sum() for t in outs).backward()
            except Exception:
                continue
    return {op: found for op, found in calls.items() if found}


def _shape_key(call: tuple) -> tuple:
    import torch
    from torch.utils._pytree import tree_leaves

    return tuple(tuple(t.shape) for t in tree_leaves(call) if isinstance(t, torch.Tensor))


def _signature(call: tuple) -> tuple:
    """Rank and dtype of every tensor, and every non-tensor argument: calls that one
    compiled function serves (sizes given as Python ints are constants to dynamo)."""
    import torch
    from torch.utils._pytree import tree_leaves

    return tuple((t.dim(), t.dtype) if isinstance(t, torch.Tensor) else repr(t)
                 for t in tree_leaves(call))


def choose(calls: list[tuple], n: int = 3) -> list[tuple]:
    """Up to ``n`` calls of one signature with different shapes (the signature with the
    most distinct shapes), so one compiled graph meets shapes it was not built for."""
    groups: dict[tuple, dict[tuple, tuple]] = defaultdict(dict)
    for c in calls:
        groups[_signature(c)].setdefault(_shape_key(c), c)
    best = max(groups.values(), key=len)
    return list(best.values())[:n]


class CallSample:
    """A recorded ATen call in the shape opinfo_sweep's helpers take (input, args, kwargs):
    every tensor of the call is an argument, floating ones requiring grad."""

    def __init__(self, call: tuple, grad: bool):
        import torch
        from torch.utils._pytree import tree_flatten

        (args, kwargs) = call
        leaves, self.spec = tree_flatten((args, kwargs))
        self.slots = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
        self.leaves = leaves
        tensors = [leaves[i].clone() for i in self.slots]
        for t in tensors:
            if grad and t.dtype.is_floating_point:
                t.requires_grad_()
        self.input, self.args, self.kwargs = tensors[0], tuple(tensors[1:]), {}

    def rebuild(self, tensors: tuple) -> tuple:
        from torch.utils._pytree import tree_unflatten

        leaves = list(self.leaves)
        for i, t in zip(self.slots, tensors):
            leaves[i] = t
        return tree_unflatten(leaves, self.spec)


class ConverterOp:
    """What opinfo_sweep.sweep needs of an op: a name, samples and a callable."""

    def __init__(self, func: Any, calls: list[tuple]):
        self.func, self.calls = func, calls
        self.name, self.variant_test_name = str(func), ""
        self._template: CallSample | None = None

    def sample_inputs(self, device: str, dtype: Any, requires_grad: bool) -> list[CallSample]:
        samples = [CallSample(c, requires_grad) for c in self.calls]
        self._template = samples[0] if samples else None
        return samples

    def op(self, inp: Any, *rest: Any) -> Any:
        # the samples of one op differ only in their tensors (choose)
        args, kwargs = self._template.rebuild((inp, *rest))
        return self.func(*args, **kwargs)


def differentiable(func: Any, call: tuple) -> bool:
    """Does eager torch differentiate this op with respect to its floating inputs?"""
    sample = CallSample(call, grad=True)
    try:
        args, kwargs = sample.rebuild((sample.input, *sample.args))
        out = func(*args, **kwargs)
        outs = [t for t in opinfo_sweep.tensors(out) if t.requires_grad]
        return bool(outs)
    except Exception:
        return False


def sweep_converters(calls: dict[Any, list[tuple]], isolate: bool,
                     log: Any = print) -> dict[str, Any]:
    """Each recorded op through DISC against eager (gradients where eager has them):
    opinfo_sweep's {"pass", "wrong", "disc_failure", "skipped"} plus how many ops were
    differentiable."""
    import torch

    cops = []
    for func in sorted(calls, key=str):
        chosen = choose(calls[func])
        cops.append((ConverterOp(func, chosen), differentiable(func, chosen[0])))
    found: dict[str, Any] = defaultdict(list)
    for grad in (True, False):
        part = opinfo_sweep.sweep([c for c, d in cops if d == grad], torch.float32,
                                  grad=grad, isolate=isolate, samples=3,
                                  log=log)
        for k, v in part.items():
            found[k] += v
    found["differentiable"] = sum(d for _, d in cops)
    return found


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", default="", help="comma list of ATen overloads (default: all)")
    p.add_argument("--isolate", action="store_true", help="only the isolated pass")
    p.add_argument("--alone", action="store_true", help="only the pass without isolation")
    p.add_argument("--output", default="converter_sweep.json")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    import torch

    from disc_torch.converters import CONVERTERS

    start = time.time()
    wanted = set(filter(None, args.ops.split(",")))
    ops = {o for o, c in CONVERTERS.items() if torch.float32 in c.dtypes
           and (not wanted or str(o) in wanted)}
    calls = harvest(torch.float32, ops)
    unreached = sorted(str(o) for o in ops if not calls.get(o))
    print(f"harvested calls of {len(calls)} of {len(ops)} converted ops "
          f"({time.time() - start:.0f} s)", flush=True)
    results: dict[str, Any] = {"unreached": unreached}
    failed = False
    passes = [("alone", False), ("isolated", True)]
    passes = [p for p in passes if not (args.isolate and not p[1]) and not (args.alone and p[1])]
    for label, isolate in passes:
        found = sweep_converters(calls, isolate, log=lambda line: print(line, flush=True))
        summary = {k: len(v) for k, v in found.items() if k != "differentiable"}
        print(f"summary ({label}, {found['differentiable']} differentiable of {len(calls)} "
              f"ops, {time.time() - start:.0f} s): {summary}", flush=True)
        for tag, detail in found["wrong"] + found["disc_failure"]:
            print(f"  {tag}: {detail.splitlines()[0] if detail else ''}")
        failed |= bool(found["wrong"] or found["disc_failure"])
        results[label] = found
    print(f"converted ops no sample reached ({len(unreached)}): {', '.join(unreached)}")
    with open(args.output, "w") as f:
        json.dump(results, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
