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


@pytest.fixture
def impure_op():
    """An op with an effect (it lacks the trait "pure"), registered for one test."""
    from disc_core import opdef
    from disc_core.ops.elementwise import Elementwise

    class Effect(Elementwise):
        name = "test_effect"
        operands = ("x",)
        traits = frozenset({"elementwise"})
        fn = staticmethod(lambda x: x)

    yield Effect
    opdef._REGISTRY.pop(Effect.name, None)


def test_dce_and_cse_keep_ops_with_effects(impure_op) -> None:
    b = GraphBuilder("g")
    x = b.input("x", "f32", ["B"])
    b.op("test_effect", x)  # unused, but it has an effect
    b.exp(x)  # unused and pure
    twice = [b.op("test_effect", x), b.op("test_effect", x)]
    g = b.build(b.add(*twice))
    DCE().run(g)
    assert names(g) == ["test_effect", "test_effect", "test_effect", "add"]
    assert not CSE().run(g)
    assert names(g) == ["test_effect", "test_effect", "test_effect", "add"]


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


def _linear_3d(b, x, w, bias, act=None):
    """A linear layer as frameworks run it on [B, S, K]: view as 2-D, GEMM, bias, view back."""
    B, S = x.shape[0], x.shape[1]
    flat = b.reshape(x, shape=[B * S, x.shape[2]])
    y = b.dot_general(flat, w, lhs_batch=[], rhs_batch=[], lhs_contract=[1],
                      rhs_contract=[0])
    y = b.add(y, b.broadcast_in_dim(bias, shape=list(y.shape), broadcast_dimensions=[1]))
    if act is not None:
        y = act(y)
    return b.reshape(y, shape=[B, S, w.shape[1]])


def _check_same(build, inputs) -> list[str]:
    b = GraphBuilder("g")
    g = b.build(*build(b))
    ref = GraphBuilder("ref")
    want = interpret(ref.build(*build(ref)), inputs)
    default_pipeline().run(g)
    for got, w in zip(interpret(g, inputs), want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5)
    return names(g)


def test_linear_layer_views_move_out_of_the_way() -> None:
    """GEMM on [B, S, K] directly, bias add (and what follows) on [B, S, N]: no reshape."""
    rng = np.random.default_rng(0)

    def build(b):
        x = b.input("x", "f32", ["B", "S", 6])
        w, bias = b.input("w", "f32", [6, 5]), b.input("bias", "f32", [5])
        return [_linear_3d(b, x, w, bias, act=b.tanh)]

    ops = _check_same(build, [rng.standard_normal(s).astype(np.float32)
                              for s in [(2, 3, 6), (6, 5), (5,)]])
    assert "reshape" not in ops and ops.count("dot_general") == 1, ops


def test_weight_gradient_contracts_the_leading_dims_of_both_views() -> None:
    rng = np.random.default_rng(1)

    def build(b):
        dy, x = b.input("dy", "f32", ["B", "S", 5]), b.input("x", "f32", ["B", "S", 6])
        flat_dy = b.reshape(dy, shape=[dy.shape[0] * dy.shape[1], 5])
        flat_x = b.reshape(x, shape=[x.shape[0] * x.shape[1], 6])
        return [b.dot_general(flat_dy, flat_x, lhs_batch=[], rhs_batch=[], lhs_contract=[0],
                              rhs_contract=[0])]

    ops = _check_same(build, [rng.standard_normal(s).astype(np.float32)
                              for s in [(2, 3, 5), (2, 3, 6)]])
    assert ops == ["dot_general"], ops


def test_head_merge_view_feeds_the_gemm_through_one_zero_copy_view() -> None:
    """[B, S, H, D] viewed as [B*S, H*D] before a GEMM: it becomes [B, S, H*D] (a view the
    native engine aliases) and the GEMM's M is B*S as it is."""
    rng = np.random.default_rng(2)

    def build(b):
        x = b.input("x", "f32", ["B", "S", 2, 3])
        w = b.input("w", "f32", [6, 4])
        flat = b.reshape(x, shape=[x.shape[0] * x.shape[1], 6])
        y = b.dot_general(flat, w, lhs_batch=[], rhs_batch=[], lhs_contract=[1],
                          rhs_contract=[0])
        return [b.reshape(b.exp(y), shape=[x.shape[0], x.shape[1], 4])]

    ops = _check_same(build, [rng.standard_normal(s).astype(np.float32)
                              for s in [(2, 3, 2, 3), (6, 4)]])
    assert ops == ["reshape", "dot_general", "exp"], ops


def test_views_that_split_the_kept_dim_stay() -> None:
    """A view that regroups more than the leading dims is not moved."""
    rng = np.random.default_rng(3)

    def build(b):
        x = b.input("x", "f32", ["N", 2, 3])
        flat = b.reshape(x, shape=[x.shape[0] * 2, 3])  # merges the leading dims: moves
        odd = b.reshape(x, shape=[x.shape[0], 6])  # merges trailing dims: stays
        return [b.exp(flat), b.exp(odd)]

    b = GraphBuilder("g")
    g = b.build(*build(b))
    ops = _check_same(build, [rng.standard_normal((4, 2, 3)).astype(np.float32)])
    default_pipeline().run(g)
    exps = [op for op in g.ops if op.name == "exp"]
    assert ops.count("reshape") == 2
    # one exp runs on x itself ([N, 2, 3]), the other on the [N, 6] view
    assert sorted(op.operands[0].rank for op in exps) == [2, 3]


