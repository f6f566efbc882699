"""Run one fuzz case natively and on the reference interpreter, and judge the difference.

Tolerances are dtype-aware: integers and bools must be equal; non-finite reference values
must be matched exactly (NaN by NaN, an infinity by the same infinity); finite floats may
differ by ``tol * (|want| + scale)``, where ``scale`` is the largest finite magnitude of
that output (rounding that happened in a larger intermediate shows up absolutely, e.g.
after a subtraction) and ``tol`` grows with the longest reduction or contraction the
binding runs (f32 sums accumulate in float32 natively and in float64 in the reference).
A kernel reading a wrong element is off by O(scale), far above any of these.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from fuzz_graphs import FuzzCase, random_inputs

from disc_core import Compiler, interpret
from disc_core.ir import Graph
from disc_core.printer import print_graph

#: base relative tolerance per dtype (float32 libm and numpy differ by a few ulps)
BASE_TOL = {"f32": 2e-5, "f64": 1e-12, "f16": 2e-3, "bf16": 2e-2}


@dataclass
class Tally:
    """What a fuzz session ran: reported at the end of the session (conftest.py)."""

    graphs: int = 0
    native_graphs: int = 0
    cases: int = 0  #: (graph, shape binding) pairs compared
    native_cases: int = 0  #: of those, pairs the native engine ran
    both_rejected: int = 0  #: bindings both engines refused (invalid sizes): compared too
    elements: int = 0
    failures: int = 0
    fallbacks: Counter = field(default_factory=Counter)
    dtypes: Counter = field(default_factory=Counter)
    ops: Counter = field(default_factory=Counter)
    kernels: Counter = field(default_factory=Counter)
    seconds: float = 0.0  #: spent in check_case (compiling, interpreting, running)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def summary(self) -> str:
        lines = [
            f"fuzz: {self.cases} cases ((graph, binding) pairs, {self.native_cases} of them "
            f"native) over {self.graphs} graphs ({self.native_graphs} compiled natively), "
            f"{self.both_rejected} bindings "
            f"rejected by both engines, {self.elements} output elements compared, "
            f"{self.failures} failing calls, {self.seconds:.0f} s in the checks",
            f"  dtypes: {dict(self.dtypes.most_common())}",
            f"  kernels: {dict(self.kernels.most_common())}",
            f"  ops: {dict(self.ops.most_common())}",
        ]
        for reason, n in self.fallbacks.most_common():
            lines.append(f"  interpreter fallback x{n}: {reason}")
        return "\n".join(lines)


TALLY = Tally()
_FAILURES: dict[str, type] = {}


def failure(category: str) -> type:
    """One AssertionError subclass per kind of failure: hypothesis tells bugs apart by
    exception type and origin, so each kind is shrunk and reported on its own."""
    if category not in _FAILURES:
        name = "Fuzz" + "".join(p.capitalize() for p in category.replace("-", "_").split("_"))
        _FAILURES[category] = type(name, (AssertionError,), {})
    return _FAILURES[category]


def reduction_length(graph: Graph, env: dict[str, int]) -> int:
    """The longest sum a binding runs: reduced elements of a reduce, or a contraction."""
    longest = 1
    for op in graph.ops:
        if op.name == "reduce":
            dims = [op.operands[0].shape[a] for a in op.attrs["axes"]]
        elif op.name == "dot_general":
            dims = [op.operands[0].shape[a] for a in op.attrs["lhs_contract"]]
        else:
            continue
        longest = max(longest, math.prod(d.evaluate(env) for d in dims))
    return longest


def tolerance(dtype: str, length: int) -> float:
    return BASE_TOL.get(dtype, 0.0) * (1 + math.sqrt(length))


def loosest_float(graph: Graph) -> str:
    """The least precise float dtype anywhere in ``graph``: its rounding bounds every
    output's (an f32 sum converted to f64 carries f32 error)."""
    seen = {v.dtype.value for v in graph.inputs} | {
        r.dtype.value for op in graph.ops for r in op.results}
    floats = [d for d in BASE_TOL if d in seen]
    return max(floats, key=BASE_TOL.__getitem__) if floats else "i32"


