"""Subprocess worker for the cross-rank report test (not a test module): one "rank" of a
job that shares a compile cache, recording what it did the way a bridge does.

Usage: python rank_worker.py CACHE_DIR GO_FILE

The rank comes from the launcher's variables in the environment (``RANK``...), the report
path from ``DISC_REPORT`` (with ``{rank}``). It waits for GO_FILE so that every rank asks
the cache at once, compiles two graphs (two clusters of one captured graph) and records
each lookup's source as :meth:`GraphRecorder.cluster_compiled` does for the bridges.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from disc_core import Compiler, parse_graph
from disc_core.report import ClusterRecord, GraphReport, NodeRecord, Status, get_collector
from disc_runtime import CompileCache

GRAPHS = [
    "func @f(%x: f32[N]) -> (f32[N]) {\n  %0 = exp(%x) : f32[N]\n  return %0\n}\n",
    "func @g(%x: f32[N, M]) -> (f32[N, M]) {\n  %0 = tanh(%x) : f32[N, M]\n"
    "  return %0\n}\n",
]


def main(cache_dir: str, go_file: str) -> None:
    deadline = time.monotonic() + 60
    while not Path(go_file).exists():
        if time.monotonic() > deadline:
            raise SystemExit("no go signal")
        time.sleep(0.01)
    compiler = Compiler(CompileCache(cache_dir), target="reference")
    nodes = [NodeRecord(f"n{i}", "op", Status.COMPILED, cluster=i) for i in range(len(GRAPHS))]
    clusters = [ClusterRecord(id=i, nodes=[f"n{i}"]) for i in range(len(GRAPHS))]
    recorder = get_collector().add_graph(GraphReport("step", "", nodes, clusters),
                                         framework=None)
    for cid, text in enumerate(GRAPHS):
        exe, source = compiler.compile_traced(parse_graph(text))
        recorder.cluster_compiled(cid, cache_hit=source != "miss", engine="reference")
        recorder.cluster_key(cid, exe.artifact.key)


if __name__ == "__main__":
    main(*sys.argv[1:3])
