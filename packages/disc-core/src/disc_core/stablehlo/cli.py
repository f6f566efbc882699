"""``disc export``: write clusters as StableHLO ``.mlir`` files.

    disc export [--cache DIR] [-o OUT] [--bytecode] [GRAPH.disc ...]

Without GRAPH files it exports every cluster in the compile cache (``--cache``, default
$DISC_CACHE_DIR or ~/.cache/disc): each cache entry keeps the cluster's graph
(``graph.disc``), so a run's clusters are exactly the entries it compiled. A coverage report
(schema version 2) records which clusters ran but not their graphs, so the cache is the
source. One file per cluster, ``<entry key prefix>-<graph name>.mlir`` (``.mlirbc`` with
``--bytecode``); clusters with no StableHLO form are listed with the reason and make the
exit code 1. Needs the ``mlir`` extra.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def _sources(args: argparse.Namespace) -> list[tuple[str, Path]]:
    if args.graphs:
        return [(Path(g).stem, Path(g)) for g in args.graphs]
    from disc_runtime import CompileCache

    root = CompileCache(args.cache).root
    if not root.is_dir():
        raise SystemExit(f"disc export: no compile cache at {root}")
    return [(f.parent.name[:12], f) for f in sorted(root.glob("*/*/graph.disc"))]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="disc export", description=__doc__.split("\n\n")[0])
    p.add_argument("graphs", nargs="*", metavar="GRAPH.disc",
                   help="graph files (text form); default: every cluster in the cache")
    p.add_argument("--cache", metavar="DIR", help="cache directory (default: $DISC_CACHE_DIR "
                   "or ~/.cache/disc)")
    p.add_argument("-o", "--output", metavar="OUT", default="stablehlo",
                   help="directory for the .mlir files (default: ./stablehlo)")
    p.add_argument("--bytecode", action="store_true", help="write MLIR bytecode (.mlirbc)")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        from .exporter import export
    except ImportError as exc:
        print(f"disc export: {exc}", file=sys.stderr)
        return 2
    from ..parser import parse_graph

    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    written, failed = 0, 0
    for label, path in _sources(args):
        try:
            graph = parse_graph(path.read_text())
            module = export(graph)
        except Exception as exc:  # noqa: BLE001 - one cluster's failure is reported, not fatal
            failed += 1
            print(f"{path}: not exported: {' '.join(str(exc).split())}", file=sys.stderr)
            continue
        suffix = ".mlirbc" if args.bytecode else ".mlir"
        module.write(out / f"{label}-{graph.name}{suffix}")
        written += 1
    print(f"disc export: {written} cluster(s) written to {out}"
          + (f", {failed} not exported (see above)" if failed else ""))
    return 1 if failed else 0
