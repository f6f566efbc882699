"""The shape-constraint analysis: equalities, products, divisibility and bounds."""

import numpy as np

from disc_core.builder import GraphBuilder
from disc_core.shape_constraints import ShapeConstraints
from disc_core.shape_facts import Divisible, Eq
from disc_core.symbolic import Expr

B, S, T, N = (Expr.sym(n) for n in "BSTN")


def test_elementwise_operands_imply_equal_dims() -> None:
    b = GraphBuilder("g")
    x, y = b.input("x", "f32", [B, S]), b.input("y", "f32", [B, T])
    g = b.build(b.add(x, y))
    sc = ShapeConstraints(g)
    assert sc.equal(S, T) and not sc.equal(B, S)
    assert sc.equal(B * T, S * B)
    assert sc.representative(T) == S  # the earlier symbol represents the class


def test_dot_contracting_and_concat_dims() -> None:
    b = GraphBuilder("g")
    x, w = b.input("x", "f32", [B, S]), b.input("w", "f32", [T, 4])
    d = b.dot_general(x, w, lhs_batch=[], rhs_batch=[], lhs_contract=[1], rhs_contract=[0])
    y = b.input("y", "f32", [N, 4])
    g = b.build(b.concatenate(d, y, dimension=0))
    sc = ShapeConstraints(g)
    assert sc.equal(S, T)
    assert not sc.equal(B, N)


def test_reshape_product_equality() -> None:
    b = GraphBuilder("g")
    x = b.input("x", "f32", [N])
    b.input("y", "f32", [B, S])  # binds B and S
    g = b.build(b.reshape(x, shape=[B, S]))
    sc = ShapeConstraints(g)
    assert sc.equal(N, B * S)
    assert sc.product_equal([N], [S, B])


def test_constants_win_and_contradictions_are_recorded() -> None:
    sc = ShapeConstraints(facts=[Eq(S, T), Eq(T, Expr.const(8))])
    assert sc.equal(S, 8) and sc.canonical(S) == 8
    sc2 = ShapeConstraints(facts=[Eq(S, Expr.const(3)), Eq(S, Expr.const(4))])
    assert sc2.contradictions


def test_divisibility_from_hints_and_facts() -> None:
    b = GraphBuilder("g")
    s = b.symbol("S", multiple_of=8)
    g = b.build(b.neg(b.input("x", "f32", [s, 4])))
    sc = ShapeConstraints(g)
    assert sc.divisible(S, 4) and sc.divisible(S, 8) and not sc.divisible(S, 16)
    assert sc.divisible(S * B + 16, 8)
    assert not sc.divisible(S + 1, 2)
    sc2 = ShapeConstraints(facts=[Divisible(B * T, 4), Eq(T, S)])
    assert sc2.divisible(B * S, 4)


def test_bounds_use_ranges() -> None:
    b = GraphBuilder("g")
    s = b.symbol("S", min=1, max=512)
    b.symbol("B", min=2, max=8)
    g = b.build(b.neg(b.input("x", "f32", [b.symbol("B"), s])))
    sc = ShapeConstraints(g)
    assert sc.bounds(B * S) == (2, 4096)
    assert sc.bounds(S - 1) == (0, 511)
    lo, hi = sc.bounds(T)
    assert lo == 0 and hi == float("inf")


def test_graph_without_facts_is_empty() -> None:
    b = GraphBuilder("g")
    g = b.build(b.exp(b.input("x", "f32", [B])))
    sc = ShapeConstraints(g)
    assert not sc.subst and not sc.contradictions
    assert np.isinf(sc.bounds(B)[1])
