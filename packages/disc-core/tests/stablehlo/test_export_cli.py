"""``disc export``: every cluster in a compile cache (or given graph files) as .mlir."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jaxlib")

from disc_core.builder import GraphBuilder  # noqa: E402
from disc_core.cli import main  # noqa: E402
from disc_core.compiler import Compiler  # noqa: E402
from disc_core.interpreter import interpret  # noqa: E402
from disc_core.printer import print_graph  # noqa: E402
from disc_core.stablehlo import import_  # noqa: E402


def _graph(name: str, kind: str):
    b = GraphBuilder(name)
    x = b.input("x", "f32", ["B", 4])
    b.graph.outputs = [b.op("reduce", b.op("exp", x), kind=kind, axes=[1])]
    return b.graph


def test_export_every_cached_cluster(tmp_path: Path) -> None:
    from disc_runtime import CompileCache

    cache_dir = tmp_path / "cache"
    compiler = Compiler(CompileCache(cache_dir))
    graphs = {g.name: g for g in (_graph("first", "sum"), _graph("second", "max"))}
    for g in graphs.values():
        compiler.compile(g)
    out = tmp_path / "out"
    assert main(["export", "--cache", str(cache_dir), "-o", str(out)]) == 0
    files = sorted(out.glob("*.mlir"))
    assert len(files) == 2
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    for f in files:
        name = f.stem.split("-", 1)[1]
        got = interpret(import_(f.read_text()), [x])
        want = interpret(graphs[name], [x])
        np.testing.assert_array_equal(got[0], want[0])


def test_export_reports_what_does_not_map(tmp_path: Path, capsys) -> None:
    b = GraphBuilder("scan")
    x = b.input("x", "f32", ["B", "N"])
    b.graph.outputs = [b.op("cumulative", x, kind="sum", axis=1)]
    bad = tmp_path / "scan.disc"
    bad.write_text(print_graph(b.graph))
    good = tmp_path / "ok.disc"
    good.write_text(print_graph(_graph("ok", "sum")))
    code = main(["export", str(bad), str(good), "-o", str(tmp_path / "o"), "--bytecode"])
    assert code == 1
    err = capsys.readouterr().err
    assert "scan.disc: not exported" in err and "cumulative" in err
    (written,) = (tmp_path / "o").glob("*.mlirbc")
    assert import_(written.read_bytes()).outputs[0].dtype.short == "f32"
