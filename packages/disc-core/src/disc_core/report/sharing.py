"""Compiles and cache hits per cluster key across the runs of a merged report.

The ranks of a distributed job share one compile cache: the rank that wins a cluster's
build lock compiles it, the others wait and load it from disk. Each rank's report only
sees its own side (a miss, or a hit), so whether the job compiled each cluster once is a
question about the merged report, answered per compile-cache key, the one identity a
cluster has across processes. A 2-rank job should read "1 compile, 1 cache hit" for every
key, a 4-rank job "1 compile, 3 cache hits".
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Report, RunInfo
from .summary import plural

__all__ = ["KeyCompiles", "key_compiles", "run_label", "sharing_line"]


@dataclass(frozen=True)
class KeyCompiles:
    """One compile-cache key over every run of a report."""

    key: str
    #: builds that really compiled it (its clusters' ``cache_misses``, summed)
    compiles: int
    #: lookups the compile cache served, from disk or memory (``cache_hits``, summed)
    cache_hits: int
    #: runs with a cluster of this key, in report order
    runs: tuple[str, ...]
    #: of those, the runs that compiled it (labels from :func:`run_label`)
    compiled_by: tuple[str, ...]


def run_label(run: RunInfo) -> str:
    """"rank 1" for a rank of a distributed job, else "pid 4242", else the run id."""
    if run.rank is not None:
        return f"rank {run.rank}"
    if run.pid is not None:
        return f"pid {run.pid}"
    return f"run {run.id}"


def key_compiles(report: Report) -> list[KeyCompiles]:
    """Every built cluster key of ``report`` (clusters without a key are not built yet),
    in order of first appearance, with what each run did with it."""
    labels = {run.id: run_label(run) for run in report.runs}
    order: list[str] = []
    compiles: dict[str, int] = {}
    hits: dict[str, int] = {}
    runs: dict[str, list[str]] = {}
    compiled_by: dict[str, list[str]] = {}
    for graph in report.graphs:
        label = labels.get(graph.run, f"run {graph.run}")
        for cluster in graph.clusters:
            key = cluster.key
            if key is None:
                continue
            if key not in compiles:
                order.append(key)
                compiles[key] = hits[key] = 0
                runs[key], compiled_by[key] = [], []
            compiles[key] += cluster.cache_misses
            hits[key] += cluster.cache_hits
            if label not in runs[key]:
                runs[key].append(label)
            if cluster.cache_misses and label not in compiled_by[key]:
                compiled_by[key].append(label)
    return [KeyCompiles(key, compiles[key], hits[key], tuple(runs[key]),
                        tuple(compiled_by[key])) for key in order]


def sharing_line(items: list[KeyCompiles], runs: int) -> str:
    """"6 cluster keys over 2 runs: 6 compiles, 6 cache hits; each key compiled once"."""
    compiles = sum(k.compiles for k in items)
    hits = sum(k.cache_hits for k in items)
    line = (f"{plural(len(items), 'cluster key')} over {plural(runs, 'run')}: "
            f"{plural(compiles, 'compile')}, {plural(hits, 'cache hit')}")
    again = [k for k in items if k.compiles > 1]
    # no compile but hits: a warm cache; neither: left out before its lookup was recorded
    # (DISC_BISECT_CLUSTERS)
    loaded = [k for k in items if k.compiles == 0 and k.cache_hits]
    unused = [k for k in items if k.compiles == 0 and not k.cache_hits]
    verdict = []
    if again:
        verdict.append(f"{plural(len(again), 'key')} compiled more than once")
    if loaded:
        verdict.append(f"{plural(len(loaded), 'key')} only loaded from the cache")
    if unused:
        verdict.append(f"{plural(len(unused), 'key')} with no lookup recorded")
    if items and all(k.compiles == 1 for k in items):
        verdict.append("each key compiled once")
    return line + ("; " + ", ".join(verdict) if verdict else "")
