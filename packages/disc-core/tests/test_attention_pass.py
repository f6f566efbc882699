"""The fuse-attention pass: the ways models write attention become the fused op (and the
compiled result matches the unfused graph interpreted), and it stays unfused where an
intermediate has another use, a fill is finite (other than a causal condition's large
one), or fused attention is turned off."""

from __future__ import annotations

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, interpret
from disc_core.pipeline import optimize
from disc_runtime import CompileCache


def _softmax(b, x):
    r = x.rank
    shape = list(x.shape)
    top = b.op("reduce", x, kind="max", axes=[r - 1])
    e = b.op("exp", b.op("sub", x, b.op("broadcast_in_dim", top, shape=shape,
                                         broadcast_dimensions=list(range(r - 1)))))
    total = b.op("reduce", e, kind="sum", axes=[r - 1])
    return b.op("div", e, b.op("broadcast_in_dim", total, shape=shape,
                               broadcast_dimensions=list(range(r - 1))))


def _scalar(b, value, shape, dt="f32"):
    return b.op("broadcast_in_dim", b.constant(np.asarray(value, np.dtype(
        {"f32": "float32", "f64": "float64"}[dt]))), shape=list(shape), broadcast_dimensions=[])


def _bmm(b, x, y, x_contract, y_contract, nb):
    return b.op("dot_general", x, y, lhs_batch=list(range(nb)), rhs_batch=list(range(nb)),
                lhs_contract=[x_contract], rhs_contract=[y_contract])


def gpt_style(extra_use=None, fill=-np.inf, direction="gt", not_le=False):
    """torch's GPT: Kᵀ via permute, [B*H] batch reshapes, scale on scores, causal
    masked_fill(-inf) from iotas (``col > row``, or ``not(col - row <= 0)`` as torch's
    tril traces), softmax, P V. Other directions make other (non-causal) masks."""
    b = GraphBuilder()
    q = b.input("q", "f32", ["B", 4, "S", 8])
    k = b.input("k", "f32", ["B", 4, "S", 8])
    v = b.input("v", "f32", ["B", 4, "S", 8])
    kt = b.op("transpose", k, permutation=[0, 1, 3, 2])
    s = _bmm(b, b.op("reshape", q, shape=["4*B", "S", 8]),
             b.op("reshape", kt, shape=["4*B", 8, "S"]), 2, 1, 1)
    s = b.op("reshape", s, shape=["B", 4, "S", "S"])
    s = b.op("mul", s, _scalar(b, 0.35, s.shape))
    iota = b.op("iota", shape=["S"], dimension=0, dtype="i64")
    col = b.op("broadcast_in_dim", iota, shape=["S", "S"], broadcast_dimensions=[1])
    row = b.op("broadcast_in_dim", iota, shape=["S", "S"], broadcast_dimensions=[0])
    if not_le:
        zero = b.op("broadcast_in_dim", b.constant(np.asarray(0, np.int64)), shape=["S", "S"],
                    broadcast_dimensions=[])
        above = b.op("not", b.op("compare", b.op("sub", col, row), zero, direction="le"))
    else:
        above = b.op("compare", col, row, direction=direction)
    cond = b.op("broadcast_in_dim", above, shape=list(s.shape), broadcast_dimensions=[2, 3])
    s = b.op("select", cond, _scalar(b, fill, s.shape), s)
    p = _softmax(b, s)
    o = _bmm(b, b.op("reshape", p, shape=["4*B", "S", "S"]),
             b.op("reshape", v, shape=["4*B", "S", 8]), 2, 1, 1)
    outs = [b.op("reshape", o, shape=["B", 4, "S", 8])]
    if extra_use == "probs":
        outs.append(p)
    elif extra_use == "scores":
        outs.append(b.op("exp", s))
    return b.build(*outs), lambda B, S: [(B, 4, S, 8)] * 3


def bert_style(dt="f32"):
    """Scale on Q before the dot, K contracted in place (no transpose), an additive
    padding mask [B, S] broadcast over heads and queries, where(keep, s, -inf) on top."""
    b = GraphBuilder()
    q = b.input("q", dt, ["B", "H", "S", "D"])
    k = b.input("k", dt, ["B", "H", "T", "D"])
    v = b.input("v", dt, ["B", "H", "T", "E"])
    pad = b.input("pad", dt, ["B", "T"])
    keep = b.input("keep", "bool", ["S", "T"])
    qs = b.op("div", q, _scalar(b, 2.0, q.shape, dt))
    s = _bmm(b, qs, k, 3, 3, 2)
    s = b.op("add", s, b.op("broadcast_in_dim", pad, shape=list(s.shape),
                            broadcast_dimensions=[0, 3]))
    cond = b.op("broadcast_in_dim", keep, shape=list(s.shape), broadcast_dimensions=[2, 3])
    s = b.op("select", cond, s, _scalar(b, -np.inf, s.shape, dt))
    o = _bmm(b, _softmax(b, s), v, 3, 2, 2)
    return b.build(o), None


