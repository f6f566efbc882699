"""Passes: canonicalization and algebraic rules, folding, CSE, DCE, shape propagation."""

import numpy as np
import pytest

from disc_core.builder import GraphBuilder
from disc_core.interpreter import interpret
from disc_core.opdef import VerifyError
from disc_core.passes import (
    CSE,
    DCE,
    Canonicalize,
    ConstantFold,
    Pass,
    PassManager,
    ShapePropagation,
    default_pipeline,
)


def names(g):
    return [op.name for op in g.ops]


def test_dce_removes_unused_ops() -> None:
    b = GraphBuilder("g")
    x = b.input("x", "f32", ["B"])
    b.exp(x)
    g = b.build(b.neg(x))
    assert DCE().run(g) and names(g) == ["neg"]
    assert not DCE().run(g)


def test_cse_merges_identical_and_commuted_ops() -> None:
    b = GraphBuilder("g")
    x, y = b.input("x", "f32", ["B"]), b.input("y", "f32", ["B"])
    g = b.build(b.add(x, y), b.add(y, x), b.sub(x, y), b.sub(y, x))
    assert CSE().run(g)
    assert names(g) == ["add", "sub", "sub"]
    assert g.outputs[0] is g.outputs[1]


def test_constant_folding_respects_size_limit() -> None:
    b = GraphBuilder("g")
    small = b.mul(b.constant(np.arange(4, dtype=np.int32)), b.constant(np.ones(4, np.int32)))
    big = b.exp(b.constant(np.ones(100, np.float32)))
    g = b.build(small, big)
    ConstantFold(max_elements=10).run(g)
    DCE().run(g)
    assert names(g) == ["constant", "constant", "exp"]
    np.testing.assert_array_equal(g.outputs[0].producer.attrs["value"].array, np.arange(4))


@pytest.mark.parametrize("build, expect", [
    (lambda b, x: b.neg(b.neg(x)), []),
    (lambda b, x: b.mul(x, b.broadcast_in_dim(b.constant(np.float32(1)), shape=["B"],
                                              broadcast_dimensions=[])), []),
    (lambda b, x: b.sub(x, b.broadcast_in_dim(b.constant(np.float32(0)), shape=["B"],
                                              broadcast_dimensions=[])), []),
    (lambda b, x: b.max(x, x), []),
    (lambda b, x: b.convert(b.convert(x, dtype="f64"), dtype="f32"), []),
    (lambda b, x: b.convert(b.convert(x, dtype="f16"), dtype="f32"), ["convert", "convert"]),
    (lambda b, x: b.pow(x, b.broadcast_in_dim(b.constant(np.float32(2)), shape=["B"],
                                              broadcast_dimensions=[])), ["mul"]),
    # x + 0 is not x for floats (-0.0 + 0.0 = +0.0), so it stays
    (lambda b, x: b.add(x, b.broadcast_in_dim(b.constant(np.float32(0)), shape=["B"],
                                              broadcast_dimensions=[])),
     ["constant", "broadcast_in_dim", "add"]),
])
def test_algebraic_rules(build, expect) -> None:
    b = GraphBuilder("g")
    x = b.input("x", "f32", ["B"])
    g = b.build(build(b, x))
    PassManager([Canonicalize(), DCE()]).run(g)
    assert names(g) == expect
    data = np.array([-1.5, 0.0, -0.0, 2.25, np.nan], np.float32)
    ref = GraphBuilder("ref")
    (want,) = interpret(ref.build(build(ref, ref.input("x", "f32", ["B"]))), [data])
    (got,) = interpret(g, [data])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape, flat, axes, rewritten", [
    # a bias gradient of [B*S, H] computed from [B, S, H]: reduce the source's B and S
    (["B", "S", 8], ["B*S", 8], [0], True),
    (["B", 4, 3, 8], ["B*12", 8], [0], True),
    (["N", 8], [2, "N*4"], [0], False),   # the reshape regroups the kept dim too
    (["B", "S", 8], ["B*S", 8], [1], False),  # the kept dim is reduced, not the merged ones
])
def test_reduce_of_a_regrouping_reshape_reduces_the_source(shape, flat, axes,
                                                            rewritten) -> None:
    from disc_core.symbolic import parse_expr

    b = GraphBuilder("g")
    u = b.input("u", "f32", shape)
    dims = [parse_expr(d) if isinstance(d, str) else d for d in flat]
    g = b.build(b.reduce(b.reshape(u, shape=dims), kind="sum", axes=axes))
    PassManager([Canonicalize(), DCE()]).run(g)
    assert ("reshape" not in names(g)) is rewritten, names(g)
    concrete = [5 if d == "B" else 3 if d in ("S", "N") else d for d in shape]
    data = np.random.default_rng(0).standard_normal(concrete).astype(np.float32)
    ref = GraphBuilder("ref")
    ru = ref.input("u", "f32", shape)
    want = interpret(ref.build(ref.reduce(ref.reshape(ru, shape=dims), kind="sum", axes=axes)),
                     [data])
    np.testing.assert_allclose(interpret(g, [data])[0], want[0], rtol=1e-5, atol=1e-5)


def test_commutative_constants_move_right_and_cse() -> None:
    b = GraphBuilder("g")
    x = b.input("x", "f32", [4])
    c = b.constant(np.full(4, 3, np.float32))
    g = b.build(b.add(c, x), b.add(x, c))
    default_pipeline().run(g)
    assert names(g) == ["constant", "add"]


def test_shape_propagation_unifies_symbols() -> None:
    b = GraphBuilder("g")
    x, y = b.input("x", "f32", ["B", "S"]), b.input("y", "f32", ["B", "T"])
    z = b.input("z", "f32", ["B", 768])
    g = b.build(b.add(b.add(x, y), z))
    assert ShapePropagation().run(g)
    assert [str(v.type) for v in g.inputs] == ["f32[B, 768]"] * 3
    (out,) = interpret(g, [np.ones((2, 768), np.float32)] * 3)
    assert out.shape == (2, 768)


def test_full_pipeline_preserves_numerics() -> None:
    from test_interpreter import layernorm_graph, numpy_layernorm

    g = layernorm_graph()
    default_pipeline().run(g)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 5, 8)).astype(np.float32)
    gm, bt = np.ones(8, np.float32), np.zeros(8, np.float32)
    np.testing.assert_allclose(interpret(g, [x, gm, bt])[0], numpy_layernorm(x, gm, bt),
                               rtol=1e-5, atol=1e-5)


def test_pass_manager_reports_the_breaking_pass() -> None:
    class Breaks(Pass):
        name = "breaks"

        def run(self, graph):
            graph.ops.reverse()
            return True

    b = GraphBuilder("g")
    x = b.input("x", "f32", [2])
    g = b.build(b.exp(b.neg(x)))
    with pytest.raises(VerifyError, match="after pass breaks"):
        PassManager([Breaks()]).run(g)
