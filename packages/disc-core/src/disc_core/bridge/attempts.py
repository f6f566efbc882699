"""Lowering and compiling a graph's clusters, with the retry every bridge wants.

A cluster the native engine refuses (a construct it cannot fuse yet) should not send all
its ops back to the framework: :func:`compile_clusters` halves it along its topological
order and retries each half (down to ``min_size`` members, at most ``max_splits`` times),
so only that construct's neighbourhood stays in the framework. A prefix/suffix split
never closes a cycle: nothing in the prefix depends on the suffix, and any path from the
prefix through other ops back into the suffix already existed.

The clusters' C compilers run side by side (a thread pool), which is most of a first
call's time; lowering, which reads the framework's graph, runs first on the caller's
thread. :func:`record_attempts` then puts the outcome of each attempt in the report.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..native import fusion_count, launch_counts
from ..report.model import ReasonCode
from . import selection
from .fallback import FallbackNotice

__all__ = ["Attempt", "compile_clusters", "compile_lowered", "engine_of", "record_attempts",
           "record_outcome", "split_clustering"]

#: how many times a cluster that fails to compile natively may be halved
MAX_SPLITS = 4


@dataclass
class Attempt:
    """One cluster (or a piece of one) and the outcome of lowering and compiling it.
    ``lowered`` is what the bridge's ``lower`` returned (it has a ``graph``)."""

    members: list[Any]
    lowered: Any = None
    exe: Any = None
    source: str = ""
    seconds: float = 0.0
    error: str | None = None
    quiet: bool = False  # a failure not worth a warning (nothing to compute)
    excluded: bool = False  # built, but its key is not allowed (DISC_BISECT_CLUSTERS)

    @property
    def ok(self) -> bool:
        return self.error is None and self.exe is not None

    @property
    def key(self) -> str | None:
        """The compile-cache key of the built artifact (the cluster's identity across
        processes), or None when nothing was built."""
        return self.exe.artifact.key if self.exe is not None else None


def compile_lowered(compiler: Any, graph: Any, need_native: bool) -> tuple[Any, str, float]:
    """(executable, cache source, seconds) of one core graph. Raises when it cannot be
    compiled, or compiles only for the interpreter while native code is required."""
    start = time.perf_counter()
    exe, source = compiler.compile_traced(graph)
    if need_native and exe.artifact.metadata.get("native") is None:
        raise RuntimeError("no native code: " + str(exe.artifact.metadata.get(
            "native_fallback", "unknown reason")))
    return exe, source, time.perf_counter() - start


def engine_of(exe: Any, notice: FallbackNotice | None = None) -> str:
    """The engine that runs ``exe`` (its artifact's: ``"native"`` or ``"reference"``), as
    the report records it. A cluster left to the reference interpreter computes the right
    values op by op in numpy, slower than the framework: ``notice`` says so once."""
    engine = exe.artifact.engine
    if engine != "native" and notice is not None:
        why = exe.artifact.metadata.get("native_fallback") or f"target {exe.artifact.target!r}"
        notice.warn(f"DISC: clusters run on the {engine} interpreter, not native code ({why}); "
                    "the report does not count them as compiled")
    return engine


