"""The library helpers (GEMM, fused attention) are compiled once into objects that every
module calling them links: kept in memory and on disk per compiler, flags, CPU and source,
rebuilt when a kept one is damaged or no longer links, built once when several modules
need one at the same time, and the modules compute what the reference interpreter does."""

from __future__ import annotations

import subprocess
import threading

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, interpret
from disc_core.native import helper_objects
from disc_core.native.toolchain import Toolchain, find_toolchain
from disc_runtime import CompileCache

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
RNG = np.random.default_rng(11)


def _gemm_graph(name: str, act: str = "tanh"):
    """x @ w through an activation: one GEMM (the f32 helper) and a kernel."""
    b = GraphBuilder(name)
    x = b.input("x", "f32", ["N", "K"])
    w = b.input("w", "f32", ["K", "M"])
    y = b.dot_general(x, w, lhs_batch=[], rhs_batch=[], lhs_contract=[1], rhs_contract=[0])
    return b.build(getattr(b, act)(y))


def _attention_graph():
    b = GraphBuilder("attn")
    q, k, v = (b.input(n, "f32", ["B", 2, "S", 8]) for n in "qkv")
    out, lse = b.op("attention", q, k, v, causal=True, scale=0.35)
    return b.build(out, lse)


@pytest.fixture
def builds(monkeypatch, tmp_path):
    """A fresh helper cache (memory and disk) and a record of every compile: the helper
    units each one compiled."""
    monkeypatch.setenv("DISC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(helper_objects, "_MEMORY", {})
    seen: list[int] = []
    real = Toolchain._compile

    def counting(self, units, out, vector_report, objects, object_units, before_link=None):
        def late():
            more = before_link()
            seen[-1] += len(more)
            return more

        seen.append(len(object_units))
        return real(self, units, out, vector_report, objects, object_units,
                    late if before_link else None)

    monkeypatch.setattr(Toolchain, "_compile", counting)
    return seen


def _compile(tmp_path, graph, tag: str):
    return Compiler(CompileCache(tmp_path / tag), target="native").compile(graph)


def _check_gemm(exe, graph) -> None:
    for n, k, m in [(5, 7, 3), (1, 1, 1), (0, 4, 2), (3, 0, 5), (64, 33, 17)]:
        ins = [RNG.standard_normal((n, k)).astype(np.float32),
               RNG.standard_normal((k, m)).astype(np.float32)]
        (got,), (want,) = exe.run(ins), interpret(graph, ins)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _preprocessed(source: str) -> str:
    tc = find_toolchain()
    flags = [f for f in tc.flags if f.startswith(("-D", "-f", "-m", "-std"))]
    return subprocess.run([tc.cc, *flags, "-E", "-P", "-x", "c", "-"], input=source, text=True,
                          capture_output=True, check=True).stdout


def _records(tmp_path):
    return sorted((tmp_path / "cache" / helper_objects.LAYOUT).glob("*.o"))


def test_a_module_links_the_helper_object_and_holds_only_its_prototypes(tmp_path, builds):
    graph = _gemm_graph("one")
    exe = _compile(tmp_path, graph, "a")
    meta = exe.artifact.metadata["native"]
    assert meta["helper_units"] == 1 and builds == [1]
    native = exe.artifact.directory / "native"
    module, helper = (native / "module.c").read_text(), (native / "helper0.c").read_text()
    assert "#define DISC_HELPER_DECLARE_ONLY" in module and "DISC_HELPERS_LINKED" in module
    # after preprocessing, the helper's body (its partial sums freed at the end) is in its
    # own unit only
    assert "free(parts);" in _preprocessed(helper) and "free(parts);" not in _preprocessed(module)
    _check_gemm(exe, graph)


def test_a_second_module_links_the_kept_object_without_compiling_it(tmp_path, builds):
    _compile(tmp_path, _gemm_graph("first"), "a")
    assert len(_records(tmp_path)) == 1
    graph = _gemm_graph("second", act="exp")
    _check_gemm(_compile(tmp_path, graph, "b"), graph)
    assert builds == [1, 0]


def test_a_new_process_reads_the_object_from_disk(tmp_path, builds, monkeypatch):
    _compile(tmp_path, _gemm_graph("first"), "a")
    monkeypatch.setattr(helper_objects, "_MEMORY", {})  # as a new process starts
    graph = _gemm_graph("second", act="exp")
    _check_gemm(_compile(tmp_path, graph, "b"), graph)
    assert builds == [1, 0]


def test_a_damaged_record_is_built_again(tmp_path, builds, monkeypatch):
    _compile(tmp_path, _gemm_graph("first"), "a")
    (record,) = _records(tmp_path)
    data = bytearray(record.read_bytes())
    data[len(data) // 2] ^= 0xFF
    record.write_bytes(bytes(data))
    monkeypatch.setattr(helper_objects, "_MEMORY", {})
    graph = _gemm_graph("second", act="exp")
    _check_gemm(_compile(tmp_path, graph, "b"), graph)
    assert builds == [1, 1]
    assert helper_objects._read(record) is not None  # replaced by a good one


def test_an_object_that_does_not_link_is_dropped_and_built_again(tmp_path, builds, monkeypatch):
    """A record that matches its checksum but is not an object this compiler links (from
    a broken toolchain, say): the link fails, the module's helpers are built afresh."""
    _compile(tmp_path, _gemm_graph("first"), "a")
    (record,) = _records(tmp_path)
    helper_objects._write(record, b"not an object file")
    monkeypatch.setattr(helper_objects, "_MEMORY", {})
    graph = _gemm_graph("second", act="exp")
    _check_gemm(_compile(tmp_path, graph, "b"), graph)
    assert builds == [1, 0, 1]  # built, linked from the record (failed), built again
    assert helper_objects._read(record).startswith(b"\x7fELF")


def test_modules_building_at_once_all_finish_and_compute(tmp_path, builds):
    """Three builds needing one missing helper at once, in a compiler pool of two slots
    (``toolchain._JOBS``): one compiles it; the others take its object if it is kept by
    their link, or compile it themselves. None waits for another (a build waiting for a
    helper whose builder waits for a slot would never finish)."""
    graphs = [_gemm_graph(f"g{i}", act=act) for i, act in enumerate(["tanh", "exp", "abs"])]
    exes: list = [None] * len(graphs)
    barrier = threading.Barrier(len(graphs))

    def build(i):
        barrier.wait()
        exes[i] = _compile(tmp_path, graphs[i], f"t{i}")

    threads = [threading.Thread(target=build, args=(i,)) for i in range(len(graphs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a build never finished"
    assert len(builds) == 3 and 1 <= sum(builds) <= 3
    for exe, graph in zip(exes, graphs):
        _check_gemm(exe, graph)


def test_attention_kernels_are_a_helper_object_too(tmp_path, builds):
    graph = _attention_graph()
    exe = _compile(tmp_path, graph, "a")
    assert exe.artifact.metadata["native"]["helper_units"] == 1 and builds == [1]
    for b, s in [(1, 1), (2, 5), (3, 70)]:
        ins = [RNG.standard_normal((b, 2, s, 8)).astype(np.float32) for _ in range(3)]
        for got, want in zip(exe.run(ins), interpret(graph, ins)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_the_key_follows_the_compiler_and_the_source():
    tc = find_toolchain()
    other = Toolchain(tc.cc, tc.version + " (another build)")
    unit = "int f(void) { return 1; }\n"
    key = helper_objects.object_key(tc, unit)
    assert key == helper_objects.object_key(tc, unit)
    assert key != helper_objects.object_key(other, unit)
    assert key != helper_objects.object_key(tc, unit.replace("1", "2"))


def test_a_build_never_waits_for_a_helper_another_build_is_making(tmp_path, builds):
    """A build that finds its helper being compiled by another (its lock held) compiles
    its own unit, and at the link compiles the helper itself if the other has not kept
    it: it finishes while the other still holds the lock."""
    from disc_core.dtypes import DType
    from disc_core.native.emit import HELPER_HEAD
    from disc_core.native.library import gemm_helper

    graph = _gemm_graph("late")
    key = helper_objects.object_key(find_toolchain(), HELPER_HEAD + gemm_helper(DType.F32))
    lock = helper_objects._unit_lock(key)
    lock.acquire()  # as another build still compiling it would
    try:
        done: dict = {}
        worker = threading.Thread(
            target=lambda: done.update(exe=_compile(tmp_path, graph, "a")))
        worker.start()
        worker.join(timeout=120)
        assert not worker.is_alive(), "the build waited for the other one"
    finally:
        lock.release()
    assert builds == [1]  # none at the start; compiled before the link
    _check_gemm(done["exe"], graph)
    assert len(_records(tmp_path)) == 1


def test_a_module_that_does_not_compile_is_not_built_again(tmp_path, builds):
    """Only a failed link is retried with the helpers rebuilt; a compile error in the
    module's own unit is reported after one attempt."""
    from disc_core.native.build import compile_native
    from disc_core.native.ccommon import ModuleInfo

    exe = _compile(tmp_path, _gemm_graph("first"), "a")
    unit = (exe.artifact.directory / "native" / "helper0.c").read_text()
    info = ModuleInfo(sources=["int broken(void) { return }\n"], needs_blas=False,
                      helper_units=[unit])
    with pytest.raises(RuntimeError, match=r"C compiler failed[\s\S]*broken"):
        compile_native(info, tmp_path / "out")
    assert builds == [1, 0]