def compare(got: np.ndarray, want: np.ndarray, tol: float) -> str | None:
    """None when ``got`` is ``want`` within ``tol``, else what differs."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape/dtype {got.shape} {got.dtype}, expected {want.shape} {want.dtype}"
    if want.dtype.kind not in "fV" and want.dtype.name != "bfloat16":
        bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
        if bad.size:
            i = bad[0]
            return (f"{bad.size} of {want.size} elements differ, first at flat index {i}: "
                    f"got {got.reshape(-1)[i]}, expected {want.reshape(-1)[i]}")
        return None
    g = got.astype(np.float64).reshape(-1)
    w = want.astype(np.float64).reshape(-1)
    fin = np.isfinite(w)
    nonfin_bad = ~fin & ~((np.isnan(w) & np.isnan(g)) | (w == g))
    scale = float(np.max(np.abs(w[fin]), initial=0.0))
    with np.errstate(invalid="ignore"):
        err = np.abs(g - w)
        fin_bad = fin & ~(err <= tol * (np.abs(w) + scale))
    bad = np.flatnonzero(nonfin_bad | fin_bad)
    if bad.size:
        i = bad[0]
        return (f"{bad.size} of {want.size} elements differ (tol {tol:.2e}, scale "
                f"{scale:.3g}), first at flat index {i}: got {g[i]!r}, expected {w[i]!r}")
    return None


_SHORT = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16"}


def _fallback_reason(metadata: dict) -> str:
    reason = str(metadata.get("native_fallback", "?"))
    return reason.splitlines()[0][:120]


def check_case(compiler: Compiler, case: FuzzCase, *, require_native: bool = False) -> None:
    """Compile ``case.graph`` once, run every binding, raise on the first difference.
    ``require_native``: an interpreter fallback fails too (regressions of graphs the native
    engine once rejected)."""
    t0 = time.perf_counter()
    try:
        _check_case(compiler, case, require_native)
    finally:
        with TALLY.lock:
            TALLY.seconds += time.perf_counter() - t0


def _check_case(compiler: Compiler, case: FuzzCase, require_native: bool) -> None:
    graph = case.graph
    text = print_graph(graph)
    try:
        exe = compiler.compile(graph)
    except Exception as exc:
        raise failure("compile-crash")(f"compiling raised {exc!r}\n{case.describe()}") from exc
    native = exe.artifact.engine == "native"
    with TALLY.lock:
        TALLY.graphs += 1
        TALLY.native_graphs += native
        for op in graph.ops:
            TALLY.ops[op.name] += 1
        TALLY.dtypes[graph.inputs[0].dtype.value] += 1
        if native:
            for kind, n in exe.artifact.metadata["native"]["fusion"].items():
                TALLY.kernels[kind] += n
        else:
            TALLY.fallbacks[_fallback_reason(exe.artifact.metadata)] += 1
    loosest = loosest_float(graph)
    if require_native and not native:
        _fail(case, "rejected", "the native engine rejected the graph: "
              f"{_fallback_reason(exe.artifact.metadata)}", text)
    rng = np.random.default_rng(case.seed)
    for k, env in enumerate(case.bindings):
        inputs = random_inputs(graph, env, rng, specials=(k == 0))
        where = f"binding {env}, inputs {[a.shape for a in inputs]}"
        try:
            want = interpret(graph, inputs)
        except Exception as exc:  # the sizes are invalid: the native engine must say so too
            try:
                exe.run(inputs)
            except Exception:
                with TALLY.lock:
                    TALLY.both_rejected += 1
                    TALLY.cases += 1
                    TALLY.native_cases += native
                continue
            _fail(case, "accepted-invalid", f"{where}: the interpreter raised {exc!r}, the "
                  f"native engine ran", text)
        try:
            got = exe.run([a.copy() for a in inputs])
        except Exception as exc:
            _fail(case, "run-crash", f"{where}: the native engine raised {exc!r}", text)
        tol = tolerance(loosest, reduction_length(graph, env))
        for i, (g, w) in enumerate(zip(got, want)):
            short = _SHORT.get(w.dtype.name, w.dtype.name)
            problem = compare(np.asarray(g), w, tol)
            if problem:
                _fail(case, f"mismatch-{short}",
                      f"{where}: output {i} ({graph.outputs[i].type}): {problem}", text)
        with TALLY.lock:
            TALLY.cases += 1
            TALLY.native_cases += native
            TALLY.elements += sum(w.size for w in want)


def _fail(case: FuzzCase, category: str, message: str, text: str) -> None:
    with TALLY.lock:
        TALLY.failures += 1
    raise failure(category)(f"{message}\n// bindings {case.bindings}, input seed "
                            f"{case.seed}\n{text}")
