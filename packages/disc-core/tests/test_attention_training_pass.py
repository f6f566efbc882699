"""The fuse-attention-training pass: an unfused attention forward together with the
backward a framework's autodiff writes for it (TF's einsum/Softmax gradients, here built
by hand on the core graph) becomes one ``attention`` and one ``attention_grad``; the
compiled result matches the unfused graph interpreted on several shapes (unseen ones, 1,
odd) in f32 and f64, and nothing fuses where an intermediate is read elsewhere or the
backward's scale is not the forward's."""

from __future__ import annotations

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, interpret
from disc_core.pipeline import optimize
from disc_runtime import CompileCache

_NP = {"f32": np.float32, "f64": np.float64}


def _scalar(b, value, shape, dt):
    return b.op("broadcast_in_dim", b.constant(np.asarray(value, _NP[dt])), shape=list(shape),
                broadcast_dimensions=[])


def _bmm(b, x, y, x_contract, y_contract, nb=2):
    return b.op("dot_general", x, y, lhs_batch=list(range(nb)), rhs_batch=list(range(nb)),
                lhs_contract=[x_contract], rhs_contract=[y_contract])


def _rows(b, x, kind):
    """reduce over the last axis, broadcast back (with the [.., S, 1] reshapes TF's
    keepdims leaves)."""
    r = x.rank
    red = b.op("reduce", x, kind=kind, axes=[r - 1])
    kept = b.op("reshape", red, shape=[*red.shape, 1])
    red = b.op("reshape", kept, shape=list(red.shape))
    return b.op("broadcast_in_dim", red, shape=list(x.shape),
                broadcast_dimensions=list(range(r - 1)))


def _causal_keep(b, shape):
    """i - j >= 0 over the last two dims of ``shape`` (as band_part(ones, -1, 0) traces:
    a bool select of the comparison), broadcast to ``shape``."""
    sq, sk = shape[-2:]
    i = b.op("iota", shape=[sq, sk], dimension=0, dtype="i64")
    j = b.op("iota", shape=[sq, sk], dimension=1, dtype="i64")
    zero = b.op("broadcast_in_dim", b.constant(np.asarray(0, np.int64)), shape=[sq, sk],
                broadcast_dimensions=[])
    le = b.op("compare", b.op("sub", j, i), zero, direction="le")
    yes, no = (b.op("broadcast_in_dim", b.constant(np.asarray(v)), shape=[sq, sk],
                    broadcast_dimensions=[]) for v in (True, False))
    keep = b.op("select", le, yes, no)
    return b.op("broadcast_in_dim", keep, shape=list(shape),
                broadcast_dimensions=[len(shape) - 2, len(shape) - 1])


def training_graph(dt="f32", mask=False, extra=None, bwd_scale=None, v_transposed=False,
                   causal=None, bwd_select="same"):
    """q [B, H, S, D], k [B, H, T, D], v [B, H, T, E] (or [B, H, E, T]), the output's
    gradient dO [B, H, S, E]; outputs O, dQ, dK, dV (and ``extra``'s intermediate).
    ``causal``: the scores outside i >= j filled with that value (Keras's finite one or
    -inf), and dS through TF's SelectV2 gradient ``select(keep, dS, 0)``, whose condition
    is the forward's (``bwd_select="same"``) or another one (``"other"``)."""
    b = GraphBuilder()
    q = b.input("q", dt, ["B", 2, "S", 8])
    k = b.input("k", dt, ["B", 2, "T", 8])
    v = b.input("v", dt, ["B", 2, 5, "T"] if v_transposed else ["B", 2, "T", 5])
    d_o = b.input("do", dt, ["B", 2, "S", 5])
    c = 0.35
    s = b.op("mul", _bmm(b, q, k, 3, 3), _scalar(b, c, ["B", 2, "S", "T"], dt))
    if mask:
        m = b.input("m", dt, ["B", "T"])
        s = b.op("add", s, b.op("broadcast_in_dim", m, shape=list(s.shape),
                                broadcast_dimensions=[0, 3]))
    keep = None
    if causal is not None:
        keep = _causal_keep(b, s.shape)
        s = b.op("select", keep, s, _scalar(b, causal, s.shape, dt))
    e = b.op("exp", b.op("sub", s, _rows(b, s, "max")))
    p = b.op("div", e, _rows(b, e, "sum"))
    vc = 2 if v_transposed else 3
    o = _bmm(b, p, v, 3, 3 if v_transposed else 2)
    # the backward TF's gradients spell
    dp = _bmm(b, d_o, v, 3, vc)
    dv = _bmm(b, p, d_o, 2, 2)
    dsm = b.op("mul", b.op("sub", dp, _rows(b, b.op("mul", dp, p), "sum")), p)
    if keep is not None:
        cond = keep if bwd_select == "same" else b.op("not", keep)
        dsm = b.op("select", cond, dsm, _scalar(b, 0.0, dsm.shape, dt))
    ds = b.op("mul", dsm, _scalar(b, c if bwd_scale is None else bwd_scale, dsm.shape, dt))
    dq = _bmm(b, ds, k, 3, 2)
    dk = _bmm(b, ds, q, 2, 2)
    outs = [o, dq, dk, dv]
    if extra == "probs":
        outs.append(p)
    elif extra == "ds":
        outs.append(ds)
    return b.build(*outs)