def compile_clusters(clusters: Sequence[Sequence[Any]], lower: Callable[[list[Any]], Any],
                     compiler: Any, *, need_native: bool, min_size: int,
                     max_splits: int = MAX_SPLITS,
                     compile: Callable[[Any], tuple[Any, str, float]] | None = None,
                     thread_prefix: str = "disc-build",
                     max_outputs: int | None = None) -> list[Attempt]:
    """Lower (``lower(members)``, on this thread) and compile every cluster; see the module
    docstring. The result lists one attempt per cluster or piece, in order. ``compile``
    (default :func:`compile_lowered` of the lowered graph with ``compiler``) makes the
    (executable, cache source, seconds) of one lowered cluster; the build threads are
    named ``thread_prefix`` (a bridge's own, to tell them apart in a profile).
    ``max_outputs``: the most results a bridge's launch op can return (Paddle's custom ops
    have a fixed count); a cluster with more is refused before any C compiler runs, so it
    is halved like one the native engine refuses."""
    make = compile or (lambda low: compile_lowered(compiler, low.graph, need_native))

    def compile(low: Any) -> tuple[Any, str, float]:
        n = len(low.graph.outputs)
        if max_outputs is not None and n > max_outputs:
            raise RuntimeError(f"{n} outputs; the launch op returns at most {max_outputs}")
        return make(low)

    def lowered(members: list[Any]) -> Attempt:
        a = Attempt(members)
        try:
            a.lowered = lower(members)
        except Exception as exc:  # a converter limit met in context: this cluster falls back
            a.error = f"lowering failed: {type(exc).__name__}: {exc}"
            return a
        if not a.lowered.graph.outputs:
            a.error, a.quiet = ("nothing to compute (the cluster only forwards its "
                                "inputs)"), True
        return a

    def compiled(a: Attempt) -> BaseException | None:
        try:
            a.exe, a.source, a.seconds = compile(a.lowered)
        except Exception as exc:
            a.exe = None
            return exc
        return None

    attempts: list[Attempt] = []

    def settle(a: Attempt, failure: BaseException | None, depth: int) -> None:
        if failure is None:
            attempts.append(a)
            return
        half = len(a.members) // 2
        if depth < max_splits and half >= max(min_size, 2):
            for part in (a.members[:half], a.members[half:]):
                b = lowered(part)
                settle(b, compiled(b) if b.error is None else None, depth + 1)
            return
        a.error = f"{type(failure).__name__}: {failure}"
        attempts.append(a)

    first = [lowered(list(c)) for c in clusters]
    todo = [a for a in first if a.error is None]
    failures: dict[int, BaseException | None] = {}
    if len(todo) > 1:
        from concurrent.futures import ThreadPoolExecutor

        workers = min(len(todo), max(2, os.cpu_count() or 1))
        with ThreadPoolExecutor(workers, thread_name_prefix=thread_prefix) as pool:
            failures = dict(zip(map(id, todo), pool.map(compiled, todo)))
    else:
        failures = {id(a): compiled(a) for a in todo}
    for a in first:
        settle(a, failures.get(id(a)), 0)
    for a in attempts:
        if a.ok and not selection.allows(a.key):
            a.error, a.excluded = selection.EXCLUDED_DETAIL, True
    return attempts


def record_attempts(recorder: Any, attempts: Sequence[Attempt], notice: FallbackNotice
                    ) -> None:
    """Each attempt's outcome in the report (attempt ``i`` is cluster ``i`` of the
    recorder's graph): see :func:`record_outcome`."""
    for cid, a in enumerate(attempts):
        record_outcome(recorder, cid, a, notice)


def record_outcome(recorder: Any, cid: int, a: Attempt, notice: FallbackNotice) -> bool:
    """Put attempt ``a`` (cluster ``cid``) in the report: its key when built; compiled
    (time, cache hit, kernels, library calls, fusions), excluded by the user's selection,
    or failed with a ``compile_error`` and one warning per distinct reason. True when it
    compiled and may run."""
    if a.excluded:
        selection.admit(recorder, cid, a.key)
        return False
    if a.error is not None or a.exe is None:
        detail = a.error or "not compiled"
        if a.quiet:
            recorder.cluster_failed(cid, ReasonCode.COMPILE_ERROR, detail)
        else:
            notice.cluster_failed(recorder, cid, f"a cluster of {len(a.members)} ops",
                                  ReasonCode.COMPILE_ERROR, detail, stacklevel=4)
        return False
    recorder.cluster_key(cid, a.key)
    native_meta = a.exe.artifact.metadata.get("native") or {}
    counts = launch_counts(native_meta)
    kernels, library_calls = counts if counts else (None, None)
    recorder.cluster_compiled(cid, seconds=a.seconds, cache_hit=a.source != "miss",
                              kernels=kernels, library_calls=library_calls,
                              fusions=fusion_count(native_meta),
                              engine=engine_of(a.exe, notice))
    return True


def split_clustering(clustering: Any, attempts: Sequence[Attempt]) -> Any:
    """``clustering`` with every attempt as its own cluster (ids in attempt order): what
    the report lists once clusters were split."""
    from ..clustering import Cluster, ClusteringResult

    out = ClusteringResult(excluded=dict(clustering.excluded))
    for cid, a in enumerate(attempts):
        out.clusters.append(Cluster(cid, tuple(a.members)))
        for node in a.members:
            out.cluster_of[node] = cid
    return out
