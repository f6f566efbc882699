"""Matrix products, reductions, softmax, normalizations, losses and dropout, forward and
gradient ops, against Paddle.

Each test builds one static program (dynamic dims), compiles it once with native code and
runs it on several input sets whose sizes the compilation never saw (1, odd, larger, 0
where Paddle takes it). Gradient ops are emitted directly (``paddle._C_ops.<op>_grad``)
with the output gradient as a program input.
"""

from __future__ import annotations

import numpy as np
import paddle
import pytest
from op_parity import check_ops, rand

from disc_paddle import partition

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

C = paddle._C_ops
F = paddle.nn.functional
FLOATS = ["float32", "float64"]


# -- matmul ------------------------------------------------------------------------------

# (x spec, y spec, tx, ty, shape sets): batch dims broadcast, 1-D operands, transposes
MATMUL_CASES = [
    # the GPT projection: [B, S, H] x [H, N]
    ([-1, -1, 8], [8, 6], False, False, [((2, 3, 8), (8, 6)), ((1, 1, 8), (8, 6)),
                                         ((3, 5, 8), (8, 6)), ((0, 4, 8), (8, 6))]),
    # attention scores: [B, h, S, d] x [B, h, d, S]
    ([-1, 2, -1, 4], [-1, 2, 4, -1], False, False,
     [((2, 2, 3, 4), (2, 2, 4, 3)), ((1, 2, 1, 4), (1, 2, 4, 1)),
      ((3, 2, 5, 4), (3, 2, 4, 5))]),
    # q k^T through transpose_y, a broadcast (static 1) batch dim on y
    ([-1, 3, -1, 4], [1, 3, -1, 4], False, True,
     [((2, 3, 5, 4), (1, 3, 5, 4)), ((1, 3, 1, 4), (1, 3, 1, 4)),
      ((4, 3, 2, 4), (1, 3, 2, 4))]),
    # transposed x, 2-D x against batched y
    ([5, -1], [-1, 5, 3], True, False, [((5, 2), (4, 5, 3)), ((5, 1), (1, 5, 3)),
                                       ((5, 7), (2, 5, 3))]),
    # 1-D x (its gradient summed over y's batch) and 1-D y
    ([-1], [-1, -1, 4], False, False, [((3,), (2, 3, 4)), ((1,), (1, 1, 4)),
                                      ((6,), (3, 6, 4))]),
    ([-1, -1], [-1], False, True, [((2, 3), (3,)), ((1, 1), (1,)), ((5, 7), (7,))]),
    ([-1], [-1], False, False, [((3,), (3,)), ((1,), (1,)), ((9,), (9,))]),
    # equal ranks, each operand broadcast along a batch dim the other has (static 1s)
    ([-1, 1, -1, 3], [1, 3, 3, 4], False, False, [((2, 1, 5, 3), (1, 3, 3, 4)),
                                                  ((1, 1, 1, 3), (1, 3, 3, 4)),
                                                  ((4, 1, 2, 3), (1, 3, 3, 4))]),
]


def _matmul_shape(a, b, tx, ty):
    """numpy's result shape of Paddle's matmul (flags transpose operands of rank >= 2)."""
    x, y = np.zeros(a), np.zeros(b)
    x = np.swapaxes(x, -1, -2) if tx and x.ndim > 1 else x
    y = np.swapaxes(y, -1, -2) if ty and y.ndim > 1 else y
    return np.matmul(x, y).shape


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", range(len(MATMUL_CASES)))
def test_matmul_and_grad(case, dtype):
    xs, ys, tx, ty, shapes = MATMUL_CASES[case]

    def build(x, y, g):
        out = C.matmul(x, y, tx, ty)
        return [out] + list(C.matmul_grad(x, y, g, tx, ty))

    sets = [[rand(a, dtype, i), rand(b, dtype, i + 10),
             rand(_matmul_shape(a, b, tx, ty), dtype, i + 20)]
            for i, (a, b) in enumerate(shapes)]
    nout = len(_matmul_shape(shapes[0][0], shapes[0][1], tx, ty))
    check_ops(build, [(xs, dtype), (ys, dtype), ([-1] * nout, dtype)], sets,
              required=["pd_op.matmul", "pd_op.matmul_grad"])