def _names(graph):
    return [op.name for op in optimize(graph.clone()).ops]


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    return Compiler(CompileCache(tmp_path_factory.mktemp("attn-train-pass")), target="native")


def _feeds(dt, mask, v_transposed, seed=0):
    rng = np.random.default_rng(seed)
    for bsz, s, t in [(2, 7, 7), (1, 1, 1), (3, 33, 20), (2, 64, 64), (1, 5, 130)]:
        shapes = [(bsz, 2, s, 8), (bsz, 2, t, 8),
                  (bsz, 2, 5, t) if v_transposed else (bsz, 2, t, 5), (bsz, 2, s, 5)]
        if mask:
            shapes.append((bsz, t))
        arrays = [rng.standard_normal(sh).astype(_NP[dt]) for sh in shapes]
        if mask:
            arrays[-1] = np.where(rng.random((bsz, t)) < 0.2, -1e4, 0.0).astype(_NP[dt])
        yield arrays


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("mask, v_transposed", [(False, False), (True, False), (False, True)])
def test_forward_and_backward_fuse_and_match(compiler, dt, mask, v_transposed):
    graph = training_graph(dt, mask=mask, v_transposed=v_transposed)
    names = _names(graph)
    assert names.count("attention") == 1 and names.count("attention_grad") == 1, names
    # no [.., S, T] intermediate is left: no exp, no max reduction
    assert "exp" not in names, names
    exe = compiler.compile(graph)
    assert exe.artifact.engine == "native"
    tol = dict(rtol=2e-4, atol=2e-5) if dt == "f32" else dict(rtol=1e-9, atol=1e-11)
    for inputs in _feeds(dt, mask, v_transposed):
        got, want = exe.run(inputs), interpret(graph, inputs)  # the unfused graph
        for a, w in zip(got, want):
            np.testing.assert_allclose(a, w, **tol)


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("fill", ["finite", "inf"])
def test_causal_select_and_its_gradient_fuse_and_match(compiler, dt, fill):
    """A causal select mask (Keras's -0.7 * max fill, or -inf) with SelectV2's gradient in
    dS's chain: both fused ops in causal mode, matching the unfused graph (S > T, 1, odd
    included: every row keeps its first key)."""
    value = -0.7 * float(np.finfo(_NP[dt]).max) if fill == "finite" else -np.inf
    graph = training_graph(dt, causal=value)
    opt = optimize(graph.clone())
    fused = [op for op in opt.ops if op.name in ("attention", "attention_grad")]
    assert sorted(op.name for op in fused) == ["attention", "attention_grad"], _names(graph)
    assert all(op.attrs["causal"] is True for op in fused)
    assert "exp" not in [op.name for op in opt.ops]
    exe = compiler.compile(graph)
    tol = dict(rtol=2e-4, atol=2e-5) if dt == "f32" else dict(rtol=1e-9, atol=1e-11)
    for inputs in _feeds(dt, False, False, seed=4):
        got, want = exe.run(inputs), interpret(graph, inputs)
        for a, w in zip(got, want):
            np.testing.assert_allclose(a, w, **tol)


def test_no_fusion_when_the_backward_select_is_another_condition():
    graph = training_graph(causal=-np.inf, bwd_select="other")
    assert "attention_grad" not in _names(graph)


@pytest.mark.parametrize("extra", ["probs", "ds"])
def test_no_fusion_where_an_intermediate_is_read_elsewhere(extra):
    names = _names(training_graph(extra=extra))
    assert "attention_grad" not in names


def test_no_fusion_when_the_backward_scale_differs():
    names = _names(training_graph(bwd_scale=0.5))
    assert "attention_grad" not in names


def test_turned_off_by_the_option(monkeypatch):
    monkeypatch.setenv("DISC_FUSED_ATTENTION", "0")
    names = _names(training_graph())
    assert "attention_grad" not in names and "attention" not in names
