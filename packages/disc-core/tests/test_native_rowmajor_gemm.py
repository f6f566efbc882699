"""f32 GEMMs of a native module go to ``disc_env.sgemm_rowmajor`` (oneDNN's ``dnnl_sgemm``
signature) when the runtime provides one. The row-major GEMM here is a Python stand-in that
computes with numpy from the raw pointers and strides it is given, so every layout, thread
split and batch offset the module passes is checked against the reference interpreter
whether or not oneDNN is installed (disc-tf's suite runs the real one)."""

from __future__ import annotations

import numpy as np
import pytest
from fake_rowmajor_gemm import install

from disc_core import GraphBuilder, interpret

RNG = np.random.default_rng(7)


@pytest.fixture
def fake(monkeypatch, tmp_path):
    return install(monkeypatch, tmp_path)


def _run(compiler, graph, inputs):
    exe = compiler.compile(graph)
    assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
    got = exe.run(inputs)
    for g, w in zip(got, interpret(graph, inputs)):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("lhs_t, rhs_t", [(False, False), (False, True), (True, False),
                                          (True, True)])
def test_every_transpose_combination_and_thread_split(fake, lhs_t, rhs_t) -> None:
    gemm, compiler = fake
    b = GraphBuilder(f"rm_{lhs_t}_{rhs_t}")
    M, N, K = b.symbol("M"), b.symbol("N"), b.symbol("K")
    x = b.input("x", "f32", [K, M] if lhs_t else [M, K])
    w = b.input("w", "f32", [N, K] if rhs_t else [K, N])
    y = b.dot_general(x, w, lhs_batch=[], rhs_batch=[], lhs_contract=[0 if lhs_t else 1],
                      rhs_contract=[1 if rhs_t else 0])
    g = b.build(b.tanh(y))
    # small (one thread), split by rows (M >= N), split by columns, empty and unit sizes
    for m, n, k in [(3, 5, 7), (200, 40, 64), (40, 200, 64), (0, 4, 3), (1, 1, 1), (5, 3, 0)]:
        before = len(gemm.calls)
        xs = RNG.standard_normal((k, m) if lhs_t else (m, k)).astype(np.float32)
        ws = RNG.standard_normal((n, k) if rhs_t else (k, n)).astype(np.float32)
        _run(compiler, g, [xs, ws])
        made = gemm.calls[before:]
        if m and n and k:
            assert made, "an f32 GEMM did not reach the row-major GEMM"
            assert {c[:2] for c in made} == {("T" if lhs_t else "N", "T" if rhs_t else "N")}
            assert sum(c[2] * c[3] for c in made) == m * n  # the blocks tile C exactly
        else:
            assert not made  # empty products are handled by the module (zeros or nothing)


def test_batched_gemm_offsets_every_batch(fake) -> None:
    gemm, compiler = fake
    b = GraphBuilder("rm_bmm")
    B, M, N, K = (b.symbol(n) for n in "BMNK")
    q, k = b.input("q", "f32", [B, M, K]), b.input("k", "f32", [B, N, K])
    g = b.build(b.dot_general(q, k, lhs_batch=[0], rhs_batch=[0], lhs_contract=[2],
                              rhs_contract=[2]))
    for bb, m, n, kk in [(3, 4, 5, 6), (1, 1, 1, 1), (5, 33, 17, 9)]:
        before = len(gemm.calls)
        _run(compiler, g, [RNG.standard_normal((bb, m, kk)).astype(np.float32),
                           RNG.standard_normal((bb, n, kk)).astype(np.float32)])
        assert len(gemm.calls) - before == bb  # one call per batch, each at its own offset


def test_f64_gemms_keep_the_fortran_blas(fake) -> None:
    gemm, compiler = fake
    b = GraphBuilder("rm_f64")
    M, K = b.symbol("M"), b.symbol("K")
    x, w = b.input("x", "f64", [M, K]), b.input("w", "f64", [K, 6])
    g = b.build(b.dot_general(x, w, lhs_batch=[], rhs_batch=[], lhs_contract=[1],
                              rhs_contract=[0]))
    _run(compiler, g, [RNG.standard_normal((9, 4)), RNG.standard_normal((4, 6))])
    assert gemm.calls == []


def _dot(b, x, w, lhs_t, rhs_t, batch=0):
    nb = list(range(batch))
    return b.dot_general(x, w, lhs_batch=nb, rhs_batch=nb,
                         lhs_contract=[batch if lhs_t else batch + 1],
                         rhs_contract=[batch + 1 if rhs_t else batch])


# (lhs transposed, rhs transposed, M, N, K, epilogue, batch): products whose transposed A
# (rows M apart) or plain B (rows N apart) lies a multiple of 1 KB apart, across the
# helper's splits (rows, columns, a long K split over the team, batches, row blocks with an
# epilogue), and some that must stay unpadded
PAD_CASES = [
    (True, False, 256, 40, 64, False, 0),     # weight gradient, C split by rows: A padded
    (True, False, 256, 512, 48, False, 0),    # C split by columns: A and B padded
    (True, False, 256, 32, 2100, False, 0),   # long K split over the team: A padded
    (False, False, 96, 256, 64, True, 0),     # a layer with an epilogue (row blocks): B
    (False, False, 300, 256, 40, False, 0),   # C split by rows (M >= N): B padded
    (False, False, 64, 512, 40, False, 0),    # split by columns after a plain A: B
    (True, True, 512, 64, 40, False, 0),      # transposed A and B: A padded
    (True, False, 256, 64, 24, False, 3),     # batched (one call per batch): A and B
    (True, False, 200, 64, 40, False, 0),     # rows 800 bytes apart: unpadded
    (False, False, 20, 256, 64, True, 0),     # B read by fewer than 32 rows: unpadded
]