@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_1d_transpose_ignored(dtype):
    """A transpose flag on a 1-D operand is ignored by the forward op (Paddle's
    matmul_grad rejects that combination, so only the forward is compared)."""
    def build(x, y, z):
        return [C.matmul(x, y, True, False), C.matmul(z, x, False, True)]

    sets = [[rand([k], dtype, k), rand([k, 3], dtype, k + 1), rand([3, k], dtype, k + 2)]
            for k in (4, 1, 7)]
    check_ops(build, [([-1], dtype), ([-1, 3], dtype), ([3, -1], dtype)], sets)


@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_different_batch_ranks(dtype):
    """[S, 3] and [B, S, 3] against [2, B, 3, 4]: leading batch dims broadcast (Paddle's
    matmul_grad fails on operands of different ranks, so only the forward is compared)."""
    def build(x, y, z):
        return [C.matmul(x, z, False, False), C.matmul(y, z, False, False)]

    sets = [[rand([s, 3], dtype, s), rand([b, s, 3], dtype, b), rand([2, b, 3, 4], dtype)]
            for b, s in ((3, 5), (1, 1), (2, 7))]
    check_ops(build, [([-1, 3], dtype), ([-1, -1, 3], dtype), ([2, -1, 3, 4], dtype)], sets)


@pytest.mark.parametrize("dtype", FLOATS)
def test_gpt_projection_is_one_gemm(dtype):
    """[B, S, H] x [H, N] and its gradients: three dot_generals, the weight never
    broadcast over the batch (the weight gradient contracts B and S in its GEMM)."""
    def build(x, w):
        out = C.matmul(x, w, False, False)
        g = C.add(out, out)  # an output gradient of out's (symbolic) shape
        return [out] + list(C.matmul_grad(x, w, g, False, False))

    sets = [[rand([b, s, 16], dtype, b), rand([16, 8], dtype)]
            for b, s in ((2, 3), (1, 1), (3, 9), (0, 2))]
    low = check_ops(build, [([-1, -1, 16], dtype), ([16, 8], dtype)], sets)
    names = [op.name for op in low.graph.ops]
    assert names.count("dot_general") == 3, names
    assert "broadcast_in_dim" not in names and "reduce" not in names, names


@pytest.mark.parametrize("dtype", FLOATS)
def test_bmm_and_grad(dtype):
    def build(x, y, g):
        return [C.bmm(x, y)] + list(C.bmm_grad(x, y, g))

    sets = [[rand([b, m, 4], dtype, b), rand([b, 4, n], dtype, m), rand([b, m, n], dtype, n)]
            for b, m, n in ((2, 3, 5), (1, 1, 1), (4, 7, 2), (0, 3, 2))]
    check_ops(build, [([-1, -1, 4], dtype), ([-1, 4, -1], dtype), ([-1, -1, -1], dtype)],
              sets, required=["pd_op.bmm", "pd_op.bmm_grad"])


@pytest.mark.parametrize("dtype", FLOATS + ["int32", "int64"])
def test_add_n(dtype):
    def build(x, y, z):
        return [paddle.add_n([x, y, z]), paddle.add_n([x])]

    sets = [[rand([n, 3], dtype, n + i) for i in range(3)] for n in (2, 1, 5, 0)]
    check_ops(build, [([-1, 3], dtype)] * 3, sets, required=["pd_op.add_n"])


def test_matmul_refusals():
    """An integer matmul stays in Paddle, with the reason (the GEMM library takes floats)."""
    paddle.enable_static()
    try:
        main = paddle.static.Program()
        with paddle.static.program_guard(main):
            x = paddle.static.data("x", [-1, 4], "int32")
            y = paddle.static.data("y", [4, 3], "int32")
            out = C.matmul(x, y, False, False)
        analysis = partition.analyze(main, min_cluster_size=1, outputs=[out])
        (node,) = [n for n in analysis.nodes if n.name == "pd_op.matmul"]
        verdict = analysis.verdicts[node]
        assert not verdict.supported and "int32" in verdict.reason, verdict
    finally:
        paddle.disable_static()
