"""The compile stages (disc_core.pipeline): each can be stopped after and inspected, and
running all of them is what a Compiler does (same cache key, same artifact files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from disc_core import STAGES, Compiler, GraphBuilder, StageResult, compile_text, parse_graph
from disc_core.native.emit import ModuleInfo
from disc_core.native.fusion import FusionPlan
from disc_core.native.lower import (
    CanonicalizeDots,
    CollapseReducedRuns,
    LowerConvolutions,
    SplitInputDilation,
    SplitReductions,
    backend_lowering,
)
from disc_core.native.onednn_conv import UseOneDNNConvolutions
from disc_core.pipeline import compile_graph, fuse, lower, optimize
from disc_runtime import CompileCache

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SOFTMAX = """func @softmax(%x: f32[B, S]) -> (f32[B, S]) {
  %0 = reduce(%x) {kind = "max", axes = [1]} : f32[B]
  %1 = broadcast_in_dim(%0) {shape = [B, S], broadcast_dimensions = [0]} : f32[B, S]
  %2 = sub(%x, %1) : f32[B, S]
  %3 = exp(%2) : f32[B, S]
  %4 = reduce(%3) {kind = "sum", axes = [1]} : f32[B]
  %5 = broadcast_in_dim(%4) {shape = [B, S], broadcast_dimensions = [0]} : f32[B, S]
  %6 = div(%3, %5) : f32[B, S]
  %7 = tanh(%x) : f32[B, S]
  return %6
}"""

#: a linear layer (x @ w.t()) and a sum over two axes: both rewritten by the lower stage
LINEAR = """func @linear(%x: f32[B, K], %w: f32[N, K]) -> (f32[B, N], f32[]) {
  %0 = transpose(%w) {permutation = [1, 0]} : f32[K, N]
  %1 = dot_general(%x, %0) {lhs_batch = [], rhs_batch = [], lhs_contract = [1], \
rhs_contract = [0]} : f32[B, N]
  %2 = reduce(%1) {kind = "sum", axes = [0, 1]} : f32[]
  return %1, %2
}"""


def conv_graph():
    b = GraphBuilder("conv")
    n, h = b.symbol("N"), b.symbol("H")
    x = b.input("x", "f32", [n, 3, h, h])
    w = b.input("w", "f32", [4, 3, 3, 3])
    y = b.convolution(x, w, window_strides=[1, 1], padding=[[1, 1], [1, 1]],
                      lhs_dilation=[1, 1], rhs_dilation=[1, 1], feature_group_count=1,
                      input_layout="NCHW", kernel_layout="OIHW", output_layout="NCHW")
    return b.build(b.tanh(y))


def test_stage_names_in_order() -> None:
    assert STAGES == ("optimize", "lower", "fuse", "emit", "build", "package")


def test_unknown_stage_is_named() -> None:
    with pytest.raises(ValueError, match="stages are optimize, lower"):
        compile_text(SOFTMAX, stop_after="codegen")


def test_stop_after_optimize_is_the_optimized_graph_text() -> None:
    r = compile_text(SOFTMAX, stop_after="optimize", target="reference")
    assert isinstance(r, StageResult) and r.stage == "optimize"
    g = parse_graph(SOFTMAX)
    optimize(g)
    assert r.text == str(r) == str(g)
    assert "tanh" not in r.text and "tanh" in SOFTMAX  # dead code eliminated
    assert str(parse_graph(r.text)) == r.text  # round-trips
    assert r.lowered is None and r.plan is None and r.artifact is None
    unoptimized = compile_text(SOFTMAX, stop_after="optimize", optimize=False)
    assert unoptimized.text == str(parse_graph(SOFTMAX))


def test_stop_after_lower_shows_the_backend_rewrites_as_named_passes() -> None:
    r = compile_text(LINEAR, stop_after="lower", target="native")
    assert r.stage == "lower" and r.plan is None
    assert "transpose" not in r.text  # folded into the GEMM's flags
    assert "rhs_contract = [1]" in r.text
    assert r.text.count("reduce(") == 2  # one axis each
    assert list(r.lower_passes) == ["use-onednn-convolutions", "split-input-dilation",
                                    "lower-convolutions", "collapse-reduced-runs",
                                    "split-reductions", "canonicalize-dots"]
    changed = {name for name, st in r.lower_passes.items() if st.changes}
    assert changed == {"split-reductions", "canonicalize-dots"}
    assert "transpose" in r.graph_text  # the optimized graph, as the artifact keeps it


def test_lowering_passes_run_once_in_order(monkeypatch) -> None:
    monkeypatch.setenv("DISC_ONEDNN_CONV", "0")  # the im2col lowering, even with oneDNN
    pm = backend_lowering()
    assert [type(p) for p in pm.passes] == [UseOneDNNConvolutions, SplitInputDilation,
                                            LowerConvolutions, CollapseReducedRuns,
                                            SplitReductions, CanonicalizeDots]
    assert pm.max_iterations == 1 and not pm.verify_each
    g = conv_graph()
    lower(g)
    names = {op.name for op in g.ops}
    assert "convolution" not in names and {"gather", "dot_general"} <= names
    g.verify()


def test_stop_after_fuse_is_the_plan_summary() -> None:
    r = compile_text(SOFTMAX, stop_after="fuse", target="native")
    assert isinstance(r.plan, FusionPlan) and r.module is None
    first, *steps = r.text.splitlines()
    assert json.loads(first) == r.plan.summary() == {"row": 1}
    assert steps[0].split(":")[0].strip() == "0 row kernel"
    lin = compile_text(LINEAR, stop_after="fuse", target="native")
    # the GEMM, with the row sum of its output fused as its epilogue (gemm_epilogue.py)
    assert "LibraryCall + row epilogue: dot_general, reduce" in lin.text
    g = parse_graph(SOFTMAX)
    assert fuse(lower(optimize(g))).summary() == r.plan.summary()


def test_stop_after_emit_is_the_c_source() -> None:
    r = compile_text(SOFTMAX, stop_after="emit", target="native")
    assert isinstance(r.module, ModuleInfo) and r.compiled is None
    assert r.text == r.module.sources[0] and "disc_run" in r.text


def test_stop_after_build_is_the_module_path(tmp_path) -> None:
    r = compile_text(SOFTMAX, stop_after="build", target="native", directory=tmp_path)
    assert r.compiled is not None and r.artifact is None
    assert r.text.strip() == str(tmp_path / "module.so")
    assert (tmp_path / "module.so").stat().st_size > 0


def test_stop_after_package_is_what_the_compiler_writes(tmp_path) -> None:
    cache = CompileCache(tmp_path / "cache")
    compiler = Compiler(cache, target="native")
    exe, source = compiler.compile_text(SOFTMAX, [("float32", 2)])
    assert source == "miss"
    r = compile_text(SOFTMAX, target="native", directory=tmp_path / "out")
    assert r.stage == "package" and r.artifact is not None
    want, got = exe.artifact, r.artifact
    assert got.key == want.key == compiler.key(SOFTMAX, [("float32", 2)])
    assert got.engine == want.engine == "native"
    assert got.files == want.files  # names and sha256 of every file, module.so included
    assert got.read_bytes("graph.disc") == want.read_bytes("graph.disc")
    timing = {"cc_seconds", "build_seconds"}
    strip = lambda m: {k: v for k, v in m["native"].items() if k not in timing}  # noqa: E731
    assert strip(got.metadata) == strip(want.metadata)
    assert got.metadata["source_graph"] == want.metadata["source_graph"] == SOFTMAX
    assert r.text.splitlines()[0] == str(got.directory)


def test_reference_target_skips_the_backend_stages(tmp_path) -> None:
    r = compile_text(SOFTMAX, stop_after="fuse", target="reference")
    assert r.plan is None and "target 'reference'" in r.text
    r = compile_text(SOFTMAX, target="reference", directory=tmp_path)
    want = Compiler(CompileCache(tmp_path / "cache"), target="reference").compile_text(
        SOFTMAX, [("float32", 2)])[0].artifact
    assert r.artifact.engine == want.engine == "reference"
    assert r.artifact.files == want.files and r.artifact.key == want.key


def test_compile_graph_on_a_built_graph_is_compiler_compile(tmp_path) -> None:
    g = conv_graph()
    r = compile_graph(g.clone(), stop_after="fuse", target="native")
    assert r.source == str(g) and r.plan is not None and r.plan.summary().get("librarycall")
    want = Compiler(CompileCache(tmp_path / "cache"), target="native").compile(g).artifact
    got = compile_graph(g.clone(), target="native", directory=tmp_path / "out").artifact
    assert got.key == want.key and got.files == want.files


def _disc(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "disc_core.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))


@pytest.mark.parametrize("stage", STAGES)
def test_cli_compile_stop_after(tmp_path, stage) -> None:
    src = tmp_path / "g.disc"
    src.write_text(LINEAR)
    res = _disc("compile", src, "--stop-after", stage, "--out", tmp_path / "out")
    assert res.returncode == 0, res.stderr
    want = compile_text(LINEAR, stop_after=stage, directory=tmp_path / "mine")
    if stage in ("optimize", "lower", "fuse", "emit"):
        assert res.stdout == want.text
    elif stage == "build":
        assert res.stdout.strip() == str(tmp_path / "out" / "module.so")
    else:
        manifest = json.loads(res.stdout.split("\n", 1)[1])
        assert manifest["key"] == want.artifact.key
        assert manifest["files"] == want.artifact.files
    if stage == "lower":
        assert "lower: canonicalize-dots: changed the graph" in res.stderr


def test_cli_compile_errors_are_one_line(tmp_path) -> None:
    res = _disc("compile", tmp_path / "missing.disc")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "no such file" in res.stderr
    bad = tmp_path / "bad.disc"
    bad.write_text("func @f(")
    res = _disc("compile", bad)
    assert res.returncode == 2 and res.stderr.startswith("disc: error: ")
    res = _disc("compile", bad, "--stop-after", "nope")
    assert res.returncode == 2
