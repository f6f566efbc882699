"""Sequence-major head tensors of the fused attention ops (``seq_major``) and the
``attention-layout`` pass that folds the head transposes around them.

The op with a tensor sequence-major ([b..., S, H, D]) must mean the logical op on the
transposed tensor: the reference is checked against that, the native kernels (which read
and write such tensors through strides) against the reference on shapes never seen at
compile time, and the pass on transformer-shaped graphs: the transposes go, the compiled
result equals the unfused graph interpreted, and what something else still reads stays."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, interpret
from disc_core.opdef import Env, VerifyError, get_op
from disc_core.pipeline import optimize
from disc_runtime import CompileCache

NP = {"f32": np.float32, "f64": np.float64}
FWD, GRAD = get_op("attention"), get_op("attention_grad")


def _swap(x):
    return np.swapaxes(x, -3, -2)


def _fwd_inputs(rng, B, H, S, T, D, E, dt=np.float64):
    return [rng.standard_normal(s).astype(dt) for s in ((B, H, S, D), (B, H, T, D), (B, H, T, E))]


# -- the reference ----------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_reference_is_the_logical_op_on_transposed_tensors(causal):
    rng = np.random.default_rng(0)
    q, k, v = _fwd_inputs(rng, 2, 3, 5, 7, 4, 6)
    mask = np.where(rng.random((2, 1, 1, 7)) < 0.3, -np.inf, 0.0)
    attrs = {"scale": 0.4, "causal": causal}
    out, lse = FWD.run([q, k, v, mask], FWD.normalize_attrs(attrs), Env())
    do = rng.standard_normal(out.shape)
    grads = GRAD.run([q, k, v, out, do, lse, mask], GRAD.normalize_attrs(attrs), Env())
    logical = [q, k, v, out]
    for sm in itertools.chain.from_iterable(itertools.combinations(range(4), n)
                                            for n in (1, 2, 4)):
        args = [_swap(x) if i in sm else x for i, x in enumerate(logical[:3])]
        got = FWD.run([*args, mask], FWD.normalize_attrs({**attrs, "seq_major": sm}), Env())
        np.testing.assert_allclose(got[0], _swap(out) if 3 in sm else out, rtol=1e-12)
        np.testing.assert_allclose(got[1], lse, rtol=1e-12)  # the logsumexp stays logical
    for sm in [(0,), (4,), (5, 6, 7), (0, 1, 2, 3, 4, 5, 6, 7), (2, 3, 6)]:
        args = [_swap(x) if i in sm else x for i, x in enumerate([q, k, v, out, do])]
        got = GRAD.run([*args, lse, mask], GRAD.normalize_attrs({**attrs, "seq_major": sm}),
                       Env())
        for n, (a, w) in enumerate(zip(got, grads)):
            np.testing.assert_allclose(a, _swap(w) if 5 + n in sm else w, rtol=1e-12)


def _V(dt, shape):
    b = GraphBuilder()
    return b, b.input("x", dt, shape)


@pytest.mark.parametrize("shapes, sm, message", [
    (([2, 5, 3, 4], [2, 7, 3, 4], [2, 7, 3, 4]), (4,), "each entry must be one of 0...3"),
    (([2, 5, 3, 4], [2, 7, 3, 4], [2, 7, 3, 4]), (0, 0), "at most once"),
    (([5, 4], [7, 4], [7, 4]), (0,), "sequence-major but has rank 2"),
    (([2, 5, 3, 4], [2, 3, 7, 4], [2, 3, 7, 4]), (1,), "batch dim 1"),
])
def test_verifier_names_a_bad_layout(shapes, sm, message):
    b = GraphBuilder()
    args = [b.input(f"x{i}", "f32", s) for i, s in enumerate(shapes)]
    with pytest.raises(VerifyError, match=message):
        b.op("attention", *args, seq_major=sm)


def test_shape_rule_swaps_only_the_flagged_results():
    b = GraphBuilder()
    q = b.input("q", "f32", ["B", "S", "H", 8])  # sequence-major
    k = b.input("k", "f32", ["B", "H", "T", 8])
    v = b.input("v", "f32", ["B", "T", "H", 4])  # sequence-major
    out, lse = b.op("attention", q, k, v, seq_major=(0, 2, 3))
    assert [str(x.type) for x in (out, lse)] == ["f32[B, S, H, 4]", "f32[B, H, S]"]
    do = b.input("do", "f32", ["B", "H", "S", 4])
    o2 = b.input("o", "f32", ["B", "H", "S", 4])
    dq, dk, dv = b.op("attention_grad", q, k, v, o2, do, lse, seq_major=(0, 2, 6))
    assert [str(x.type) for x in (dq, dk, dv)] == [
        "f32[B, H, S, 8]", "f32[B, T, H, 8]", "f32[B, H, T, 4]"]


# -- the native kernels -------------------------------------------------------------------

@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    return Compiler(CompileCache(tmp_path_factory.mktemp("attn-layout")), target="native")


def _phys(dims, seq_major):
    return [*dims[:-3], dims[-2], dims[-3], dims[-1]] if seq_major else list(dims)


def _graph(dt, fwd_sm, grad_sm, mask_dims, causal):
    """attention then attention_grad with the given layouts (inputs in those layouts)."""
    b = GraphBuilder()
    logical = {"q": ["B", "H", "S", 16], "k": ["B", "H", "T", 16], "v": ["B", "H", "T", "E"]}
    ins = {n: b.input(n, dt, _phys(s, i in fwd_sm)) for i, (n, s) in enumerate(logical.items())}
    gins = {n: (ins[n] if (i in fwd_sm) == (i in grad_sm) else
                b.op("transpose", ins[n], permutation=[0, 2, 1, 3]))
            for i, n in enumerate(logical)}
    do = b.input("do", dt, _phys(["B", "H", "S", "E"], 4 in grad_sm))
    extra = [b.input("m", dt, mask_dims)] if mask_dims is not None else []
    attrs = {"causal": causal, "scale": 0.3}
    out, lse = b.op("attention", *ins.values(), *extra, seq_major=fwd_sm, **attrs)
    o = out if (3 in fwd_sm) == (3 in grad_sm) else b.op("transpose", out,
                                                         permutation=[0, 2, 1, 3])
    grads = b.op("attention_grad", *gins.values(), o, do, lse, *extra, seq_major=grad_sm,
                 **attrs)
    return b.build(out, lse, *grads)


SHAPES = [  # B, H, S, T, E
    (2, 3, 5, 7, 16), (1, 2, 1, 1, 8), (2, 2, 130, 130, 16), (1, 1, 257, 100, 5),
    (0, 2, 3, 3, 16), (2, 1, 9, 0, 16), (3, 2, 17, 33, 1), (1, 3, 600, 530, 4),
]


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("fwd_sm, grad_sm, mask_dims, causal", [
    ((0, 1, 2, 3), (0, 1, 2, 3, 4, 5, 6, 7), None, True),
    ((0, 1, 2), (4, 5, 6, 7), ["B", 1, 1, "T"], False),
    ((1, 3), (0, 2, 3, 6), ["B", "H", "S", "T"], False),
])
def test_native_matches_the_reference_on_unseen_shapes(compiler, dt, fwd_sm, grad_sm,
                                                       mask_dims, causal):
    g = _graph(dt, fwd_sm, grad_sm, mask_dims, causal)
    before = compiler.stats.compiles
    exe = compiler.compile(g)
    assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
    tol = 2e-5 if dt == "f32" else 1e-12
    rng = np.random.default_rng(3)
    for B, H, S, T, E in SHAPES:
        q, k, v = _fwd_inputs(rng, B, H, S, T, 16, E, NP[dt])
        do = rng.standard_normal((B, H, S, E)).astype(NP[dt])
        logical_in = [q, k, v, do]
        inputs = [_swap(x) if sm else x for x, sm in
                  zip(logical_in, [0 in fwd_sm, 1 in fwd_sm, 2 in fwd_sm, 4 in grad_sm])]
        inputs = [np.ascontiguousarray(x) for x in inputs]
        if mask_dims is not None:
            size = {"B": B, "H": H, "S": S, "T": T}
            shape = tuple(size.get(x, x) if isinstance(x, str) else x for x in mask_dims)
            inputs.append(np.where(rng.random(shape) < 0.3, -np.inf,
                                   rng.standard_normal(shape)).astype(NP[dt]))
        got = exe.run(inputs)
        # the reference of the same graph, and the logical ops on the transposed inputs
        want = interpret(g, inputs)
        out, lse = FWD.run([q, k, v, *inputs[4:]], FWD.normalize_attrs(
            {"causal": causal, "scale": 0.3}), Env())
        grads = GRAD.run([q, k, v, out, do, lse, *inputs[4:]], GRAD.normalize_attrs(
            {"causal": causal, "scale": 0.3}), Env())
        logical_out = [_swap(out) if 3 in fwd_sm else out, lse,
                       *(_swap(x) if 5 + n in grad_sm else x for n, x in enumerate(grads))]
        for n, (a, w, lw) in enumerate(zip(got, want, logical_out)):
            assert a.shape == w.shape == lw.shape and a.dtype == w.dtype
            np.testing.assert_allclose(w, lw, rtol=1e-12, atol=1e-12)
            scale = max(1.0, float(np.abs(w).max())) if w.size else 1.0
            np.testing.assert_allclose(a, w, rtol=tol, atol=tol * scale,
                                       err_msg=f"output {n} at {(B, H, S, T, E)}")
    assert compiler.stats.compiles - before <= 1


# -- the pass -------------------------------------------------------------------------------

def _heads(b, x, part, H=4, D=8):
    """Part ``part`` of a [B, S, 3*H*D] projection as [B, H, S, D] (slice, view,
    transpose: how a transformer splits Q, K, V into heads)."""
    s = b.op("slice", x, start=[0, 0, part * H * D], limit=["B", "S", (part + 1) * H * D],
             stride=[1, 1, 1])
    return b.op("transpose", b.op("reshape", s, shape=["B", "S", H, D]),
                permutation=[0, 2, 1, 3])


def _merge(b, x, H=4, D=8):
    """[B, H, S, D] -> [B, S, H*D]."""
    return b.op("reshape", b.op("transpose", x, permutation=[0, 2, 1, 3]),
                shape=["B", "S", H * D])


def transformer_graph(output_use=None):
    """Forward and backward of attention over a fused QKV projection, the output merged
    back to [B, S, H*D] and the gradients concatenated to d(QKV), as a training graph
    lays them out; ``output_use``: something else reading an intermediate."""
    b = GraphBuilder()
    x = b.input("qkv", "f32", ["B", "S", 96])
    g = b.input("g", "f32", ["B", "S", 32])
    q, k, v = (_heads(b, x, i) for i in range(3))
    out, lse = b.op("attention", q, k, v, causal=True, scale=0.35)
    do = b.op("transpose", b.op("reshape", g, shape=["B", "S", 4, 8]), permutation=[0, 2, 1, 3])
    dq, dk, dv = b.op("attention_grad", q, k, v, out, do, lse, causal=True, scale=0.35)
    dqkv = b.op("concatenate", _merge(b, dq), _merge(b, dk), _merge(b, dv), dimension=2)
    outs = [_merge(b, out), dqkv]
    if output_use == "transposed_query":
        outs.append(q)
    elif output_use == "grad_key":
        outs.append(dk)
    return b.build(*outs)


@pytest.fixture(scope="module")
def layout_compiler(tmp_path_factory):
    return Compiler(CompileCache(tmp_path_factory.mktemp("attn-layout-pass")), target="native")


def _run_and_compare(compiler, graph, lengths):
    exe = compiler.compile(graph)
    assert exe.artifact.engine == "native"
    rng = np.random.default_rng(5)
    for B, S in lengths:
        inputs = [rng.standard_normal((B, S, 96)).astype(np.float32),
                  rng.standard_normal((B, S, 32)).astype(np.float32)]
        for a, w in zip(exe.run(inputs), interpret(graph, inputs)):  # unoptimized graph
            np.testing.assert_allclose(a, w, rtol=2e-5, atol=2e-5)


def test_head_transposes_fold_into_the_fused_ops(layout_compiler):
    g = transformer_graph()
    opt = optimize(g.clone())
    fused = {op.name: op.attrs["seq_major"] for op in opt.ops
             if op.name in ("attention", "attention_grad")}
    # Q, K, V read from the projection; the gradients written merged; the forward's
    # output is also read by the backward, so its transpose for the merge stays
    assert fused == {"attention": (0, 1, 2), "attention_grad": (0, 1, 2, 4, 5, 6, 7)}
    assert [op.name for op in opt.ops].count("transpose") == 1
    _run_and_compare(layout_compiler, g, [(2, 5), (1, 1), (3, 70), (1, 150), (0, 4)])


@pytest.mark.parametrize("use, fwd_sm, grad_sm, transposes", [
    ("transposed_query", (0, 1, 2), (0, 1, 2, 4, 5, 6, 7), 2),  # q still an output
    ("grad_key", (0, 1, 2), (0, 1, 2, 4, 5, 7), 2),  # dK itself is an output
])
def test_what_something_else_reads_stays(layout_compiler, use, fwd_sm, grad_sm, transposes):
    g = transformer_graph(use)
    opt = optimize(g.clone())
    fused = {op.name: op.attrs["seq_major"] for op in opt.ops
             if op.name in ("attention", "attention_grad")}
    assert fused == {"attention": fwd_sm, "attention_grad": grad_sm}
    assert [op.name for op in opt.ops].count("transpose") == transposes
    _run_and_compare(layout_compiler, g, [(2, 5), (1, 33)])
