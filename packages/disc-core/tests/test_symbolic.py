"""Symbolic dims: canonical forms, simplification, evaluation and the text form."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disc_core.symbolic import (
    DimDivisionError,
    Expr,
    ExprParseError,
    UnboundSymbolError,
    ceildiv,
    evaluate_shape,
    floordiv,
    mod,
    parse_expr,
    product,
    smax,
    smin,
    solve_linear,
)

B, S, H = Expr.sym("B"), Expr.sym("S"), Expr.sym("H")


@pytest.mark.parametrize("expr, text", [
    (S * 1, "S"),
    (S + 0, "S"),
    ((B * S) // S, "B"),
    (floordiv(B * S * 4, 2 * S), "2*B"),
    (floordiv(2 * S + 3, 2), "S + 1"),
    (ceildiv(2 * S + 3, 2), "S + 2"),
    (ceildiv(8 * S, 8), "S"),
    (mod(4 * S + 6, 4), "2"),
    (mod(B * S, S), "0"),
    (smin(S, S + 1), "S"),
    (smax(S, S + 1), "S + 1"),
    (smax(B, smax(S, 3)), "max(3, B, S)"),
    (S - S, "0"),
    ((B + 1) * (B - 1), "B*B - 1"),
    (S * B, "B*S"),
    (-S + 2, "-S + 2"),
    (floordiv(S, 2), "floordiv(S, 2)"),
    # nested roundings by constants flatten: strided layers in a chain
    (floordiv(floordiv(S + 3, 4) + 1, 2), "floordiv(S + 7, 8)"),
    (floordiv(floordiv(floordiv(S + 1, 2) + 1, 2) + 1, 2), "floordiv(S + 7, 8)"),
    (ceildiv(ceildiv(S, 2) + B, 3), "ceildiv(2*B + S, 6)"),
    (floordiv(ceildiv(S, 2), 2), "floordiv(ceildiv(S, 2), 2)"),
    (floordiv(2 * floordiv(S, 2), 4), "floordiv(2*floordiv(S, 2), 4)"),
    (floordiv(floordiv(S, B), 2), "floordiv(floordiv(S, B), 2)"),
])
def test_canonical_forms(expr: Expr, text: str) -> None:
    assert str(expr) == text
    assert parse_expr(text) == expr


def test_structural_equality_and_hash() -> None:
    assert B * S == S * B
    assert hash(B * S + 1) == hash(1 + S * B)
    assert Expr.const(3) == 3
    assert (B * S).free_symbols() == {"B", "S"}


def test_evaluate_and_errors() -> None:
    e = floordiv(B * S + 7, 8) + smin(B, 3)
    assert e.evaluate({"B": 2, "S": 5}) == 2 + 2
    with pytest.raises(UnboundSymbolError, match="'S' is not bound"):
        (B * S).evaluate({"B": 1})
    with pytest.raises(ZeroDivisionError):
        floordiv(B, S).evaluate({"B": 1, "S": 0})
    with pytest.raises(ZeroDivisionError):
        floordiv(B, 0)


def test_divisions_lists_the_divisors_that_may_be_zero() -> None:
    e = floordiv(B * S, 2 * B) + mod(H, 4) + smax(ceildiv(S, floordiv(H, B)), 1)
    assert sorted(str(f.divisor) for f in e.divisions()) == ["2*B", "B", "floordiv(H, B)"]
    assert (B * S + floordiv(S, 2)).divisions() == []


@pytest.mark.parametrize("dims, env, want", [
    # the divisor is 0, but another dim is 0: an empty tensor, the division counts as 0
    ([2 * B, floordiv(B * S, 2 * B)], {"B": 0, "S": 4}, (0, 0)),
    ([floordiv(S, B) + 3, H], {"B": 0, "S": 4, "H": 0}, (3, 0)),
    ([4 - ceildiv(S, B), 0], {"B": 0, "S": 4}, (4, 0)),
    ([0, 1 - 2 * mod(S, B) - H], {"B": 0, "S": 4, "H": 5}, (0, 0)),  # never negative
    # no zero divisor: plain evaluation
    ([2 * B, floordiv(B * S, 2 * B)], {"B": 3, "S": 4}, (6, 2)),
])
def test_evaluate_shape_allows_a_zero_divisor_only_in_an_empty_tensor(dims, env, want) -> None:
    assert evaluate_shape(dims, env) == want


def test_evaluate_shape_rejects_a_zero_divisor_in_a_non_empty_tensor() -> None:
    with pytest.raises(DimDivisionError, match=r"dim 1 of \[3, floordiv\(B\*S, 2\*B\)\] is "
                       r"floordiv\(B\*S, 2\*B\), which divides by zero \(2\*B = 0; B = 0\) "
                       r"while no other dim is 0; expected 2\*B != 0"):
        evaluate_shape([3, floordiv(B * S, 2 * B)], {"B": 0, "S": 4})
    with pytest.raises(DimDivisionError):  # the only dim: nothing else makes it empty
        evaluate_shape([mod(S, B)], {"B": 0, "S": 4})
    with pytest.raises(DimDivisionError):  # two undefined dims do not make each other empty
        evaluate_shape([floordiv(S, B), ceildiv(S, B)], {"B": 0, "S": 4})
    with pytest.raises(ZeroDivisionError):  # plain evaluation stays strict
        floordiv(B * S, 2 * B).evaluate({"B": 0, "S": 4})


def test_parse_errors() -> None:
    for bad in ["B +", "(B", "2 $ S", "floordiv(B)", ""]:
        with pytest.raises(ExprParseError):
            parse_expr(bad)
    with pytest.raises(ValueError, match="invalid symbol name"):
        Expr.sym("min")


def test_subs_and_product() -> None:
    assert (B * S + S).subs({"S": Expr.const(2)}) == 2 * B + 2
    assert floordiv(S, 2).subs({"S": 4 * H}) == 2 * H
    assert product([B, S, 4]) == 4 * B * S


def test_solve_linear() -> None:
    assert solve_linear(2 * S + 1, 9, {}) == ("S", 4)
    assert solve_linear(2 * S + 1, 8, {}) is None
    assert solve_linear(B * S, 8, {"B": 2}) == ("S", 4)
    assert solve_linear(B * S, 8, {}) is None


_atoms = st.sampled_from([B, S, H, Expr.const(1), Expr.const(2), Expr.const(7)])


@st.composite
def exprs(draw, depth=3):
    if depth == 0:
        return draw(_atoms)
    a, b = draw(exprs(depth=depth - 1)), draw(exprs(depth=depth - 1))
    op = draw(st.sampled_from(["+", "-", "*", "floordiv", "ceildiv", "mod", "min", "max"]))
    if op in ("floordiv", "ceildiv", "mod"):
        b = draw(st.sampled_from([Expr.const(2), Expr.const(3), S + 1, B + 2]))
    return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
            "floordiv": lambda: floordiv(a, b), "ceildiv": lambda: ceildiv(a, b),
            "mod": lambda: mod(a, b), "min": lambda: smin(a, b), "max": lambda: smax(a, b)}[op]()


@st.composite
def raw_and_expr(draw, depth=3):
    """An expression tree evaluated directly in Python alongside its canonical Expr."""
    if depth == 0:
        leaf = draw(st.sampled_from(["B", "S", "H", 1, 2, 7]))
        return (lambda env, v=leaf: env[v] if isinstance(v, str) else v), (
            Expr.sym(leaf) if isinstance(leaf, str) else Expr.const(leaf))
    fa, ea = draw(raw_and_expr(depth=depth - 1))
    fb, eb = draw(raw_and_expr(depth=depth - 1))
    op = draw(st.sampled_from(["+", "-", "*", "floordiv", "ceildiv", "mod", "min", "max"]))
    if op in ("floordiv", "ceildiv", "mod"):
        k = draw(st.sampled_from([2, 3, 8]))
        fb, eb = (lambda env, k=k: k), Expr.const(k)
    py = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
          "floordiv": lambda x, y: x // y, "ceildiv": lambda x, y: -(-x // y),
          "mod": lambda x, y: x % y, "min": min, "max": max}[op]
    ex = {"+": lambda: ea + eb, "-": lambda: ea - eb, "*": lambda: ea * eb,
          "floordiv": lambda: floordiv(ea, eb), "ceildiv": lambda: ceildiv(ea, eb),
          "mod": lambda: mod(ea, eb), "min": lambda: smin(ea, eb), "max": lambda: smax(ea, eb)}
    return (lambda env: py(fa(env), fb(env))), ex[op]()


@settings(max_examples=300, deadline=None)
@given(raw_and_expr(), st.integers(0, 50), st.integers(0, 50), st.integers(0, 50))
def test_simplification_preserves_value(pair, b, s, h) -> None:
    fn, e = pair
    env = {"B": b, "S": s, "H": h}
    assert e.evaluate(env) == fn(env)
    assert parse_expr(str(e)) == e


@settings(max_examples=200, deadline=None)
@given(exprs())
def test_print_parse_round_trip(e: Expr) -> None:
    assert parse_expr(str(e)) == e


@pytest.mark.parametrize("fn, py", [(floordiv, lambda x, y: x // y),
                                    (ceildiv, lambda x, y: -(-x // y))])
def test_flattened_nested_rounding_keeps_every_value(fn, py) -> None:
    """round((round(a/b) + r)/c) == round((a + b*r)/(b*c)) on negative values too."""
    for b in (1, 2, 3, 4):
        for c in (2, 3, 8):
            for r in (-5, 0, 1, 4):
                e = fn(fn(S + B, b) + r, c)
                for s in range(-20, 21):
                    for bv in (0, 3):
                        assert e.evaluate({"S": s, "B": bv}) == py(py(s + bv, b) + r, c), (e, s)