@pytest.mark.parametrize("lhs_t, rhs_t, m, n, k, epilogue, batch", PAD_CASES)
def test_operands_with_aliasing_rows_are_padded(fake, lhs_t, rhs_t, m, n, k, epilogue,
                                                 batch) -> None:
    """oneDNN's sgemm packs a transposed A or a plain B slowly when its rows lie a multiple
    of 1 KB apart (csrc/gemm.c); the module copies such an operand with its rows 64 bytes
    further apart. Every split must read the copy at its own offsets and still tile C."""
    gemm, compiler = fake
    b = GraphBuilder(f"rm_pad_{lhs_t}_{rhs_t}_{epilogue}_{batch}")
    M, N, K = b.symbol("M"), b.symbol("N"), b.symbol("K")
    lead = [b.symbol("B")] if batch else []
    x = b.input("x", "f32", [*lead, K, M] if lhs_t else [*lead, M, K])
    w = b.input("w", "f32", [*lead, N, K] if rhs_t else [*lead, K, N])
    y = _dot(b, x, w, lhs_t, rhs_t, len(lead))
    g = b.build(b.tanh(y) if epilogue else y)
    shape_x = (k, m) if lhs_t else (m, k)
    shape_w = (n, k) if rhs_t else (k, n)
    lead_dims = (batch,) if batch else ()
    xs = RNG.standard_normal(lead_dims + shape_x).astype(np.float32)
    ws = RNG.standard_normal(lead_dims + shape_w).astype(np.float32)
    before = len(gemm.calls)
    _run(compiler, g, [xs, ws])
    calls, leading = gemm.calls[before:], gemm.leading[before:]
    # the calls cover the product exactly (a split K tiles C once per member's K slice)
    assert calls and sum(c[2] * c[3] * c[4] for c in calls) == m * n * k * max(batch, 1)
    aliasing_a = lhs_t and m % 256 == 0 and n >= 32
    aliasing_b = not rhs_t and n % 256 == 0 and m >= 32
    natural_a, natural_b = (m if lhs_t else k), (k if rhs_t else n)
    assert {lda for lda, _ in leading} == {natural_a + 16 if aliasing_a else natural_a}
    assert {ldb for _, ldb in leading} == {natural_b + 16 if aliasing_b else natural_b}


@pytest.mark.parametrize("heads, width, causal", [(4, 64, True), (4, 64, False),
                                                  (1, 256, False), (3, 16, True)])
def test_attention_stages_head_blocks_whose_rows_alias(fake, heads, width, causal) -> None:
    """Fused attention on [B, S, H, D] tensors multiplies blocks whose rows lie H * D apart;
    on the row-major (oneDNN) GEMM it stages V, K, Q and dO blocks with unaliased rows
    (csrc/attention.c) when H * D is a multiple of 256, and must still match the reference
    forward and backward (several key and query blocks, causal bands, a ragged tail)."""
    gemm, compiler = fake
    b = GraphBuilder(f"rm_attn_{heads}_{width}_{causal}")
    shape = ["B", "S", heads, width]  # sequence-major: rows of one head lie H * D apart
    q, k, v, do = (b.input(n, "f32", shape) for n in ("q", "k", "v", "do"))
    attrs = {"causal": causal, "scale": 0.125}
    out, lse = b.op("attention", q, k, v, seq_major=(0, 1, 2, 3), **attrs)
    grads = b.op("attention_grad", q, k, v, out, do, lse, seq_major=tuple(range(8)), **attrs)
    g = b.build(out, lse, *grads)
    exe = compiler.compile(g)
    assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
    aliasing = heads * width % 256 == 0
    staged = width + 16 if width % 256 == 0 else width
    for batch, seq in [(2, 150), (1, 37), (1, 300)]:
        inputs = [RNG.standard_normal((batch, seq, heads, width)).astype(np.float32)
                  for _ in range(4)]
        before = len(gemm.calls)
        got = exe.run(inputs)
        for n, (a, w) in enumerate(zip(got, interpret(g, inputs))):
            scale = max(1.0, float(np.abs(w).max()))
            np.testing.assert_allclose(a, w, rtol=2e-5, atol=2e-5 * scale,
                                       err_msg=f"output {n} at {(batch, seq)}")
        # products of a plain B operand (no transposed B) read a staged copy exactly when
        # the heads' rows alias; the others read the tensors in place
        plain_b = {ldb for c, (_, ldb) in zip(gemm.calls[before:], gemm.leading[before:])
                   if c[1] == "N"}
        assert plain_b == ({staged} if aliasing else {heads * width})
