"""The process-wide collector bridges record into, and the writer behind ``DISC_REPORT``.

Bridges add a :class:`GraphReport` when they capture a graph and then record compile
results and call timings through the returned :class:`GraphRecorder`. Two promises to the
user's program shape this module:

* Recording never slows it measurably: a call record is a few additions, into a
  per-thread :class:`CallTally` on a bridge's per-call path (read when a report is) or
  under one lock on objects found at ``add_graph`` time; no file I/O, no allocation that
  grows per call.
* Reporting never breaks it: the report is written at interpreter exit (when
  ``DISC_REPORT=path`` is set or :func:`configure` was called) or on request, atomically
  (temp file + rename, so a reader never sees half a file), and a failure to write is one
  warning per process, never an exception.

``DISC_REPORT`` may contain ``{pid}`` and ``{rank}``, replaced at write time, so that
several worker processes sharing one environment each write their own file (``disc report
merge`` joins them). ``{rank}`` is the process's rank in its distributed job as the
launcher's environment gives it (:mod:`.ranks`: torchrun, paddle's launcher, ``TF_CONFIG``),
``0`` outside one; unlike a pid it names the same file in every run of the job.
"""

from __future__ import annotations

import atexit
import copy
import os
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

from disc_runtime.thread_counters import ThreadCounters

from ..options import CORE_OPTIONS
from .files import write_report
from .model import ClusterRecord, Engine, GraphReport, KernelTime, ReasonCode, Report, RunInfo
from .ranks import rank_label

__all__ = [
    "ENV_VAR",
    "CallTally",
    "Collector",
    "GraphRecorder",
    "ReportWriteWarning",
    "get_collector",
    "configure",
    "current",
    "expand_path",
    "write",
]

ENV_VAR = "DISC_REPORT"


def expand_path(template: str) -> str:
    """``template`` with ``{pid}`` and ``{rank}`` replaced for this process (other braces
    are left as they are: a path may contain them)."""
    return template.replace("{pid}", str(os.getpid())).replace("{rank}", rank_label())


class ReportWriteWarning(UserWarning):
    """Writing the coverage report failed; the program itself is unaffected."""


