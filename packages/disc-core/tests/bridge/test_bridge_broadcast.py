"""The bridges' one broadcasting rule (disc_core.bridge.broadcast)."""

from __future__ import annotations

import numpy as np
import pytest

from disc_core import GraphBuilder, interpret
from disc_core.bridge import ConversionError
from disc_core.bridge.broadcast import (
    BroadcastError,
    broadcast_all,
    broadcast_dim,
    broadcast_shape,
    broadcast_to,
)
from disc_core.opdef import InterpretError
from disc_core.symbolic import Expr

A, B = Expr.sym("a"), Expr.sym("b")


def test_equal_dims_stay_and_a_static_one_gives_way():
    assert broadcast_dim(A, A) == A
    assert broadcast_dim(1, A) == A and broadcast_dim(A, 1) == A
    assert broadcast_dim(3, 3) == Expr.const(3)
    assert broadcast_shape([A, 1], [4]) == (A, Expr.const(4))
    assert broadcast_shape([2, 1, B], [A, 1]) == (Expr.const(2), A, B)


def test_unequal_static_dims_are_an_error_naming_them():
    with pytest.raises(BroadcastError, match="dims 3 and 4 do not broadcast"):
        broadcast_dim(3, 4)
    with pytest.raises(BroadcastError, match=r"shapes \[a, 3\], \[4\] do not broadcast"):
        broadcast_shape([A, 3], [4])
    assert issubclass(BroadcastError, ConversionError)  # a bridge's node just falls back


def test_of_unequal_symbolic_dims_the_first_stands_for_both_and_static_wins():
    assert broadcast_dim(A, B) == A and broadcast_dim(B, A) == B
    assert broadcast_dim(A + 1, B) == B and broadcast_dim(B, A + 1) == B  # a symbol wins
    assert broadcast_dim(A + 1, 2 * B) == A + 1
    assert broadcast_dim(A, 5) == Expr.const(5) and broadcast_dim(5, A) == Expr.const(5)
    assert broadcast_dim(0, A) == Expr.const(0)


def _run(shape_x, target):
    b = GraphBuilder("bcast")
    v = b.input("x", "f32", shape_x)
    t = b.input("t", "f32", target)
    g = b.build(b.add(broadcast_to(b, v, target), t))
    return g, lambda xv, tv: interpret(g, [xv, tv])[0]


def test_broadcast_to_a_static_one_stretches_without_a_run_time_check():
    b = GraphBuilder("one")
    x = b.input("x", "f32", [1, "c"])
    broadcast_to(b, x, ["r", "c"])
    assert [op.name for op in b.graph.ops] == ["reshape", "broadcast_in_dim"]
    assert list(b.graph.ops[-1].attrs["broadcast_dimensions"]) == [1]


def test_broadcast_to_an_unequal_symbolic_dim_is_checked_at_run_time():
    g, run = _run(["a"], ["b"])
    ones = np.ones(4, np.float32)
    np.testing.assert_array_equal(run(np.arange(4, dtype=np.float32), ones),
                                  np.arange(4) + 1)  # a == b
    np.testing.assert_array_equal(run(np.full(1, 2, np.float32), ones),
                                  np.full(4, 3))  # a == 1 stretches
    with pytest.raises(InterpretError, match="cannot broadcast"):
        run(np.ones(3, np.float32), ones)  # neither: the module refuses, nothing assumed


def test_broadcast_to_rejects_static_mismatch_and_rank_growth():
    b = GraphBuilder("bad")
    x = b.input("x", "f32", [3, "n"])
    with pytest.raises(BroadcastError, match="cannot broadcast dim 3 to 4"):
        broadcast_to(b, x, [4, "n"])
    with pytest.raises(BroadcastError, match="rank 2 to rank 1"):
        broadcast_to(b, x, ["n"])
    assert broadcast_to(b, x, [3, "n"]) is x


def test_broadcast_all_of_two_symbolic_dims_runs_like_numpy():
    b = GraphBuilder("all")
    x = b.input("x", "f32", ["a", 1])
    y = b.input("y", "f32", ["b"])
    xs, ys = broadcast_all(b, x, y)
    assert xs.shape == ys.shape == (A, B)
    g = b.build(b.add(xs, ys))
    for xv, yv in [(np.ones((3, 1), np.float32), np.arange(5, dtype=np.float32)),
                   (np.ones((2, 1), np.float32), np.arange(1, dtype=np.float32))]:
        np.testing.assert_array_equal(interpret(g, [xv, yv])[0], xv + yv)


def test_broadcast_all_checks_the_kept_dim_at_run_time():
    b = GraphBuilder("first")
    x = b.input("x", "f32", ["a"])
    y = b.input("y", "f32", ["b"])
    xs, ys = broadcast_all(b, x, y)
    assert xs.shape == ys.shape == (A,) and xs is x
    g = b.build(b.add(xs, ys))
    for n, m in [(4, 4), (4, 1), (0, 1), (0, 0)]:
        xv, yv = np.arange(n, dtype=np.float32), np.arange(m, dtype=np.float32) * 10
        np.testing.assert_array_equal(interpret(g, [xv, yv])[0], xv + yv)
    for n, m in [(1, 4), (3, 4)]:  # the kept dim is the 1, or no broadcast: refused
        with pytest.raises(InterpretError, match="cannot broadcast"):
            interpret(g, [np.ones(n, np.float32), np.ones(m, np.float32)])


def test_a_lowering_context_broadcasts_by_the_rule_and_refuses_as_conversion_errors():
    from disc_core.bridge import LoweringContext

    ctx = LoweringContext("ctx")
    x = ctx.b.input("x", "f32", ["a", 3])
    y = ctx.b.input("y", "f32", ["b", 1])
    xs, ys = ctx.broadcast_all(x, y)
    assert xs.shape == ys.shape == (A, Expr.const(3))
    assert ctx.full(2.0, "f32", ["a"]).shape == (A,)
    with pytest.raises(ConversionError, match="cannot broadcast dim 3 to 4"):
        ctx.broadcast_to(x, ["a", 4])
    g = ctx.b.build(ctx.op("add", xs, ys))
    xv, yv = np.ones((2, 3), np.float32), np.arange(2, dtype=np.float32)[:, None]
    np.testing.assert_array_equal(interpret(g, [xv, yv])[0], xv + yv)


def test_a_dim_of_at_most_one_gives_way_to_a_symbolic_one():
    from disc_core.bridge.broadcast import at_most_one
    from disc_core.symbolic import smin

    one = smin(1, A)
    assert at_most_one(one) and at_most_one(Expr.const(0)) and not at_most_one(A)
    assert not at_most_one(smin(2, A)) and not at_most_one(2 * one)
    assert broadcast_dim(one, B) == B and broadcast_dim(B, one) == B
    assert broadcast_dim(one, 5) == Expr.const(5)
    assert broadcast_dim(one, smin(1, B)) == one
