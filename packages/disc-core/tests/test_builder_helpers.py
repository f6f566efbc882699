"""GraphBuilder's framework conveniences: implicit broadcasting, casts, sizes as values."""

from __future__ import annotations

import numpy as np
import pytest

from disc_core import GraphBuilder, interpret
from disc_core.opdef import VerifyError


def test_broadcast_to_follows_numpy_rules():
    b = GraphBuilder("bcast")
    x = b.input("x", "f32", [1, "c"])
    y = b.input("y", "f32", ["r", "c"])
    g = b.build(b.add(b.broadcast_to(x, ["r", "c"]), y), b.full(2.5, "f32", ["r", "c"]))
    xv, yv = np.arange(3, dtype=np.float32)[None], np.ones((4, 3), np.float32)
    got = interpret(g, [xv, yv])
    np.testing.assert_array_equal(got[0], xv + yv)
    np.testing.assert_array_equal(got[1], np.full((4, 3), 2.5, np.float32))


def test_broadcast_to_refuses_dims_it_cannot_prove():
    b = GraphBuilder("bad")
    x = b.input("x", "f32", ["a"])
    with pytest.raises(VerifyError, match="cannot broadcast dim a to b"):
        b.broadcast_to(x, ["b"])
    with pytest.raises(VerifyError, match="rank 1 to rank 0"):
        b.broadcast_to(x, [])


def test_cast_and_reshape_to_are_no_ops_when_nothing_changes():
    b = GraphBuilder("same")
    x = b.input("x", "f32", ["n", 2])
    assert b.cast(x, "f32") is x and b.reshape_to(x, ["n", 2]) is x
    assert not b.graph.ops


@pytest.mark.parametrize("shape", [(3, 5), (1, 7), (0, 4)])
def test_element_count_and_dim_size_read_run_time_sizes(shape):
    b = GraphBuilder("count")
    x = b.input("x", "f32", ["n", "m"])
    g = b.build(b.element_count(x, [0, 1], "f32"), b.dim_size(x, 1))
    count, m = interpret(g, [np.zeros(shape, np.float32)])
    assert count == shape[0] * shape[1] and m == shape[1] and m.dtype == np.int64


@pytest.mark.parametrize("n, m", [(7, 3), (0, 5), (1, 1), (12, 4)])
def test_size_value_reads_symbolic_sizes_with_python_floor_semantics(n, m):
    from disc_core.symbolic import Expr, ceildiv, floordiv, mod, smax

    N, M = Expr.sym("N"), Expr.sym("M")
    exprs = [N * M + 3, floordiv(N - 9, 2), ceildiv(N, 3), mod(N - 9, 4), smax(N, M * 2),
             2 * N - M]
    b = GraphBuilder("sizes")
    x = b.input("x", "f32", [N, M])
    g = b.build(*[b.size_value(e, "i64") for e in exprs], b.size_value(N * 3, "f32"))
    got = interpret(g, [np.zeros((n, m), np.float32)])
    want = [n * m + 3, (n - 9) // 2, -(-n // 3), (n - 9) % 4, max(n, 2 * m), 2 * n - m, 3.0 * n]
    assert [v.item() for v in got] == want
    assert got[-1].dtype == np.float32
    assert x is not None


def test_size_value_locates_unbound_symbols_through_the_callback():
    from disc_core.symbolic import Expr

    b = GraphBuilder("unbound")
    b.input("x", "f32", ["N"])
    with pytest.raises(VerifyError, match="size K is not a dim"):
        b.size_value(Expr.sym("K") + 1)
    carrier = b.input("k", "u8", ["K", 0])
    g = b.build(b.size_value(Expr.sym("K") + 1, unbound=lambda name: (carrier, 0)))
    got = interpret(g, [np.zeros(2, np.float32), np.zeros((5, 0), np.uint8)])
    assert got[0].item() == 6
