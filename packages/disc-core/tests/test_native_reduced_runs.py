"""Reductions over adjacent axes (a BN gradient's sums over N, H, W of NCHW; a global
average pool's over H, W) run as one reduction over the merged axis
(``lower.collapse_reduced_runs``): rows of H*W instead of rows of W and a strided pass
over H. Results agree with the reference interpreter on shapes the compilation never saw,
edge sizes included; producers that are not in memory anyway keep the split form."""

from __future__ import annotations

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, interpret
from disc_core.pipeline import lower, optimize
from disc_runtime import CompileCache

RNG = np.random.default_rng(3)
#: (N, H, W): odd, one, empty, rows of a vector multiple, a large map
SHAPES = [(2, 7, 9), (1, 1, 1), (0, 4, 4), (3, 16, 16), (2, 1, 13), (1, 56, 56)]


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    return Compiler(CompileCache(tmp_path_factory.mktemp("cache")), target="native")


def batch_norm_backward(dtype: str = "f32", channels: int = 5):
    """dx, sum(dy) and sum(dy * xhat) of NCHW batch norm, xhat rebuilt from x."""
    b = GraphBuilder("bn_backward")
    N, H, W = b.symbol("N"), b.symbol("H"), b.symbol("W")
    shape = [N, channels, H, W]
    x, dy = b.input("x", dtype, shape), b.input("dy", dtype, shape)
    mean, inv = b.input("mean", dtype, [channels]), b.input("inv", dtype, [channels])

    def per_channel(v):
        return b.op("broadcast_in_dim", v, shape=shape, broadcast_dimensions=[1])

    xhat = b.mul(b.sub(x, per_channel(mean)), per_channel(inv))
    s1 = b.reduce(dy, kind="sum", axes=[0, 2, 3])
    s2 = b.reduce(b.mul(dy, xhat), kind="sum", axes=[0, 2, 3])
    dx = b.sub(dy, b.mul(xhat, per_channel(s2)))
    return b.build(dx, s1, s2)


def global_pools():
    """mean and max over H, W of NCHW, after a ReLU."""
    b = GraphBuilder("pool")
    N, H, W = b.symbol("N"), b.symbol("H"), b.symbol("W")
    x = b.input("x", "f32", [N, 4, H, W])
    r = b.op("max", x, b.full(0.0, "f32", [N, 4, H, W]))
    return b.build(b.reduce(r, kind="sum", axes=[2, 3]), b.reduce(r, kind="max", axes=[2, 3]))


def _reduce_ranks(graph) -> list[tuple[int, list[int]]]:
    optimize(graph)
    lower(graph)
    return [(op.operands[0].rank, list(op.attrs["axes"])) for op in graph.ops
            if op.name == "reduce"]


def _check(compiler, graph, inputs_for, dtype=np.float32, rtol=1e-5):
    exe = compiler.compile(graph)
    assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
    for shape in SHAPES:
        inputs = inputs_for(shape)
        got, want = exe.run(inputs), interpret(graph, inputs)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * max(1, w.size ** 0.5))


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_batch_norm_backward_sums_rows_of_h_times_w(compiler, dtype) -> None:
    npdt = np.dtype(np.float32 if dtype == "f32" else np.float64)
    # lowered: each sum is a row reduction over [N, C, H*W], then a column one over N
    assert _reduce_ranks(batch_norm_backward(dtype)) == [(3, [2]), (2, [0])] * 2

    def inputs(shape):
        n, h, w = shape
        return [RNG.standard_normal((n, 5, h, w)).astype(npdt),
                RNG.standard_normal((n, 5, h, w)).astype(npdt),
                RNG.standard_normal(5).astype(npdt), RNG.uniform(0.5, 2, 5).astype(npdt)]

    _check(compiler, batch_norm_backward(dtype), inputs, rtol=1e-5 if dtype == "f32" else 1e-12)


def test_global_pools_are_one_row_reduction_each(compiler) -> None:
    assert _reduce_ranks(global_pools()) == [(3, [2]), (3, [2])]
    _check(compiler, global_pools(),
           lambda s: [RNG.standard_normal((s[0], 4, s[1], s[2])).astype(np.float32)])


def test_a_transposed_operand_keeps_the_split_form(compiler) -> None:
    """Merging H and W of a transposed value would write the transpose out first: the
    reduction stays split and the transpose fused."""
    b = GraphBuilder("nhwc_pool")
    N, H, W = b.symbol("N"), b.symbol("H"), b.symbol("W")
    x = b.input("x", "f32", [N, H, W, 4])
    t = b.op("transpose", b.op("exp", x), permutation=[0, 3, 1, 2])
    g = b.build(b.reduce(t, kind="sum", axes=[2, 3]))
    assert _reduce_ranks(g) == [(4, [3]), (3, [2])]
    b = GraphBuilder("nhwc_pool")
    N, H, W = b.symbol("N"), b.symbol("H"), b.symbol("W")
    x = b.input("x", "f32", [N, H, W, 4])
    t = b.op("transpose", b.op("exp", x), permutation=[0, 3, 1, 2])
    _check(compiler, b.build(b.reduce(t, kind="sum", axes=[2, 3])),
           lambda s: [RNG.standard_normal((s[0], s[1], s[2], 4)).astype(np.float32)])


def test_a_broadcast_over_part_of_the_run_keeps_the_split_form() -> None:
    """A per-row bias [N, C, H] broadcast along W: its H cannot merge with a W it lacks."""
    b = GraphBuilder("partial")
    N, H, W = b.symbol("N"), b.symbol("H"), b.symbol("W")
    x = b.input("x", "f32", [N, 3, H, W])
    bias = b.input("bias", "f32", [N, 3, H])
    y = b.add(x, b.op("broadcast_in_dim", bias, shape=[N, 3, H, W],
                      broadcast_dimensions=[0, 1, 2]))
    g = b.build(b.reduce(y, kind="sum", axes=[2, 3]))
    assert _reduce_ranks(g) == [(4, [3]), (3, [2])]
