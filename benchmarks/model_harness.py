"""What the model benchmarks (torch_models.py, tf_models.py) share: the command line, the
thread count, and the two ways a contender is timed over a stream of shapes.

Imports no framework: the scripts set the thread count in the environment before they
import theirs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

Batch = tuple[Any, Any]


def parser(description: str, quick_help: str) -> argparse.ArgumentParser:
    """The options every model benchmark takes; a script adds its own."""
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help=quick_help)
    p.add_argument("--modes", default="inference,training")
    p.add_argument("--threads", type=int, default=None, help="threads for every contender")
    p.add_argument("--rounds", type=int, default=5, help="steady-state rounds per shape")
    p.add_argument("--repeat", type=int, default=3,
                   help="back-to-back timed calls per contender, shape and round (after one "
                        "untimed call)")
    p.add_argument("--output", type=Path, default=None)
    return p


def write_results(info: dict[str, Any], rows: list[Any], stem: str, quick: bool,
                  output: Path | None) -> Path:
    """Write ``{"machine": info, "rows": rows}`` to ``output``, else to
    benchmarks/results/<stem>.json (<stem>.quick.json for a --quick run, which is not
    kept); returns where it went."""
    out = output or Path(__file__).resolve().parent / "results" / (
        f"{stem}.quick.json" if quick else f"{stem}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": info, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out}")
    return out


def thread_count(args: argparse.Namespace) -> int:
    """--threads, else every core (2 under CI, the CI machine's count); exported as
    OMP_NUM_THREADS for whatever is imported next."""
    n = args.threads or min(os.cpu_count() or 1, 2 if os.environ.get("CI") else 64)
    os.environ.setdefault("OMP_NUM_THREADS", str(n))
    return n


def first_pass(step: Callable[[Any, Any], Any], batches: Sequence[Batch],
               fetch: Callable[[Any], Any]) -> tuple[float, list[Any]]:
    """Seconds for one call per shape (compilations included) and what ``fetch`` made of
    each result (fetching also waits for it)."""
    outs = []
    start = time.perf_counter()
    for x, y in batches:
        outs.append(fetch(step(x, y)))
    return time.perf_counter() - start, outs


def steady(steps: dict[str, Callable[[Any, Any], Any]], batches: Sequence[Batch], rounds: int,
           fetch: Callable[[Any], Any], repeat: int = 3) -> dict[str, list[float]]:
    """Median seconds per call, per shape, for every contender.

    Steady state is what a training or serving loop sees: the same function called back to
    back. So each contender makes one untimed call (it brings its weights back into cache
    and lets the previous contender's worker threads go idle) and then ``repeat`` timed
    calls in a row. Rounds are interleaved and their contender order rotates, so machine
    drift and ordering effects fall on every contender alike."""
    names = list(steps)
    per: dict[str, list[list[float]]] = {n: [[] for _ in batches] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for i, (x, y) in enumerate(batches):
            for n in order:
                fetch(steps[n](x, y))
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    fetch(steps[n](x, y))
                    per[n][i].append(time.perf_counter() - t0)
    return {n: [statistics.median(s) for s in per[n]] for n in names}


def median_ratio(medians: dict[str, list[float]], peer: str, who: str) -> float:
    """Median over shapes of peer time / ``who``'s time (above 1: ``who`` is faster)."""
    return statistics.median(p / d for p, d in zip(medians[peer], medians[who]))


#: the relative gradient error (per parameter) a training benchmark accepts, and how much
#: farther from the exact (float64) gradient than the framework's float32 one DISC's may be
GRAD_TOLERANCE = 1e-4
ROUNDING_FACTOR = 10.0


def judge_gradients(names: Sequence[str], got: Sequence[Any], want: Sequence[Any],
                    exact: Sequence[Any]) -> dict[str, Any]:
    """Every parameter's gradient of one training step: DISC's (``got``) against the
    framework's (``want``, float32), with the exact one (``exact``, a float64 copy's) as
    referee. All as float64 numpy arrays, in ``names`` order; None for no gradient.

    A parameter passes when ‖g_disc − g_fw‖ ≤ 1e-4 ‖g_fw‖, or when DISC's gradient is no
    more than 10x farther from the exact one than the framework's is: some gradients are
    zero in exact arithmetic (a convolution's bias before batch norm, which subtracts the
    channel mean; a key projection's bias before softmax), the framework's float32 value
    is rounding residue, and two summation orders differ by 100% of it. Those are listed
    apart (``grad_rounding_level``); the rest must pass the first test
    (``grad_mismatches`` lists what does not)."""
    import numpy as np

    strict: dict[str, float] = {}
    rounding: dict[str, dict[str, float]] = {}
    mismatches: dict[str, str] = {}
    for name, g, w, t in zip(names, got, want, exact):
        if g is None or w is None:
            if (g is None) != (w is None):
                mismatches[name] = "a gradient on one side only"
            continue
        err = float(np.linalg.norm(g - w)) / max(float(np.linalg.norm(w)), 1e-300)
        disc_off, fw_off = float(np.linalg.norm(g - t)), float(np.linalg.norm(w - t))
        if err > GRAD_TOLERANCE and disc_off <= ROUNDING_FACTOR * fw_off:
            rounding[name] = {"rel_err": err, "framework_grad_norm": float(np.linalg.norm(w)),
                              "distance_to_float64_vs_framework": disc_off / max(fw_off, 1e-300)}
            continue
        strict[name] = err
        if err > GRAD_TOLERANCE:
            mismatches[name] = f"relative error {err:.2e}"
    worst = max(strict, key=strict.get) if strict else None
    return {"max_grad_rel_err": strict[worst] if worst else None, "worst_grad_parameter": worst,
            "grad_rounding_level": rounding, "grad_mismatches": mismatches,
            "parameters_checked": len(names)}
