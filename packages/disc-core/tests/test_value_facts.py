"""value_facts.at_most_zero: ``x - max(x)`` broadcast back proves an exp argument at most
zero (or NaN), and the native engine then emits the exp without its overflow clamp. The
negative cases are the near misses a wrong proof would accept."""

from __future__ import annotations

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, catalog, interpret
from disc_core.native.build import build_native
from disc_core.passes import default_pipeline
from disc_core.value_facts import at_most_zero
from disc_runtime import CompileCache


def shifted(kind: str = "max", *, other: bool = False, reversed_sub: bool = False,
            keepdim: bool = False, axis: int = 1, dims: list[int] | None = None):
    """(builder, x - reduce(kind, axis) broadcast back) over [R, H] (R, H symbolic)."""
    b = GraphBuilder("shift")
    R, H = b.symbol("R"), b.symbol("H")
    x = b.input("x", "f32", [R, H])
    y = b.input("y", "f32", [R, H])
    m = b.reduce(y if other else x, kind=kind, axes=[axis])
    kept = [R, H][1 - axis]
    if keepdim:  # torch's amax(keepdim=True): [R] -> [R, 1] -> [R, H]
        m = b.reshape(m, shape=[kept, 1] if axis == 1 else [1, kept])
        m = b.broadcast_in_dim(m, shape=[R, H], broadcast_dimensions=dims or [0, 1])
    else:
        m = b.broadcast_in_dim(m, shape=[R, H], broadcast_dimensions=dims or [1 - axis])
    return b, (b.sub(m, x) if reversed_sub else b.sub(x, m))


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_x_minus_its_max_is_at_most_zero(axis, keepdim) -> None:
    _, v = shifted(axis=axis, keepdim=keepdim)
    assert at_most_zero(v)


def test_softmax_and_attention_scores_exp_arguments() -> None:
    for g in (catalog.softmax(3), catalog.attention_scores()):
        exps = [op for op in g.ops if op.name == "exp"]
        assert exps and all(at_most_zero(op.operands[0]) for op in exps)


@pytest.mark.parametrize("case", [
    {"kind": "min"},                 # x - min(x) >= 0
    {"kind": "sum"},
    {"other": True},                 # x - max(y)
    {"reversed_sub": True},          # max(x) - x >= 0
])
def test_near_misses_are_not_at_most_zero(case) -> None:
    _, v = shifted(**case)
    assert not at_most_zero(v)


def test_a_maximum_broadcast_along_the_wrong_dim_is_not_at_most_zero() -> None:
    """max over H of a square [N, N] input broadcast along dim 0 instead of dim 1:
    m[i, j] = max_k x[j, k], unrelated to x[i, j]."""
    b = GraphBuilder("wrong")
    N = b.symbol("N")
    x = b.input("x", "f32", [N, N])
    m = b.broadcast_in_dim(b.reduce(x, kind="max", axes=[1]), shape=[N, N],
                           broadcast_dimensions=[1])
    assert not at_most_zero(b.sub(x, m))


def test_integer_differences_are_left_alone() -> None:
    b = GraphBuilder("ints")
    R, H = b.symbol("R"), b.symbol("H")
    x = b.input("x", "i32", [R, H])
    m = b.broadcast_in_dim(b.reduce(x, kind="max", axes=[1]), shape=[R, H],
                           broadcast_dimensions=[0])
    assert not at_most_zero(b.sub(x, m))


def test_the_native_softmax_uses_the_unclamped_exp_and_matches_on_extremes(tmp_path) -> None:
    """Rows with +-inf, NaN, huge magnitudes, results that underflow to subnormals and
    zero, and an all -inf row: the same as the reference interpreter."""
    g = catalog.softmax(2)
    default_pipeline().run(g)
    text = build_native(g).files["native/module.c"].decode()
    assert "disc_expf_nonpos(" in text.split("DISC_MATH float disc_expf_nonpos")[1]
    exe = Compiler(CompileCache(tmp_path / "c"), target="native").compile(catalog.softmax(2))
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((9, 300)) * 30).astype(np.float32)
    x[0, 5] = np.inf
    x[1, 7] = -np.inf
    x[2, 9] = np.nan
    x[3] *= 1e30
    x[4, :] = -np.inf
    x[5, :150] = -100.0  # exp(-100 - 0) is subnormal in float32
    x[5, 150:] = 0.0
    x[6, :] = np.linspace(-110, 0, 300)  # down through the flush-to-zero threshold
    (got,), (want,) = exe.run([x]), interpret(catalog.softmax(2), [x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=0, equal_nan=True)
