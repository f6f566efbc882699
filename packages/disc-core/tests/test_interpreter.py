"""The reference interpreter: numerics, symbol binding, and clear errors on bad inputs."""

import numpy as np
import pytest
from graph_strategies import SYMBOLS, random_graphs, random_inputs
from hypothesis import given, settings
from hypothesis import strategies as st

from disc_core.builder import GraphBuilder
from disc_core.interpreter import InputMismatchError, interpret
from disc_core.opdef import InterpretError
from disc_core.symbolic import floordiv


def layernorm_graph(hidden: int = 8, eps: float = 1e-5):
    b = GraphBuilder("layernorm")
    B, S = b.symbol("B"), b.symbol("S")
    x = b.input("x", "f32", [B, S, hidden])
    gamma = b.input("gamma", "f32", [hidden])
    beta = b.input("beta", "f32", [hidden])
    n = b.constant(np.float32(hidden))
    mean = b.div(b.reduce(x, kind="sum", axes=[2]),
                 b.broadcast_in_dim(n, shape=[B, S], broadcast_dimensions=[]))
    xc = b.sub(x, b.broadcast_in_dim(mean, shape=[B, S, hidden], broadcast_dimensions=[0, 1]))
    var = b.div(b.reduce(b.mul(xc, xc), kind="sum", axes=[2]),
                b.broadcast_in_dim(n, shape=[B, S], broadcast_dimensions=[]))
    eps_c = b.broadcast_in_dim(b.constant(np.float32(eps)), shape=[B, S],
                               broadcast_dimensions=[])
    rstd = b.rsqrt(b.add(var, eps_c))
    y = b.mul(xc, b.broadcast_in_dim(rstd, shape=[B, S, hidden], broadcast_dimensions=[0, 1]))
    y = b.add(b.mul(y, b.broadcast_in_dim(gamma, shape=[B, S, hidden], broadcast_dimensions=[2])),
              b.broadcast_in_dim(beta, shape=[B, S, hidden], broadcast_dimensions=[2]))
    return b.build(y)


def numpy_layernorm(x, g, b, eps=1e-5):
    x64 = x.astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    var = ((x64 - mu) ** 2).mean(-1, keepdims=True)
    return (x64 - mu) / np.sqrt(var + eps) * g + b


@pytest.mark.parametrize("shape", [(2, 3), (1, 1), (0, 5), (3, 0), (4, 17)])
def test_layernorm_matches_numpy(shape) -> None:
    g = layernorm_graph()
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape + (8,)).astype(np.float32)
    gamma, beta = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(
        np.float32)
    (y,) = interpret(g, [x, gamma, beta])
    assert y.shape == x.shape and y.dtype == np.float32
    np.testing.assert_allclose(y, numpy_layernorm(x, gamma, beta), rtol=1e-5, atol=1e-5)


def test_input_errors_name_what_was_expected() -> None:
    g = layernorm_graph()
    x = np.zeros((2, 3, 8), np.float32)
    v = np.zeros(8, np.float32)
    with pytest.raises(InputMismatchError, match=r"expected 3 inputs \(x, gamma, beta\), got 2"):
        interpret(g, [x, v])
    with pytest.raises(InputMismatchError, match="input #0 'x': expected dtype f32"):
        interpret(g, [x.astype(np.float64), v, v])
    with pytest.raises(InputMismatchError, match=r"input #0 'x': expected rank 3"):
        interpret(g, [x[0], v, v])
    with pytest.raises(InputMismatchError, match="input #1 'gamma': dim 0 must be 8, got 4"):
        interpret(g, [x, v[:4], v])


def test_inputs_that_must_share_a_dim() -> None:
    b = GraphBuilder("pair")
    B = b.symbol("B")
    x, y = b.input("x", "f32", [B, 4]), b.input("y", "f32", [B, 4])
    g = b.build(b.add(x, y))
    with pytest.raises(InputMismatchError,
                       match=r"input #1 'y': dim 0 is 3 but symbol B = 2 from input #0 'x'"):
        interpret(g, [np.zeros((2, 4), np.float32), np.zeros((3, 4), np.float32)])


def test_implied_equality_violated_at_run_time() -> None:
    b = GraphBuilder("implied")
    x, y = b.input("x", "f32", ["S"]), b.input("y", "f32", ["T"])
    g = b.build(b.add(x, y))
    with pytest.raises(InterpretError, match="add: operand shapes"):
        interpret(g, [np.zeros(3, np.float32), np.zeros(4, np.float32)])
    (z,) = interpret(g, [np.ones(3, np.float32), np.ones(3, np.float32)])
    np.testing.assert_array_equal(z, 2 * np.ones(3))