@pytest.mark.parametrize("perm, start, limit, stride", [
    # a fused QKV projection [B, S, 3, H, D] split into heads: transpose, then q/k/v
    ([2, 0, 3, 1, 4], [1, 0, 0, 0, 0], [2, "B", 2, "S", 4], [1, 1, 1, 1, 1]),
    ([1, 0], [1, 0], [3, "B"], [2, 1]),   # strided, partial
    ([0, 2, 1], [0, 1, 0], ["B", 3, 2], [1, 1, 1]),
])
def test_slice_of_a_transpose_slices_first(perm, start, limit, stride) -> None:
    """slice(transpose(x)) becomes transpose(slice(x)): the same values, and a transpose
    whose users are all slices is no longer computed whole."""
    from disc_core.symbolic import parse_expr

    src = {2: ["B", 3], 3: ["B", 3, 4], 5: ["B", "S", 3, 2, 4]}[len(perm)]

    def build():
        b = GraphBuilder("g")
        x = b.input("x", "f32", src)
        t = b.op("transpose", x, permutation=perm)
        conv = [parse_expr(d) if isinstance(d, str) else d for d in limit]
        return b.build(b.op("slice", t, start=start, limit=conv, stride=stride))

    g = build()
    PassManager([Canonicalize(), DCE()]).run(g)
    assert names(g) == ["slice", "transpose"], names(g)
    concrete = [5 if d == "B" else 6 if d == "S" else d for d in src]
    data = np.random.default_rng(0).standard_normal(concrete).astype(np.float32)
    np.testing.assert_array_equal(interpret(g, [data])[0], interpret(build(), [data])[0])


def _recomputed_linear(b, shared: bool):
    """A backward pass's recomputation of a linear layer's output: the saved flat GEMM
    result [B*S, N] plus the bias, viewed as [B, S, N] for the activation's gradient."""
    from disc_core.symbolic import parse_expr

    g = b.input("g", "f32", ["B", "S", 4])
    m = b.input("m", "f32", [parse_expr("B*S"), 4])
    bias = b.input("bias", "f32", [4])
    h = b.add(m, b.broadcast_in_dim(bias, shape=list(m.shape), broadcast_dimensions=[1]))
    h = b.mul(h, h)
    view = b.reshape(h, shape=list(g.shape))
    out = [b.mul(g, b.tanh(view))]
    if shared:  # the flat value has another reader: it stays flat
        out.append(b.exp(h))
    return out


@pytest.mark.parametrize("shared", [False, True])
def test_view_of_an_elementwise_result_moves_onto_its_operands(shared) -> None:
    """reshape(e(m, broadcast(bias))) splitting m's leading dim becomes e(reshape(m),
    broadcast(bias)) in the view's layout when the view is e's only reader: the whole
    chain then runs as one kernel over [B, S, N] (no kernel over [B*S, N] writing it)."""
    from disc_core.native.build import lower_native
    from disc_core.native.fusion import Kernel, plan_fusion

    rng = np.random.default_rng(4)
    for bsz, s in ((2, 3), (1, 1), (3, 7)):
        inputs = [rng.standard_normal(sh).astype(np.float32)
                  for sh in ((bsz, s, 4), (bsz * s, 4), (4,))]
        ops = _check_same(lambda b: _recomputed_linear(b, shared), inputs)
    b = GraphBuilder("g")
    g = b.build(*_recomputed_linear(b, shared))
    default_pipeline().run(g)
    ranks = sorted(op.results[0].rank for op in g.ops if op.name == "add")
    assert ranks == ([2] if shared else [3]), (ranks, ops)
    lower_native(g)
    kernels = [s for s in plan_fusion(g).steps if isinstance(s, Kernel)]
    assert len(kernels) == (2 if shared else 1), [k.space for k in kernels]


def test_view_of_a_scalar_or_returned_elementwise_result_stays() -> None:
    """A rank-0 value viewed as [1] has no leading dim to split, and a value the graph
    also returns must be computed where it is anyway: neither view moves (the fuzzer found
    the first crashing the pass)."""
    rng = np.random.default_rng(5)

    def build(b):
        x = b.input("x", "f32", ["B"])
        s = b.neg(b.reduce(x, kind="sum", axes=[0]))
        m = b.input("m", "f32", [parse_expr("B*S"), 4])
        e = b.exp(m)
        return [b.reshape(s, shape=[1]), s, b.reshape(e, shape=[b.symbol("B"), "S", 4]), e]

    from disc_core.symbolic import parse_expr

    ops = _check_same(build, [rng.standard_normal(3).astype(np.float32),
                              rng.standard_normal((6, 4)).astype(np.float32)])
    assert ops.count("exp") == 1 and ops.count("neg") == 1, ops