def rank3_style(mask_inside=False):
    """A [B*H, S, D] graph (TF / Paddle style), scores divided by a constant, mask added
    on the left (or before the division: then it is divided too), V given as [BH, E, T]
    (contracted on its last dim)."""
    b = GraphBuilder()
    q = b.input("q", "f32", ["N", "S", 16])
    k = b.input("k", "f32", ["N", "T", 16])
    vt = b.input("vt", "f32", ["N", 5, "T"])
    m = b.input("m", "f32", ["N", "S", "T"])
    s = _bmm(b, q, k, 2, 2, 1)
    if mask_inside:
        s = b.op("div", b.op("add", m, s), _scalar(b, 4.0, s.shape))
    else:
        s = b.op("add", m, b.op("div", s, _scalar(b, 4.0, s.shape)))
    o = _bmm(b, _softmax(b, s), vt, 2, 2, 1)
    return b.build(o), None


def _fused(graph):
    return [op.name for op in optimize(graph.clone()).ops if op.name == "attention"]


def _fused_attrs(graph):
    (op,) = [op for op in optimize(graph.clone()).ops if op.name == "attention"]
    return op.attrs, len(op.operands)


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    return Compiler(CompileCache(tmp_path_factory.mktemp("attn-pass")), target="native")


def _check(compiler, graph, feeds):
    exe = compiler.compile(graph)
    assert exe.artifact.engine == "native"
    for inputs in feeds:
        got, want = exe.run(inputs), interpret(graph, inputs)  # the unfused graph
        for a, w in zip(got, want):
            np.testing.assert_allclose(a, w, rtol=2e-5, atol=2e-6, equal_nan=True)


@pytest.mark.parametrize("direction, not_le, causal", [
    ("gt", False, True), ("gt", True, True),   # j > i: causal, no mask operand
    ("ge", False, False), ("lt", False, False),  # other masks: fused with the mask
])
def test_gpt_style_attention_fuses(compiler, direction, not_le, causal):
    g, _ = gpt_style(direction=direction, not_le=not_le)
    attrs, n_operands = _fused_attrs(g)
    assert attrs["causal"] is causal and n_operands == (3 if causal else 4)
    rng = np.random.default_rng(0)
    feeds = [[rng.standard_normal((B, 4, S, 8)).astype(np.float32) for _ in range(3)]
             for B, S in [(2, 5), (1, 1), (3, 70), (1, 150)]]
    _check(compiler, g, feeds)


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_bert_style_masks_and_scaled_query_fuse(compiler, dt):
    g, _ = bert_style(dt)
    assert _fused(g) == ["attention"]
    rng = np.random.default_rng(1)
    npdt = np.float32 if dt == "f32" else np.float64
    feeds = []
    for B, H, S, T, D, E in [(2, 2, 5, 7, 8, 3), (1, 3, 65, 129, 4, 6), (2, 1, 1, 1, 2, 2)]:
        pad = np.where(rng.random((B, T)) < 0.3, -1e4, 0.0)
        keep = rng.random((S, T)) < 0.8
        keep[0] = False  # a fully masked row: NaN, as the unfused softmax gives
        feeds.append([rng.standard_normal(s).astype(npdt) for s in
                      ((B, H, S, D), (B, H, T, D), (B, H, T, E))] + [pad.astype(npdt), keep])
    _check(compiler, g, feeds)
    out = compiler.compile(g).run(feeds[0])[0]
    assert np.isnan(out[:, :, 0]).all() and not np.isnan(out[:, :, 1:]).any()


@pytest.mark.parametrize("mask_inside", [False, True])
def test_rank3_graphs_fuse(compiler, mask_inside):
    g, _ = rank3_style(mask_inside)
    assert _fused(g) == ["attention"]
    rng = np.random.default_rng(2)
    feeds = [[rng.standard_normal(s).astype(np.float32) for s in
              ((N, S, 16), (N, T, 16), (N, 5, T), (N, S, T))]
             for N, S, T in [(3, 4, 9), (1, 200, 33)]]
    _check(compiler, g, feeds)


@pytest.mark.parametrize("use", ["probs", "scores"])
def test_no_fusion_where_an_intermediate_is_used_elsewhere(use):
    g, _ = gpt_style(extra_use=use)
    assert _fused(g) == []


@pytest.mark.parametrize("fill", [-1e9, -0.7 * float(np.finfo(np.float32).max)])
def test_causal_finite_fill_fuses_causal(compiler, fill):
    """A causal condition filled with a large finite value (Keras's -0.7 * max, -1e9)
    keeps every row's first key, so the masked keys' weights underflow to exactly 0, as
    with -inf: it becomes ``causal`` and matches the unfused graph, length 1 included."""
    g, _ = gpt_style(fill=fill)
    attrs, n_operands = _fused_attrs(g)
    assert attrs["causal"] is True and n_operands == 3
    rng = np.random.default_rng(3)
    feeds = [[rng.standard_normal((B, 4, S, 8)).astype(np.float32) for _ in range(3)]
             for B, S in [(2, 5), (1, 1), (3, 70), (1, 131)]]
    _check(compiler, g, feeds)


@pytest.mark.parametrize("direction, fill", [
    ("ge", -1e9),   # not causal: a row may be filled whole, where -1e9 is not -inf
    ("lt", -1e9),
    ("gt", -1e4),   # causal, but a fill that may not underflow
])
def test_no_fusion_for_other_finite_fills(direction, fill):
    g, _ = gpt_style(fill=fill, direction=direction)
    assert _fused(g) == []


def test_turned_off_by_the_option(monkeypatch):
    monkeypatch.setenv("DISC_FUSED_ATTENTION", "0")
    g, _ = gpt_style()
    assert _fused(g) == []
