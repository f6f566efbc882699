"""Compiling through disc-runtime: one compile per rank/dtype signature, the disk cache,
tampered entries, artifacts run by ``disc-run`` with no framework, and graph verification."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, VerifyError, jit
from disc_core.compiler import signature_of
from disc_runtime import CacheCorruptionWarning, CompileCache, InputError


def softmax_graph():
    b = GraphBuilder("softmax")
    B, S = b.symbol("B"), b.symbol("S")
    x = b.input("x", "f32", [B, S])
    m = b.broadcast_in_dim(b.reduce(x, kind="max", axes=[1]), shape=[B, S],
                           broadcast_dimensions=[0])
    e = b.exp(b.sub(x, m))
    s = b.broadcast_in_dim(b.reduce(e, kind="sum", axes=[1]), shape=[B, S],
                           broadcast_dimensions=[0])
    return b.build(b.div(e, s))


def np_softmax(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def test_five_shapes_one_compile_one_entry(tmp_path) -> None:
    cache = CompileCache(tmp_path)
    fn = jit(softmax_graph(), cache=cache)
    rng = np.random.default_rng(0)
    for shape in [(1, 1), (2, 7), (5, 33), (0, 4), (3, 1000)]:
        x = rng.standard_normal(shape).astype(np.float32)
        (y,) = fn(x)
        np.testing.assert_allclose(y, np_softmax(x), rtol=1e-6, atol=1e-7)
    assert fn.stats.compiles == 1
    assert fn.stats.memory_hits == 4
    assert cache.info()["entries"] == 1


def test_other_dtype_or_rank_is_a_clear_error(tmp_path) -> None:
    fn = jit(softmax_graph(), cache=CompileCache(tmp_path))
    with pytest.raises(InputError, match="expected dtype float32, got float64"):
        fn(np.zeros((2, 3)))
    with pytest.raises(InputError, match="expected rank 2"):
        fn(np.zeros(3, np.float32))


def test_second_compiler_hits_disk_and_tampered_entry_is_rebuilt(tmp_path) -> None:
    g = softmax_graph()
    x = np.ones((2, 3), np.float32)
    c1 = Compiler(CompileCache(tmp_path))
    c1.compile(g).run([x])
    c2 = Compiler(CompileCache(tmp_path))
    c2.compile(g).run([x])
    assert (c2.stats.compiles, c2.stats.disk_hits) == (0, 1)

    entry = next(p for p in Path(tmp_path).rglob("graph.disc"))
    entry.write_text(entry.read_text().replace("exp(", "neg("))
    c3 = Compiler(CompileCache(tmp_path))
    with pytest.warns(CacheCorruptionWarning):
        exe = c3.compile(g)
    assert c3.stats.compiles == 1 and c3.cache.stats.rebuilt_corrupt == 1
    np.testing.assert_allclose(exe.run([x])[0], np_softmax(x), rtol=1e-6)


def test_compile_text_hits_by_text_and_builds_from_it_on_a_miss(tmp_path) -> None:
    g = softmax_graph()
    text, types = str(g), [(v.dtype.np_name, v.rank) for v in g.inputs]
    x = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    cold = Compiler(CompileCache(tmp_path / "cold"))
    exe, source = cold.compile_text(text, types)  # a miss: parsed and built from the text
    assert source == "miss" and cold.stats.compiles == 1
    np.testing.assert_allclose(exe.run([x])[0], np_softmax(x), rtol=1e-6, atol=1e-7)
    warm = Compiler(CompileCache(tmp_path / "warm"))
    warm.compile(g)
    again = Compiler(CompileCache(tmp_path / "warm"))
    exe, source = again.compile_text(text, types)  # the same key as compiling the graph
    assert (source, again.stats.compiles) == ("disk", 0)
    np.testing.assert_allclose(exe.run([x])[0], np_softmax(x), rtol=1e-6, atol=1e-7)


def test_graphs_that_differ_only_in_their_names_share_one_artifact(tmp_path) -> None:
    """A graph's name says where it came from (a bridge numbers a process's graphs, and a
    recompiled frame's clusters come back as ``forward_2_c0``), not what it computes."""
    def named(name: str, negate: bool = False):
        g = softmax_graph()
        g.name = name
        if negate:
            b = GraphBuilder(name)
            x = b.input("x", "f32", ["B", "S"])
            g = b.build(b.neg(x))
        return g

    x = np.random.default_rng(2).standard_normal((3, 6)).astype(np.float32)
    compiler = Compiler(CompileCache(tmp_path))
    first = compiler.compile(named("forward_0_c0"))
    again = compiler.compile(named("forward_2_c0"))
    assert again is first and compiler.stats.compiles == 1
    np.testing.assert_allclose(again.run([x])[0], np_softmax(x), rtol=1e-6, atol=1e-7)
    assert Compiler(CompileCache(tmp_path)).compile_text(
        str(named("inference_7_c0")), [("float32", 2)])[1] == "disk"
    other = compiler.compile(named("forward_0_c0", negate=True))  # same name, other body
    assert compiler.stats.compiles == 2
    np.testing.assert_array_equal(other.run([x])[0], -x)


