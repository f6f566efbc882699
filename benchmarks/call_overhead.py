"""What one call of a compiled torch callable costs on tiny inputs (small-batch serving):
DISC against eager PyTorch and Inductor, side by side in one process.

    python benchmarks/call_overhead.py [--threads N] [--rounds R] [--output FILE]

Contenders, each compiled from a code object of its own (dynamo keeps compiled code on
the code object: two contenders sharing one would look up each other's entries):

* eager: the function itself;
* inductor: `torch.compile(fn, dynamic=True)`;
* disc: `torch.compile(fn, backend="disc", dynamic=True)`;
* disc_optimize: `disc_torch.optimize(fn)` (adds its identity pins and traced-graph
  cache around dynamo);
* disc_aot: `disc_torch.aot_compile(module, example)`: torch.export once, DISC once, and
  calls without dynamo or aot_autograd (the serving path; a function is wrapped in a
  module, as torch.export takes modules).

Cases, under `torch.no_grad()`, warmed on several sizes first (so that the dynamic graph
serves the timed size), then timed in interleaved rounds of back-to-back calls:

* `pointwise`: `(x * 2 + 1).relu()` on [4, 5, 8] (one fused kernel: almost all overhead);
* `mlp`: Linear(16, 32) + GELU + Linear(32, 8) on [5, 16] (two GEMM steps);
* `layernorm_residual`: `LayerNorm(x + y)` on [3, 64].

A compiled call's cost over eager's is what the framework wrappers (dynamo's guards,
aot_autograd's runtime wrappers) and the backend's own per-call work add. DISC's GEMMs
use torch's own MKL (`DISC_BLAS_TUNE=0`). Every result carries benchmarks/provenance.py's
record and the share of the CPUs other processes used during the run.
"""

from __future__ import annotations

import argparse
import json
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

CONTENDERS = ("eager", "inductor", "disc", "disc_optimize", "disc_aot")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=400, help="calls per round and contender")
    p.add_argument("--output", type=Path, default=None)
    return p.parse_args(argv)


ARGS = parse_args() if __name__ == "__main__" else parse_args([])
torch, THREADS = provenance.import_torch_same_library(ARGS.threads)


def pointwise(x):
    return (x * 2 + 1).relu()


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


class LayerNormResidual(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(64)

    def forward(self, x, y):
        return self.norm(x + y)


def case_inputs(case: str, n: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    if case == "pointwise":
        return [torch.randn(4, n, 8, generator=g)]
    if case == "mlp":
        return [torch.randn(n, 16, generator=g)]
    return [torch.randn(n, 64, generator=g), torch.randn(n, 64, generator=g)]


#: sizes each contender sees before timing, and the size timed
WARM_SIZES, TIMED_SIZE = (2, 3, 7), {"pointwise": 5, "mlp": 5, "layernorm_residual": 3}


def _own_code(fn: Callable[..., Any], name: str) -> types.FunctionType:
    return types.FunctionType(fn.__code__.replace(co_name=name), fn.__globals__, name,
                              fn.__defaults__, fn.__closure__)


def _module(base: torch.nn.Module, name: str) -> torch.nn.Module:
    """``base`` (its parameters shared) as an instance of a subclass whose forward has a
    code object of its own, registered in this module so that it pickles (the traced-graph
    cache of disc_optimize keeps a module's class by reference)."""
    cls = type(base)
    sub = type(f"{cls.__name__}_{name}", (cls,), {"forward": _own_code(cls.forward, name)})
    sub.__module__ = __name__
    globals()[sub.__name__] = sub
    module = sub.__new__(sub)
    module.__dict__ = base.__dict__
    return module


class _FunctionModule(torch.nn.Module):
    """A plain function as the module torch.export takes."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def make(case: str, name: str, base: Any) -> Callable[..., Any]:
    fn = (_own_code(base, f"{case}_{name}") if isinstance(base, types.FunctionType)
          else _module(base, f"{case}_{name}"))
    if name == "eager":
        return fn
    if name == "inductor":
        return torch.compile(fn, dynamic=True)
    import disc_torch

    if name == "disc_aot":
        module = fn if isinstance(fn, torch.nn.Module) else _FunctionModule(fn)
        return disc_torch.aot_compile(module, tuple(case_inputs(case, WARM_SIZES[0])))
    if name == "disc":
        return torch.compile(fn, backend="disc", dynamic=True)
    return disc_torch.optimize(fn)


def per_call_us(call: Callable[..., Any], xs: list[torch.Tensor], n: int) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        call(*xs)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def run_case(case: str, base: Any, names: list[str]) -> dict[str, Any]:
    calls = {name: make(case, name, base) for name in names}
    import disc_torch

    compiles_before = disc_torch.compile_count()
    with torch.no_grad():
        for call in calls.values():
            for n in WARM_SIZES:
                call(*case_inputs(case, n))
        xs = case_inputs(case, TIMED_SIZE[case])
        want = calls["eager"](*xs)
        errors = {name: float((call(*xs) - want).abs().max()) for name, call in calls.items()}
        rounds: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(ARGS.rounds):
            for name, call in calls.items():
                rounds[name].append(per_call_us(call, xs, ARGS.calls))
    us = {name: statistics.median(v) for name, v in rounds.items()}
    return {
        "case": case, "shapes": [list(x.shape) for x in xs], "per_call_us": us,
        "added_over_eager_us": {n: us[n] - us["eager"] for n in names if n != "eager"},
        "disc_vs_inductor": us["inductor"] / us["disc"],
        "disc_optimize_vs_inductor": us["inductor"] / us["disc_optimize"],
        "disc_aot_vs_inductor": us["inductor"] / us["disc_aot"],
        "max_abs_error_vs_eager": errors,
        "disc_compiles": disc_torch.compile_count() - compiles_before,
    }


def main() -> int:
    allocator.pin()  # one heap behaviour for every contender (benchmarks/allocator.py)
    torch.manual_seed(0)
    names = list(CONTENDERS)
    others = provenance.OtherLoad()
    speed = provenance.host_speed()
    bases = {"pointwise": pointwise, "mlp": MLP(), "layernorm_residual": LayerNormResidual()}
    rows = [run_case(case, base, names) for case, base in bases.items()]
    import disc_core

    record = provenance.machine(THREADS, {"torch": torch.__version__,
                                          "disc-core": disc_core.__version__},
                                provenance.torch_same_library(), speed)
    busy = others.pct()
    record["other_processes_pct"] = None if busy is None else round(busy, 1)
    print(provenance.headline(record))
    print(provenance.finish(record))
    print("other processes used " + ("an unknown share" if busy is None else f"{busy:.0f}%")
          + " of the CPUs during the run"
          + (": figures are indicative" if busy is None or busy > 10 else ""))
    print(f"{'case':20}" + "".join(f"{n:>15}" for n in names)
          + "   inductor/disc  inductor/disc_optimize  inductor/disc_aot  (us per call, median)")
    for r in rows:
        print(f"{r['case']:20}" + "".join(f"{r['per_call_us'][n]:13.1f}us" for n in names)
              + f"   {r['disc_vs_inductor']:12.2f}x  {r['disc_optimize_vs_inductor']:21.2f}x"
              + f"  {r['disc_aot_vs_inductor']:15.2f}x")
    print("added over eager (us): " + "; ".join(
        f"{r['case']}: " + ", ".join(f"{n} {v:.1f}" for n, v in r["added_over_eager_us"].items())
        for r in rows))
    if ARGS.output:
        ARGS.output.write_text(json.dumps({"machine": record, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