def test_symbol_hints_checked() -> None:
    b = GraphBuilder("hints")
    s = b.symbol("S", min=2, max=10, multiple_of=2)
    g = b.build(b.neg(b.input("x", "f32", [s])))
    interpret(g, [np.zeros(4, np.float32)])
    for n, why in [(1, "below its declared minimum 2"), (12, "above its declared maximum"),
                   (5, "not a multiple of 2")]:
        with pytest.raises(InputMismatchError, match=why):
            interpret(g, [np.zeros(n, np.float32)])


def test_expression_dims_in_inputs_bind_and_check() -> None:
    b = GraphBuilder("expr")
    s = b.symbol("S")
    x = b.input("x", "f32", [2 * s + 1])
    g = b.build(b.neg(x))
    (y,) = interpret(g, [np.ones(7, np.float32)])
    assert y.shape == (7,)
    with pytest.raises(InputMismatchError, match="cannot determine the symbols"):
        interpret(g, [np.ones(8, np.float32)])


def test_a_zero_divisor_only_matters_in_a_non_empty_tensor() -> None:
    """``floordiv(s0*s1, 2*s0)`` with s0 = 0: the reshape result [0, *] is empty, so the
    dim's value does not matter (the division counts as 0); reducing over the empty dim
    leaves a tensor whose only dim divides by zero, which no input can make meaningful."""
    b = GraphBuilder("divzero")
    s0, s1 = b.symbol("s0"), b.symbol("s1")
    x = b.input("x", "f32", [s0, s1])
    r = b.reshape(x, shape=[2 * s0, floordiv(s0 * s1, 2 * s0)])
    g = b.build(b.exp(r))
    assert [y.shape for y in interpret(g, [np.ones((3, 4), np.float32)])] == [(6, 2)]
    assert [y.shape for y in interpret(g, [np.ones((0, 4), np.float32)])] == [(0, 0)]
    b2 = GraphBuilder("divzero_reduced")
    x = b2.input("x", "f32", [s0, s1])
    r = b2.reshape(x, shape=[2 * s0, floordiv(s0 * s1, 2 * s0)])
    g2 = b2.build(b2.reduce(r, kind="sum", axes=[0]))
    np.testing.assert_array_equal(interpret(g2, [np.ones((1, 4), np.float32)])[0], [2, 2])
    with pytest.raises(InterpretError, match=r"op #1 \(reduce\): result dim 0 of "
                       r"\[floordiv\(s0\*s1, 2\*s0\)\] is floordiv\(s0\*s1, 2\*s0\), which "
                       r"divides by zero \(2\*s0 = 0; s0 = 0\) while no other dim is 0; "
                       r"expected 2\*s0 != 0"):
        interpret(g2, [np.ones((0, 4), np.float32)])


def test_input_dim_with_a_zero_divisor() -> None:
    b = GraphBuilder("divzero_input")
    s0, s1, s2 = b.symbol("s0"), b.symbol("s1"), b.symbol("s2")
    x = b.input("x", "f32", [s0, s1])
    y = b.input("y", "f32", [floordiv(s1, s0), s2])
    g = b.build(b.neg(x), b.neg(y))
    x0 = np.ones((0, 4), np.float32)
    assert interpret(g, [x0, np.ones((0, 0), np.float32)])[1].shape == (0, 0)
    with pytest.raises(InputMismatchError, match=r"input #1 'y': dim 0 is 7 but "
                       r"floordiv\(s1, s0\) = 0"):
        interpret(g, [x0, np.ones((7, 0), np.float32)])
    with pytest.raises(InputMismatchError, match=r"input #1 'y': dim 0 is 0 but "
                       r"floordiv\(s1, s0\) divides by zero \(s0 = 0\) and the input is not "
                       r"empty \(shape \(0, 3\)\); expected s0 != 0"):
        interpret(g, [x0, np.ones((0, 3), np.float32)])


@settings(max_examples=100, deadline=None)
@given(random_graphs(), st.lists(st.tuples(*[st.sampled_from([0, 1, 2, 5])] * len(SYMBOLS)),
                                 min_size=3, max_size=3))
def test_symbolic_shapes_agree_with_concrete_results(graph, instantiations) -> None:
    """The symbolic shape rule of every op agrees with the interpreter's actual shapes."""
    rng = np.random.default_rng(0)
    for values in instantiations:
        env = dict(zip(SYMBOLS, values))
        outs = interpret(graph, random_inputs(graph, env, rng))
        for v, out in zip(graph.outputs, outs):
            assert out.shape == tuple(d.evaluate(env) for d in v.shape)
            assert out.dtype == v.dtype.np