def test_optimized_artifact_keeps_numerics(tmp_path) -> None:
    b = GraphBuilder("opt")
    x = b.input("x", "f32", ["N"])
    one = b.broadcast_in_dim(b.constant(np.float32(1)), shape=["N"], broadcast_dimensions=[])
    g = b.build(b.mul(b.neg(b.neg(x)), one))
    exe = Compiler(CompileCache(tmp_path)).compile(g)
    assert "neg" not in exe.artifact.read_text("graph.disc")
    np.testing.assert_array_equal(exe.run([np.arange(5, dtype=np.float32)])[0], np.arange(5))


def test_signature_carries_symbols_and_expressions() -> None:
    b = GraphBuilder("sig")
    s = b.symbol("S")
    g = b.build(b.reshape(b.input("x", "f32", [s, 4]), shape=[4 * s]))
    sig = signature_of(g)
    assert sig.inputs[0].dims == ("S", 4)
    assert sig.outputs[0].dims == ("4*S",)


def test_unbound_symbol_in_attributes_is_rejected() -> None:
    b = GraphBuilder("bad")
    x = b.input("x", "f32", [3])
    with pytest.raises(VerifyError, match=r"symbol\(s\) \['T'\] that no input binds"):
        b.build(b.broadcast_in_dim(x, shape=["T", 3], broadcast_dimensions=[1]))


@pytest.mark.parametrize("target", ["native", "reference"])
def test_disc_run_executes_a_compiled_artifact_standalone(tmp_path, target) -> None:
    """The CLI runs a core-compiled artifact in a process that imports no framework."""
    exe = Compiler(CompileCache(tmp_path / "cache"), target=target).compile(softmax_graph())
    x = np.random.default_rng(1).standard_normal((4, 9)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code = ("import sys, runpy; sys.argv = ['disc-run'] + sys.argv[1:]; "
            "from disc_runtime.cli import main; rc = main(sys.argv[1:]); "
            "bad = [m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'tensorflow', 'paddle', 'jax')]; "
            "assert not bad, bad; sys.exit(rc)")
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", code, str(exe.artifact.directory), "--inputs",
                        str(tmp_path / "x.npy"), "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    got = np.load(tmp_path / "out" / "output_0.npy")
    np.testing.assert_allclose(got, np_softmax(x), rtol=1e-6)
    manifest = json.loads((exe.artifact.directory / "manifest.json").read_text())
    assert manifest["engine"] == target


def test_compile_is_thread_safe(tmp_path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    fn = jit(softmax_graph(), cache=CompileCache(tmp_path))
    xs = [np.random.default_rng(i).standard_normal((i + 1, 5)).astype(np.float32)
          for i in range(16)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with ThreadPoolExecutor(8) as pool:
            outs = list(pool.map(lambda x: fn(x)[0], xs))
    for x, y in zip(xs, outs):
        np.testing.assert_allclose(y, np_softmax(x), rtol=1e-6)
    assert fn.stats.compiles == 1


def test_a_cache_shared_by_another_cpu_builds_its_own_module(tmp_path, monkeypatch) -> None:
    """Modules are built for the host's CPU (-march=native): a cache directory another CPU
    filled (ranks on several machines, a cache baked into an image) must not hand its
    modules to this one, where an instruction it lacks would kill the process."""
    from disc_runtime import facts

    x = np.random.default_rng(3).standard_normal((2, 5)).astype(np.float32)
    first = Compiler(CompileCache(tmp_path))
    first.compile(softmax_graph())
    assert first.stats.compiles == 1
    same_cpu = Compiler(CompileCache(tmp_path))
    assert same_cpu.compile_text(str(softmax_graph()), [("float32", 2)])[1] == "disk"
    monkeypatch.setattr(facts, "cpu_identity", lambda: "another-cpu")
    other_cpu = Compiler(CompileCache(tmp_path))
    exe, source = other_cpu.compile_text(str(softmax_graph()), [("float32", 2)])
    assert source == "miss" and other_cpu.stats.compiles == 1
    np.testing.assert_allclose(exe.run([x])[0], np_softmax(x), rtol=1e-6, atol=1e-7)


_BF16_IN_A_FRESH_PROCESS = """
import sys
import numpy as np
from disc_core import Compiler, GraphBuilder, interpret
from disc_runtime import CompileCache

assert "ml_dtypes" not in sys.modules, "importing disc_core imported ml_dtypes"
b = GraphBuilder("bf16")
n = b.symbol("N")
x = b.input("x", "bf16", [n, 4])
g = b.build(b.add(b.mul(x, x), x))
exe = Compiler(CompileCache(sys.argv[1]), target="native").compile(g)  # reference engine
assert "ml_dtypes" in sys.modules, "a bfloat16 signature loaded without numpy's bfloat16"
import ml_dtypes
xs = (np.arange(12, dtype=np.float32).reshape(3, 4) / 4).astype(ml_dtypes.bfloat16)
got, = exe.run([xs])
want, = interpret(g, [xs])
assert got.dtype.name == "bfloat16", got.dtype
np.testing.assert_array_equal(got.astype(np.float32), np.asarray(want).astype(np.float32))
print("ok")
"""


def test_ml_dtypes_waits_for_a_bfloat16_graph(tmp_path):
    """disc_core imports ml_dtypes (about 1 s) only for a graph that needs numpy's
    bfloat16; the runtime, which never imports it, then resolves the artifact's dtype."""
    r = subprocess.run([sys.executable, "-c", _BF16_IN_A_FRESH_PROCESS, str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "ok"