class GraphRecorder:
    """Records what happens to one captured graph; every method is O(1) or O(cluster)."""

    def __init__(self, owner: Collector, graph: GraphReport) -> None:
        self._owner = owner
        self._lock = owner._lock
        self.graph = graph
        self._clusters: dict[int, ClusterRecord] = {c.id: c for c in graph.clusters}

    def cluster_compiled(
        self,
        cluster_id: int,
        *,
        seconds: float | None = None,
        cache_hit: bool = False,
        kernels: int | None = None,
        fusions: int | None = None,
        library_calls: int | None = None,
        engine: Engine | str | None = None,
    ) -> None:
        """One compilation (or cache lookup) of a cluster finished. ``kernels`` and
        ``library_calls`` are what one call launches
        (:func:`disc_core.native.launch_counts` reads them from a native artifact);
        ``engine`` what runs it (an artifact's engine name: ``"native"``,
        ``"reference"``)."""
        cluster = self._clusters[cluster_id]
        with self._lock:
            if engine is not None:
                cluster.engine = Engine(engine)
            if cache_hit:
                cluster.cache_hits += 1
            else:
                cluster.cache_misses += 1
            if seconds is not None:
                cluster.compile_seconds = (cluster.compile_seconds or 0.0) + seconds
            if kernels is not None:
                cluster.kernels = kernels
            if fusions is not None:
                cluster.fusions = fusions
            if library_calls is not None:
                cluster.library_calls = library_calls

    def cluster_key(self, cluster_id: int, key: str) -> None:
        """The compile-cache key of the cluster's built artifact: its identity across
        processes (``disc bisect`` and ``DISC_BISECT_CLUSTERS`` name clusters by it)."""
        cluster = self._clusters[cluster_id]
        with self._lock:
            cluster.key = key

    def cluster_failed(self, cluster_id: int, reason: ReasonCode, detail: str) -> None:
        """The cluster failed to compile or run (or the user excluded it); its nodes fall
        back from now on."""
        with self._lock:
            self.graph.mark_cluster_failed(cluster_id, reason, detail)

    def cluster_call(self, cluster_id: int, seconds: float | None = None) -> None:
        """One call of a compiled cluster (hot path: no I/O, constant time)."""
        self.cluster_calls(cluster_id, 1, seconds)

    def cluster_calls(self, cluster_id: int, calls: int, seconds: float | None = None) -> None:
        """``calls`` calls of a compiled cluster, ``seconds`` in all when measured."""
        cluster = self._clusters[cluster_id]
        with self._lock:
            cluster.calls += calls
            if seconds is not None:
                cluster.seconds = (cluster.seconds or 0.0) + seconds

    def cluster_tally(self, cluster_id: int) -> CallTally:
        """Counters the bridge's per-call path adds a cluster's calls and seconds to
        (:class:`CallTally`: no lock and no call per call); every report reads them."""
        self._clusters[cluster_id]  # noqa: B018 (a KeyError now, not at the first report)
        return self._owner._track(CallTally(
            lambda calls, seconds: self.cluster_calls(cluster_id, calls, seconds)))

    def cluster_profile(self, cluster_id: int, entries: list[KernelTime]) -> None:
        """The cluster's time per kernel, library call and host work so far (replaces the
        last profile). The native module sums these itself, so a bridge's flush hook
        (:meth:`Collector.add_flush_hook`) brings them in at snapshot time, not per call."""
        cluster = self._clusters[cluster_id]
        steps = list(entries)  # the caller's list may change after this returns
        for i, step in enumerate(steps):
            if not isinstance(step, KernelTime):
                raise TypeError(f"cluster_profile: entries[{i}] is a {type(step).__name__}, "
                                "not a KernelTime")
        with self._lock:
            cluster.profile = steps

    def graph_call(self, fallback_seconds: float | None = None) -> None:
        """One call of the whole graph, with the time spent in fallback ops if measured."""
        self.graph_calls(1, fallback_seconds)

    def graph_calls(self, calls: int, fallback_seconds: float | None = None) -> None:
        """``calls`` calls of the whole graph, ``fallback_seconds`` in fallback ops in all."""
        graph = self.graph
        with self._lock:
            graph.calls += calls
            if fallback_seconds is not None:
                graph.fallback_seconds = (graph.fallback_seconds or 0.0) + fallback_seconds

    def graph_tally(self) -> CallTally:
        """Counters for the graph's calls and seconds in fallback ops, as
        :meth:`cluster_tally`."""
        return self._owner._track(CallTally(self.graph_calls))


class CallTally(ThreadCounters):
    """[calls, seconds] a bridge counts on its per-call path, per thread and without a lock
    (``cell = tally.local.cell``, made by :meth:`~ThreadCounters.cell` the first time in a
    thread; then ``cell[0] += 1; cell[1] += seconds``). The collector keeps every tally
    and hands what each counted since the last report to its sink before a report is
    read. A recorder method per call took a lock and two Python calls, a noticeable part
    of a small cluster's call inside a compiled model."""

    __slots__ = ("_sink", "_taken")

    def __init__(self, sink: Callable[[int, float], None]) -> None:
        super().__init__(2)
        self._sink = sink
        self._taken = (0, 0.0)

    def drain(self) -> None:
        """Hand the calls and seconds counted since the last drain to the sink."""
        calls, seconds = self.totals()
        taken_calls, taken_seconds = self._taken
        if calls != taken_calls:
            self._taken = (calls, seconds)
            self._sink(int(calls - taken_calls), seconds - taken_seconds)


