"""The native engine's per-step profile (``disc_env.profile``): every kernel, GEMM and the
host work of a module timed separately, so a report can say where a cluster's time goes."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, interpret
from disc_runtime import CompileCache, EngineError, InputError

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
RNG = np.random.default_rng(11)


def _graph():
    """A GEMM between a softmax row kernel and an elementwise kernel, plus a scatter-free
    column reduction: every step kind a transformer block has."""
    b = GraphBuilder("profiled")
    N, K = b.symbol("N"), b.symbol("K")
    x, w = b.input("x", "f32", [N, K]), b.input("w", "f32", [K, K])

    def rows(v):
        return b.broadcast_in_dim(v, shape=[N, K], broadcast_dimensions=[0])

    e = b.exp(b.sub(x, rows(b.reduce(x, kind="max", axes=[1]))))
    s = b.div(e, rows(b.reduce(e, kind="sum", axes=[1])))
    h = b.dot_general(s, w, lhs_batch=[], rhs_batch=[], lhs_contract=[1], rhs_contract=[0])
    return b.build(b.tanh(h), b.reduce(b.mul(h, h), kind="sum", axes=[0]))


def _inputs(n: int, k: int) -> list[np.ndarray]:
    return [RNG.standard_normal((n, k)).astype(np.float32),
            RNG.standard_normal((k, k)).astype(np.float32)]


@pytest.fixture(scope="module")
def exe(tmp_path_factory):
    return Compiler(CompileCache(tmp_path_factory.mktemp("cache")), target="native").compile(
        _graph())


def test_profile_names_every_step_and_counts_calls(exe) -> None:
    assert exe.can_profile
    assert exe.profile() is None  # off until asked for
    exe.start_profiling()
    try:
        inputs = _inputs(64, 48)
        start = time.perf_counter()
        for _ in range(3):
            got = exe.run(inputs)
        wall = time.perf_counter() - start
        for g, want in zip(got, interpret(_graph(), inputs)):
            np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4)  # profiling changes nothing
        prof = exe.profile()
    finally:
        exe._run_fn.profiler.stop_profiling()
    meta = exe.artifact.metadata["native"]
    assert prof[0]["name"] == "host" and prof[0]["kind"] == "host"
    names = [p["name"] for p in prof[1:]]
    assert len(set(names)) == len(names)
    assert {f"kernel{k['id']}" for k in meta["kernels"]} <= set(names)
    assert [p["kind"] for p in prof].count("library") == meta["fusion"]["librarycall"] == 1
    gemm = next(p for p in prof if p["kind"] == "library")
    assert gemm["ops"] == ["dot_general"] and gemm["shape"] == "[N, K] x [K, K]"
    assert all(p["calls"] == 3 for p in prof)
    assert all(p["seconds"] > 0 for p in prof)
    assert sum(p["seconds"] for p in prof) <= wall
    assert exe.profile() is None  # stopped


def test_time_goes_to_the_step_that_spends_it(tmp_path) -> None:
    """A 384^3 GEMM next to an elementwise op on 384 floats: the GEMM's slot has the time."""
    b = GraphBuilder("gemm_heavy")
    N = b.symbol("N")
    x, w, v = b.input("x", "f32", [N, N]), b.input("w", "f32", [N, N]), b.input("v", "f32", [N])
    h = b.dot_general(x, w, lhs_batch=[], rhs_batch=[], lhs_contract=[1], rhs_contract=[0])
    exe = Compiler(CompileCache(tmp_path), target="native").compile(
        b.build(h, b.tanh(b.exp(v))))
    exe.start_profiling()
    n = 384
    inputs = [RNG.standard_normal((n, n)).astype(np.float32) for _ in range(2)]
    for _ in range(3):
        exe.run(inputs + [RNG.standard_normal(n).astype(np.float32)])
    prof = {p["kind"]: p for p in exe.profile()}
    assert prof["library"]["seconds"] > 10 * prof["kernel"]["seconds"]


def test_concurrent_calls_all_count_and_failed_calls_do_not(exe) -> None:
    exe.start_profiling()
    try:
        def work():
            for _ in range(25):
                exe.run(_inputs(17, 9))

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with pytest.raises(InputError):
            exe.run([RNG.standard_normal((4, 5)).astype(np.float32),
                     RNG.standard_normal((6, 6)).astype(np.float32)])
        assert {p["calls"] for p in exe.profile()} == {100}
    finally:
        exe._run_fn.profiler.stop_profiling()


def test_a_thread_follows_profiling_switched_off_and_on_between_its_calls(exe) -> None:
    """The call path keeps the profile pointer its slot last gave the module: stopping
    must clear it (the buffer is gone) and a new session must get the new buffer."""
    inputs = _inputs(5, 3)
    exe.start_profiling()
    try:
        exe.run(inputs)
    finally:
        exe._run_fn.profiler.stop_profiling()
    for _ in range(3):
        exe.run(inputs)  # not profiled: the freed buffer is not written
    exe.start_profiling()
    try:
        for _ in range(2):
            exe.run(inputs)
        assert {p["calls"] for p in exe.profile()} == {2}
    finally:
        exe._run_fn.profiler.stop_profiling()


def test_reference_engine_cannot_profile(tmp_path) -> None:
    exe = Compiler(CompileCache(tmp_path), target="reference").compile(_graph())
    assert not exe.can_profile and exe.profile() is None
    with pytest.raises(EngineError, match="cannot profile"):
        exe.start_profiling()
