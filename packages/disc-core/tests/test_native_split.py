"""Modules split into several C translation units, compiled in parallel and linked: they
compute what a one-file module computes, and a compiler error in any unit is reported."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, interpret
from disc_core.native import build as native_build
from disc_core.native import emit
from disc_core.native.toolchain import find_toolchain
from disc_runtime import CompileCache

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
RNG = np.random.default_rng(7)


def _many_kernels():
    """Softmax row kernels (with vector versions) between GEMMs, a column reduction, and a
    non-scalar constant read by a kernel and by a GEMM: kernels, the host and the GEMM
    helper land in different units."""
    b = GraphBuilder("split")
    N, K = b.symbol("N"), b.symbol("K")
    x, w = b.input("x", "f32", [N, K]), b.input("w", "f32", [K, K])
    c = b.constant(np.arange(16, dtype=np.float32).reshape(4, 4) / 8)

    def rows(v):
        return b.broadcast_in_dim(v, shape=[N, K], broadcast_dimensions=[0])

    def softmax(v):
        e = b.exp(b.sub(v, rows(b.reduce(v, kind="max", axes=[1]))))
        return b.div(e, rows(b.reduce(e, kind="sum", axes=[1])))

    def mm(a, m):
        return b.dot_general(a, m, lhs_batch=[], rhs_batch=[], lhs_contract=[1],
                             rhs_contract=[0])

    h = softmax(x)
    h = softmax(b.tanh(mm(h, w)))
    h = softmax(b.add(mm(h, w), b.exp(h)))
    cols = b.reduce(b.mul(h, h), kind="sum", axes=[0])
    return b.build(h, cols, mm(b.tanh(x), w), b.add(c, b.exp(c)), mm(c, c))


@pytest.fixture
def split_everything(monkeypatch):
    """Split even this small module into as many units as asked."""
    monkeypatch.setattr(emit, "SPLIT_MIN_CHARS", 1)


@pytest.mark.parametrize("units", [2, 3, 5])
def test_a_split_module_computes_what_one_file_computes(tmp_path, monkeypatch,
                                                        split_everything, units) -> None:
    monkeypatch.setenv("DISC_COMPILE_UNITS", str(units))
    exe = Compiler(CompileCache(tmp_path), target="native").compile(_many_kernels())
    meta = exe.artifact.metadata["native"]
    assert meta["units"] == units
    files = {p.name for p in (exe.artifact.directory / "native").iterdir()}
    assert {"module.c"} | {f"module.{i}.c" for i in range(1, units)} <= files
    for n, k in [(5, 4), (1, 1), (0, 4), (3, 0), (37, 19), (300, 32)]:
        inputs = [RNG.standard_normal((n, k)).astype(np.float32),
                  RNG.standard_normal((k, k)).astype(np.float32)]
        for got, want in zip(exe.run(inputs), interpret(_many_kernels(), inputs)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_small_modules_and_one_cpu_stay_in_one_file(tmp_path, monkeypatch) -> None:
    """Below ``SPLIT_MIN_CHARS`` of kernels per unit, or with one unit allowed, a module
    is one file: a unit costs compiler start-up and the link."""
    monkeypatch.setenv("DISC_COMPILE_UNITS", "8")
    exe = Compiler(CompileCache(tmp_path / "a"), target="native").compile(_many_kernels())
    assert exe.artifact.metadata["native"]["units"] == 1
    monkeypatch.setattr(emit, "SPLIT_MIN_CHARS", 1)
    monkeypatch.setenv("DISC_COMPILE_UNITS", "1")
    assert native_build.compile_units() == 1
    exe = Compiler(CompileCache(tmp_path / "b"), target="native").compile(_many_kernels())
    assert exe.artifact.metadata["native"]["units"] == 1


def test_a_compiler_error_in_any_unit_is_reported(tmp_path) -> None:
    tc = find_toolchain()
    good = "int disc_one(void) { return 1; }\n"
    for sources in ([good, "int broken(void) { return }\n"],
                    ["int broken(void) { return }\n", good]):
        with pytest.raises(RuntimeError, match=r"C compiler failed[\s\S]*broken"):
            tc.compile(sources, Path(tmp_path) / "m.so")
    seconds, _ = tc.compile([good, "int disc_two(void) { return 2; }\n"],
                            Path(tmp_path) / "ok.so")
    assert seconds > 0 and (Path(tmp_path) / "ok.so").stat().st_size > 0


def test_units_follow_the_cpus_left_free(monkeypatch) -> None:
    """Split across the CPUs no compiler of this process uses, keeping one for a caller
    that goes on working (a bridge tracing its next graph while this one compiles)."""
    monkeypatch.delenv("DISC_COMPILE_UNITS", raising=False)
    monkeypatch.setattr(native_build.os, "sched_getaffinity", lambda pid: set(range(4)))
    running = [0]
    monkeypatch.setattr(native_build, "running_compilers", lambda: running[0])
    assert native_build.compile_units() == 4
    assert native_build.compile_units(caller_busy=True) == 3
    running[0] = 2
    assert native_build.compile_units(caller_busy=True) == 1
    running[0] = 9
    assert native_build.compile_units() == 1
    monkeypatch.setenv("DISC_COMPILE_UNITS", "3")
    assert native_build.compile_units(caller_busy=True) == 3


def test_running_compilers_counts_processes_while_they_run(tmp_path) -> None:
    """What ``compile_units`` subtracts: the units of every build still compiling."""
    import threading
    import time

    from disc_core.native import toolchain

    seen: list[int] = []
    tc = find_toolchain()
    slow = "#include <math.h>\n" + "".join(
        f"double f{i}(double x) {{ return sin(x) * {i}; }}\n" for i in range(3000))
    t = threading.Thread(target=tc.compile, args=([slow, slow.replace("f", "g")],
                                                  Path(tmp_path) / "m.so"))
    t.start()
    while t.is_alive():
        seen.append(toolchain.running_compilers())
        time.sleep(0.001)
    t.join()
    assert max(seen) == 2 and toolchain.running_compilers() == 0


def test_concurrent_builds_wait_for_a_compile_slot(tmp_path, monkeypatch) -> None:
    """At most as many builds compile at once as ``_JOBS`` allows; the rest wait."""
    import threading
    import time

    from disc_core.native import toolchain

    monkeypatch.setattr(toolchain, "_JOBS", threading.BoundedSemaphore(2))
    tc = find_toolchain()
    src = "#include <math.h>\n" + "".join(
        f"double f{i}(double x) {{ return sin(x) * {i}; }}\n" for i in range(1500))
    threads = [threading.Thread(target=tc.compile, args=(src, Path(tmp_path) / f"m{i}.so"))
               for i in range(5)]
    for t in threads:
        t.start()
    seen = []
    while any(t.is_alive() for t in threads):
        seen.append(toolchain.running_compilers())
        time.sleep(0.001)
    assert max(seen) == 2
    assert all((Path(tmp_path) / f"m{i}.so").exists() for i in range(5))