class Collector:
    """Runs and graphs of this process; thread-safe. Most code uses :func:`get_collector`."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self._lock = threading.Lock()
        self._runs: dict[tuple[str | None, str | None, str], RunInfo] = {}
        self._graphs: list[GraphReport] = []
        self._path: str | None = None
        self._atexit = False
        self._warned = False
        self._flush_hooks: list[Callable[[], None]] = []
        #: every recorder's tallies (as long-lived as the graph records they feed)
        self._tallies: list[CallTally] = []
        self._drain_lock = threading.Lock()  # one report drains at a time
        if path is not None:
            self.configure(path)

    @property
    def path(self) -> str | None:
        """Where the report goes at exit (``{pid}`` and ``{rank}`` not yet replaced), or
        None."""
        return self._path

    def configure(self, path: str | os.PathLike[str] | None) -> None:
        """Write the report to ``path`` at interpreter exit (None: don't)."""
        with self._lock:
            self._path = os.fspath(path) if path is not None else None
            if self._path is not None and not self._atexit:
                atexit.register(self._write_at_exit)
                self._atexit = True

    def add_graph(
        self,
        graph: GraphReport,
        *,
        framework: str | None,
        framework_version: str | None = None,
        device: str = "cpu",
    ) -> GraphRecorder:
        """Take ownership of ``graph`` (its ``run`` is set here) and return its recorder."""
        key = (framework, framework_version, device)
        with self._lock:
            run = self._runs.get(key)
            if run is None:
                run = self._runs[key] = RunInfo.capture(framework, framework_version, device)
            graph.run = run.id
            self._graphs.append(graph)
        return GraphRecorder(self, graph)

    def add_flush_hook(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` before every snapshot: a bridge whose launches count their calls
        natively (not per call in Python) brings those counts in then."""
        with self._lock:
            if hook not in self._flush_hooks:
                self._flush_hooks.append(hook)

    def _track(self, tally: CallTally) -> CallTally:
        with self._lock:
            self._tallies.append(tally)
        return tally

    def report(self, framework: str | None = None) -> Report:
        """A snapshot (a deep copy: later recording does not change it).

        ``framework`` keeps only that framework's runs and graphs (the bridges' ``report()``).
        """
        for hook in list(self._flush_hooks):
            try:
                hook()
            except Exception as exc:  # never let reporting break the user's program
                warnings.warn(f"DISC: bringing call counts into the report failed: "
                              f"{type(exc).__name__}: {exc}", ReportWriteWarning, stacklevel=2)
        with self._drain_lock:
            for tally in list(self._tallies):
                tally.drain()
        with self._lock:
            runs = [r for r in self._runs.values() if framework in (None, r.framework)]
            ids = {r.id for r in runs}
            graphs = [g for g in self._graphs if g.run in ids]
            runs, graphs = copy.deepcopy(runs), copy.deepcopy(graphs)
        if not runs:  # still say which process and versions produced an empty report
            runs = [RunInfo.capture(framework)]
        return Report(runs=runs, graphs=graphs)

    def write(self, path: str | os.PathLike[str] | None = None) -> Path | None:
        """Write the report to ``path`` (default: the configured one) now.

        Returns the file written, or None when there is no path or writing failed (which
        warns once per process with :class:`ReportWriteWarning` and never raises).
        """
        target = os.fspath(path) if path is not None else self._path
        if target is None:
            return None
        try:
            return write_report(self.report(), expand_path(target))
        except Exception as exc:  # never let reporting break the user's program
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"DISC could not write its coverage report to {target}: "
                    f"{type(exc).__name__}: {exc}",
                    ReportWriteWarning,
                    stacklevel=2,
                )
            return None

    def clear(self) -> None:
        """Forget every run and graph (tests; long-lived processes starting over)."""
        with self._lock:
            self._runs.clear()
            self._graphs.clear()
            self._tallies.clear()

    def _write_at_exit(self) -> None:
        if self._path is not None:
            self.write()


_collector = Collector(CORE_OPTIONS.value("report"))


def get_collector() -> Collector:
    """The process-wide collector (configured from ``DISC_REPORT`` at import)."""
    return _collector


def configure(path: str | os.PathLike[str] | None) -> None:
    """Write this process's report to ``path`` at exit, as ``DISC_REPORT=path`` does."""
    _collector.configure(path)


def current(framework: str | None = None) -> Report:
    """A snapshot of this process's report (optionally of one framework only)."""
    return _collector.report(framework)


def write(path: str | os.PathLike[str] | None = None) -> Path | None:
    """Write this process's report now (default: the ``DISC_REPORT`` path)."""
    return _collector.write(path)
