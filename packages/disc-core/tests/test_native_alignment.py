"""Buffers a native module makes for itself start on 64-byte lines.

malloc aligns to 16 bytes (a page + 16 past glibc's mmap threshold), and MKL's sgemm
writing C rows that start 16 bytes into a line measured about 10% slower on Zen 3; GPT
inference was 8% slower end to end while the module's intermediate buffers sat there.
The GEMM here is a Python stand-in for ``disc_env.sgemm_rowmajor`` that records the
pointers it is handed (fake_rowmajor_gemm.py): with the caller's tensors aligned and every
row a whole number of lines, each operand the module chose the address of (its
intermediate buffers, the row blocks of its epilogue and prologue GEMMs, the partial
results of a split K) must be aligned too."""

from __future__ import annotations

import numpy as np
import pytest
from fake_rowmajor_gemm import FakeRowMajorGemm, install

from disc_core import Compiler, GraphBuilder, interpret

RNG = np.random.default_rng(11)
LINE = 64


@pytest.fixture
def recording(monkeypatch, tmp_path):
    return install(monkeypatch, tmp_path)


def _aligned(shape: tuple[int, ...]) -> np.ndarray:
    """Standard-normal f32 data whose first element starts a 64-byte line."""
    n = int(np.prod(shape))
    raw = np.empty(n + LINE // 4, np.float32)
    off = (-raw.ctypes.data % LINE) // 4
    arr = raw[off:off + n].reshape(shape)
    arr[...] = RNG.standard_normal(shape)
    assert arr.ctypes.data % LINE == 0
    return arr


def _check(gemm: FakeRowMajorGemm, compiler: Compiler, graph, inputs) -> None:
    """Run ``graph`` on ``inputs``; every GEMM operand outside the caller's arrays (the
    inputs, and the outputs, which come from the caller's allocator) must be aligned, and so
    must the runtime's own large outputs."""
    exe = compiler.compile(graph)
    assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
    before = len(gemm.pointers)
    got = exe.run(inputs)
    for g, w in zip(got, interpret(graph, inputs)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    calls = gemm.pointers[before:]
    assert calls, "no f32 GEMM reached the row-major GEMM"
    callers = [(o.ctypes.data, o.ctypes.data + o.nbytes) for o in [*inputs, *got] if o.size]
    made = [p for call in calls for p in call if not any(lo <= p < hi for lo, hi in callers)]
    assert made, "every operand was the caller's: nothing was checked"
    for o in got:  # the standalone runtime's outputs, past a few KB
        if o.nbytes >= 16384:
            assert o.ctypes.data % LINE == 0, "a large output is off a 64-byte line"
    off = [p % LINE for p in made]
    assert off == [0] * len(made), (
        f"module-made GEMM operands start {off} bytes into a {LINE}-byte line")


def test_intermediate_buffers_and_epilogue_blocks_are_aligned(recording) -> None:
    """x @ w1 -> tanh -> @ w2: the first product's C and the second's A are intermediate
    buffers (the arena), split into row blocks for the epilogue on two threads."""
    gemm, compiler = recording
    b = GraphBuilder("align_chain")
    M = b.symbol("M")
    x, w1, w2 = b.input("x", "f32", [M, 48]), b.input("w1", "f32", [48, 80]), b.input(
        "w2", "f32", [80, 32])
    h = b.tanh(b.dot_general(x, w1, lhs_batch=[], rhs_batch=[], lhs_contract=[1],
                             rhs_contract=[0]))
    y = b.dot_general(b.exp(b.neg(h)), w2, lhs_batch=[], rhs_batch=[], lhs_contract=[1],
                      rhs_contract=[0])
    g = b.build(b.add(y, y))
    for m in (1, 7, 256, 1000):  # one thread, and row blocks over the team
        _check(gemm, compiler, g, [_aligned((m, 48)), _aligned((48, 80)), _aligned((80, 32))])


def test_split_k_partials_are_aligned(recording) -> None:
    """A small C over a long K: each member's partial C (after the first) is its own
    buffer, one per member in one allocation."""
    gemm, compiler = recording
    b = GraphBuilder("align_split_k")
    K = b.symbol("K")
    a, c = b.input("a", "f32", [K, 16]), b.input("c", "f32", [K, 48])
    prod = b.dot_general(a, c, lhs_batch=[], rhs_batch=[], lhs_contract=[0], rhs_contract=[0])
    g = b.build(b.tanh(prod))
    _check(gemm, compiler, g, [_aligned((4096, 16)), _aligned((4096, 48))])
