"""What the model benchmarks (torch_models.py, tf_models.py) share: the command line, the
thread count, and the two ways a contender is timed over a stream of shapes.

Imports no framework: the scripts set the thread count in the environment before they
import theirs.
"""

from __future__ import annotations

import argparse
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
