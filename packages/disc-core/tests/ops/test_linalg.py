"""dot_general and convolution: shape rules (static and symbolic), facts, reference
numerics against independent computations (exact object-dtype einsum for dot; a naive
direct-loop convolution that maps each output position and kernel tap to an input index
without padding or dilating arrays), verifier and interpreter errors.

Tolerances (the reference rounds an accurate accumulator once; the oracle is computed in
float64 from the same inputs): f64 rtol 1e-12, f32 rtol 1e-6, f16 rtol 2**-10, bf16 rtol
2**-7 (about one ulp of the result), atol 1e-6 (1e-12 for f64, 1e-9 for f32) for
cancellation. Integer results are exact, with wrap-around to the operand width.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from disc_core.dtypes import NUMERIC_DTYPES, DType
from disc_core.ir import TensorType, Value
from disc_core.opdef import Env, InterpretError, VerifyError, get_op
from disc_core.shape_facts import Divisible, Eq
from disc_core.symbolic import as_expr

RTOL = {DType.F64: 1e-12, DType.F32: 1e-6, DType.F16: 2**-10, DType.BF16: 2**-7}
ATOL = {DType.F64: 1e-12, DType.F32: 1e-9, DType.F16: 1e-6, DType.BF16: 1e-6}


def types(name, operand_types, **attrs):
    op = get_op(name)
    return op.result_types([TensorType.of(*t) for t in operand_types], op.normalize_attrs(attrs))


def run(name, inputs, env=None, **attrs):
    op = get_op(name)
    return op.run(inputs, op.normalize_attrs(attrs), Env(env or {}))


def build(name, operand_types, **attrs):
    return get_op(name).build([Value(TensorType.of(*t)) for t in operand_types], attrs)


def rand(rng, shape, dt):
    if dt.is_int:
        info = np.iinfo(dt.np)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt.np)
    return rng.standard_normal(shape).astype(dt.np)


def exact(x):
    """float64 for floats, exact Python ints (object arrays) for integers."""
    return x.astype(np.float64) if x.dtype.kind in "fV" else x.astype(object)


def assert_matches(got, want, dt):
    """``want`` is the float64 / exact-integer oracle."""
    assert got.dtype == dt.np and got.shape == want.shape
    if dt.is_int:
        bits = 1 << dt.bits
        w = np.vectorize(lambda v: int(v) % bits, otypes=[object])(want) if want.size else want
        np.testing.assert_array_equal(got.astype(object) % bits if got.size else got, w)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=RTOL[dt], atol=ATOL[dt])


# -- dot_general: shape rule -----------------------------------------------------------

DOT = dict(lhs_batch=[], rhs_batch=[])


def test_dot_shape_rule_matmul_and_attention():
    assert types("dot_general", [("f32", ["B", "S", 768]), ("f32", [768, 3072])],
                 lhs_contract=[2], rhs_contract=[0], **DOT) == [
        TensorType.of("f32", ["B", "S", 3072])]
    q = ("bf16", ["B", 12, "S", 64])
    assert types("dot_general", [q, q], lhs_batch=[0, 1], rhs_batch=[0, 1], lhs_contract=[3],
                 rhs_contract=[3]) == [TensorType.of("bf16", ["B", 12, "S", "S"])]


def test_dot_shape_rule_orders_batch_then_lhs_free_then_rhs_free():
    # batch dims come in lhs_batch order, sized by the unified (static-preferred) dim
    assert types("dot_general", [("f32", [3, "B", 4, 5]), ("f32", [4, 6, 2, 3])],
                 lhs_batch=[1, 0], rhs_batch=[2, 3], lhs_contract=[2],
                 rhs_contract=[0]) == [TensorType.of("f32", [2, 3, 5, 6])]
    assert types("dot_general", [("i8", [3]), ("i8", [4])], lhs_contract=[], rhs_contract=[],
                 **DOT) == [TensorType.of("i8", [3, 4])]
    assert types("dot_general", [("f64", ["K"]), ("f64", ["K"])], lhs_contract=[0],
                 rhs_contract=[0], **DOT) == [TensorType.of("f64", [])]
    assert types("dot_general", [("f16", [0, 5]), ("f16", [5, 1])], lhs_contract=[1],
                 rhs_contract=[0], **DOT) == [TensorType.of("f16", [0, 1])]


def test_dot_facts():
    op = build("dot_general", [("f32", ["B", "S", "K"]), ("f32", [2, "K", "N"])],
               lhs_batch=[0], rhs_batch=[0], lhs_contract=[2], rhs_contract=[1])
    assert op.results[0].type == TensorType.of("f32", [2, "S", "N"])
    assert list(get_op("dot_general").facts(op)) == [Eq(as_expr("B"), as_expr(2))]
    op = build("dot_general", [("f32", ["M", "K1"]), ("f32", ["K2", "N"])], lhs_contract=[1],
               rhs_contract=[0], **DOT)
    assert list(get_op("dot_general").facts(op)) == [Eq(as_expr("K1"), as_expr("K2"))]


@pytest.mark.parametrize("lhs,rhs,attrs,match", [
    (("f32", [2, 3]), ("f32", [4, 5]), dict(lhs_contract=[1], rhs_contract=[0], **DOT),
     r"lhs_contract axis 1 of operand #0 'lhs' \(f32\[2, 3\]\) vs rhs_contract axis 0 of "
     r"operand #1 'rhs' \(f32\[4, 5\]\): dimension 3 does not match 4"),
    (("f32", [2, 3, 4]), ("f32", [5, 4, 6]), dict(lhs_batch=[0], rhs_batch=[0],
                                                   lhs_contract=[2], rhs_contract=[1]),
     r"lhs_batch axis 0 .* dimension 2 does not match 5"),
    (("f32", ["S", 3]), ("f32", ["S + 1", 3]), dict(lhs_batch=[0], rhs_batch=[0],
                                                     lhs_contract=[1], rhs_contract=[1]),
     r"lhs_batch axis 0 .*: dimension S does not match S \+ 1"),
    (("f32", [2, 3]), ("f32", [3, 5]), dict(lhs_contract=[2], rhs_contract=[0], **DOT),
     r"attribute lhs_contract=2 is out of range for rank 2"),
    (("f32", [3, 3]), ("f32", [3, 3]), dict(lhs_contract=[0, 0], rhs_contract=[0, 1], **DOT),
     r"attribute lhs_contract=\[0, 0\] repeats an axis"),
    (("f32", [3, 3]), ("f32", [3, 3]), dict(lhs_batch=[0], rhs_batch=[0], lhs_contract=[0],
                                             rhs_contract=[1]),
     r"axes \[0\] of lhs are both in lhs_batch and lhs_contract"),
    (("f32", [3, 3]), ("f32", [3, 3]), dict(lhs_contract=[1], rhs_contract=[], **DOT),
     r"attributes lhs_contract=\[1\] and rhs_contract=\[\] must have the same length"),
    (("f32", [3, 3]), ("f32", [3, 3]), dict(lhs_batch=[0], rhs_batch=[], lhs_contract=[1],
                                             rhs_contract=[0]),
     r"attributes lhs_batch=\[0\] and rhs_batch=\[\] must have the same length"),
    (("bool", [3, 3]), ("bool", [3, 3]), dict(lhs_contract=[1], rhs_contract=[0], **DOT),
     r"operand #0 'lhs' has dtype bool, expected a numeric dtype"),
    (("f32", [3, 3]), ("f16", [3, 3]), dict(lhs_contract=[1], rhs_contract=[0], **DOT),
     r"operand #1 'rhs' has dtype f16, expected f32"),
    (("f32", [3, 3]), ("f32", [3, 3]), dict(lhs_contract=[1], rhs_contract=[0]),
     r"missing required attribute 'lhs_batch'"),
])
def test_dot_verify_errors(lhs, rhs, attrs, match):
    with pytest.raises(VerifyError, match="^dot_general: .*" + match):
        types("dot_general", [lhs, rhs], **attrs)


def test_dot_interpret_error():
    # f32[M, K1] x f32[K2, N] verifies; K1 != K2 at run time is an InterpretError.
    with pytest.raises(InterpretError, match="dot_general: contracting axis 1 of lhs"):
        run("dot_general", [np.zeros((3, 4), np.float32), np.zeros((5, 2), np.float32)],
            lhs_contract=[1], rhs_contract=[0], **DOT)


# -- dot_general: numerics -------------------------------------------------------------

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def einsum_oracle(lhs, rhs, lb, rb, lc, rc):
    ll = list(LETTERS[:lhs.ndim])
    rl = list(LETTERS[lhs.ndim:lhs.ndim + rhs.ndim])
    for a, b in itertools.chain(zip(lb, rb, strict=True), zip(lc, rc, strict=True)):
        rl[b] = ll[a]
    out = ([ll[a] for a in lb] + [ll[i] for i in range(lhs.ndim) if i not in lb + lc]
           + [rl[i] for i in range(rhs.ndim) if i not in rb + rc])
    spec = f"{''.join(ll)},{''.join(rl)}->{''.join(out)}"
    a, b = exact(lhs), exact(rhs)
    if a.dtype == object and (a.size == 0 or b.size == 0):
        shape = np.einsum(spec, np.zeros(a.shape), np.zeros(b.shape)).shape
        return np.zeros(shape, object)
    return np.asarray(np.einsum(spec, a, b))


DOT_CASES = [  # lhs shape, rhs shape, lhs_batch, rhs_batch, lhs_contract, rhs_contract
    ((3, 5), (5, 4), [], [], [1], [0]),
    ((1, 1), (1, 1), [], [], [1], [0]),
    ((0, 5), (5, 3), [], [], [1], [0]),
    ((3, 0), (0, 4), [], [], [1], [0]),  # empty contraction: zeros
    ((2, 3, 5), (2, 5, 4), [0], [0], [2], [1]),
    ((3, 4, 5), (5, 4, 2), [], [], [1, 2], [1, 0]),
    ((3,), (4,), [], [], [], []),  # outer product
    ((7,), (7,), [], [], [0], [0]),  # vector dot: a scalar
    ((2, 3, 4), (3, 2, 4, 5), [0, 1], [1, 0], [2], [2]),
    ((5, 2, 1), (1, 3, 2), [1], [2], [2], [0]),
]


@pytest.mark.parametrize("dt", NUMERIC_DTYPES, ids=str)
def test_dot_numerics(dt):
    rng = np.random.default_rng(11)
    for ls, rs, lb, rb, lc, rc in DOT_CASES:
        lhs, rhs = rand(rng, ls, dt), rand(rng, rs, dt)
        (got,) = run("dot_general", [lhs, rhs], lhs_batch=lb, rhs_batch=rb, lhs_contract=lc,
                     rhs_contract=rc)
        assert_matches(got, einsum_oracle(lhs, rhs, lb, rb, lc, rc), dt)


def test_dot_half_accumulates_in_f32_and_ints_wrap():
    ones = np.ones((1, 4096), np.float16)
    (got,) = run("dot_general", [ones, ones.T.copy()], lhs_contract=[1], rhs_contract=[0], **DOT)
    assert got.dtype == np.float16 and got[0, 0] == 4096  # an f16 accumulator stops at 2048
    a = np.array([[100, 100]], np.int8)
    (got,) = run("dot_general", [a, a.T.copy()], lhs_contract=[1], rhs_contract=[0], **DOT)
    assert got[0, 0] == np.int8((20000 + 2**7) % 2**8 - 2**7)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_dot_hypothesis(data):
    nb, nc = data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))
    nlf, nrf = data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))
    dim = st.integers(0, 3)
    bs = [data.draw(dim) for _ in range(nb)]
    cs = [data.draw(dim) for _ in range(nc)]
    lperm = data.draw(st.permutations(range(nb + nc + nlf)))
    rperm = data.draw(st.permutations(range(nb + nc + nrf)))
    lshape = [0] * len(lperm)
    rshape = [0] * len(rperm)
    lb, lc, rb, rc = lperm[:nb], lperm[nb:nb + nc], rperm[:nb], rperm[nb:nb + nc]
    for i, a in enumerate(lb):
        lshape[a] = rshape[rb[i]] = bs[i]
    for i, a in enumerate(lc):
        lshape[a] = rshape[rc[i]] = cs[i]
    for a in lperm[nb + nc:]:
        lshape[a] = data.draw(dim)
    for a in rperm[nb + nc:]:
        rshape[a] = data.draw(dim)
    dt = data.draw(st.sampled_from(NUMERIC_DTYPES))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    lhs, rhs = rand(rng, tuple(lshape), dt), rand(rng, tuple(rshape), dt)
    attrs = dict(lhs_batch=lb, rhs_batch=rb, lhs_contract=lc, rhs_contract=rc)
    (t,) = types("dot_general", [(dt.short, lshape), (dt.short, rshape)], **attrs)
    (got,) = run("dot_general", [lhs, rhs], **attrs)
    assert tuple(d.value for d in t.shape) == got.shape
    assert_matches(got, einsum_oracle(lhs, rhs, lb, rb, lc, rc), dt)


# -- convolution: a naive oracle -------------------------------------------------------

def naive_conv(x, w, strides, pads, lds, rds, fgc=1, bgc=1):
    """x: (N, C, *S), w: (O, I, *K), canonical layouts, float64 or object arrays."""
    n, c = x.shape[:2]
    o, i = w.shape[:2]
    sp, ks = x.shape[2:], w.shape[2:]
    g = fgc * bgc
    nb, og = n // bgc, o // g
    out_sp = [((s - 1) * ld + 1 + lo + hi - ((k - 1) * rd + 1)) // st + 1
              for s, k, st, (lo, hi), ld, rd in zip(sp, ks, strides, pads, lds, rds,
                                                     strict=True)]
    out = np.zeros((nb, o, *out_sp), x.dtype)
    for oc in range(o):
        grp = oc // og
        for b in range(nb):
            bn = grp * nb + b if bgc > 1 else b
            c0 = grp * i if fgc > 1 else 0
            for pos in itertools.product(*(range(s) for s in out_sp)):
                acc = out[(b, oc) + pos]
                for tap in itertools.product(*(range(k) for k in ks)):
                    idx = []
                    for d in range(len(sp)):
                        q = pos[d] * strides[d] + tap[d] * rds[d] - pads[d][0]
                        if q < 0 or q > (sp[d] - 1) * lds[d] or q % lds[d]:
                            break
                        idx.append(q // lds[d])
                    else:
                        for ic in range(i):
                            acc = acc + x[(bn, c0 + ic) + tuple(idx)] * w[(oc, ic) + tap]
                out[(b, oc) + pos] = acc
    return out


def to_layout(a, canon, layout):
    return np.ascontiguousarray(a.transpose([canon.index(ch) for ch in layout]))


def run_conv(x, w, layouts, strides, pads, lds, rds, fgc=1, bgc=1):
    """x, w canonical (N, C, *spatial) / (O, I, *spatial), spatial in input_layout order."""
    il, kl, ol = layouts
    sp = "".join(ch for ch in il if ch in "DHW")
    (got,) = run("convolution", [to_layout(x, "NC" + sp, il), to_layout(w, "OI" + sp, kl)],
                 window_strides=strides, padding=pads, lhs_dilation=lds, rhs_dilation=rds,
                 feature_group_count=fgc, batch_group_count=bgc, input_layout=il,
                 kernel_layout=kl, output_layout=ol)
    want = naive_conv(exact(x), exact(w), strides, pads, lds, rds, fgc, bgc)
    return got, to_layout(want, "NC" + sp, ol)


CONV_CASES = [  # x shape, w shape (canonical), layouts, strides, pads, lds, rds, fgc, bgc
    ((2, 3, 7), (4, 3, 3), ("NCW", "OIW", "NCW"), [2], [[1, 2]], [1], [1], 1, 1),
    ((2, 3, 6, 5), (4, 3, 3, 2), ("NCHW", "OIHW", "NCHW"), [1, 2], [[1, 1], [0, 1]], [1, 1],
     [2, 1], 1, 1),
    ((2, 3, 6, 5), (4, 3, 3, 2), ("NHWC", "HWIO", "NHWC"), [1, 2], [[1, 1], [0, 1]], [1, 1],
     [2, 1], 1, 1),
    ((1, 2, 6, 7), (3, 2, 2, 3), ("NCHW", "OIHW", "NHWC"), [1, 1], [[-1, 0], [1, -2]],
     [1, 1], [1, 1], 1, 1),  # negative padding crops; output layout differs
    ((1, 2, 3, 4), (2, 2, 3, 3), ("NHWC", "OIHW", "NCHW"), [1, 1], [[2, 2], [1, 1]], [2, 3],
     [1, 1], 1, 1),  # lhs dilation (transposed convolution)
    ((2, 6, 5, 5), (6, 2, 3, 3), ("NCHW", "OIHW", "NCHW"), [1, 1], [[1, 1], [1, 1]], [1, 1],
     [1, 1], 3, 1),  # feature groups
    ((1, 4, 5, 4), (8, 1, 3, 3), ("NHWC", "HWIO", "NHWC"), [2, 1], [[1, 1], [0, 0]], [1, 1],
     [1, 2], 4, 1),  # depthwise with channel multiplier 2
    ((4, 3, 5, 5), (4, 3, 3, 3), ("NCHW", "OIHW", "NCHW"), [1, 1], [[0, 0], [0, 0]], [1, 1],
     [1, 1], 1, 2),  # batch groups
    ((1, 2, 4, 3, 5), (2, 2, 2, 2, 3), ("NCDHW", "OIDHW", "NCDHW"), [1, 2, 1],
     [[0, 1], [1, 0], [1, 1]], [1, 1, 2], [2, 1, 1], 1, 1),
    ((1, 2, 4, 3, 5), (2, 2, 2, 2, 3), ("NDHWC", "DHWIO", "NDHWC"), [2, 1, 2],
     [[1, 1], [0, 0], [2, 0]], [1, 2, 1], [1, 1, 2], 1, 1),
    ((2, 3, 4, 5), (2, 3, 2, 2), ("HWNC", "OHWI", "CHWN"), [1, 1], [[0, 0], [0, 0]], [1, 1],
     [1, 1], 1, 1),  # exotic layouts
    ((2, 3, 5, 4), (2, 3, 2, 2), ("NCWH", "OIWH", "NCWH"), [2, 1], [[0, 1], [0, 0]], [1, 1],
     [1, 1], 1, 1),  # spatial order follows input_layout: W first
    ((0, 3, 5), (2, 3, 2), ("NCW", "OIW", "NCW"), [1], [[0, 0]], [1], [1], 1, 1),  # N = 0
    ((2, 0, 5), (3, 0, 2), ("NCW", "OIW", "NCW"), [1], [[0, 0]], [1], [1], 1, 1),  # C = 0
    ((2, 3, 5), (0, 3, 2), ("NCW", "OIW", "NCW"), [1], [[0, 0]], [1], [1], 1, 1),  # O = 0
    ((1, 1, 1), (1, 1, 1), ("NCW", "OIW", "NCW"), [1], [[0, 0]], [1], [1], 1, 1),
    ((1, 2, 2), (1, 2, 3), ("NCW", "OIW", "NCW"), [1], [[0, 0]], [1], [1], 1, 1),  # out 0
    ((1, 2, 0), (1, 2, 2), ("NCW", "OIW", "NCW"), [1], [[1, 1]], [1], [1], 1, 1),  # in 0
    ((3, 5, 7), (5, 5, 3), ("NWC", "WIO", "NWC"), [3], [[2, 1]], [1], [2], 1, 1),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[2][0]}-{c[0]}")
def test_conv_numerics_f64(case):
    xs, ws, layouts, strides, pads, lds, rds, fgc, bgc = case
    rng = np.random.default_rng(3)
    x, w = rand(rng, xs, DType.F64), rand(rng, ws, DType.F64)
    got, want = run_conv(x, w, layouts, strides, pads, lds, rds, fgc, bgc)
    assert_matches(got, want, DType.F64)
    # and the shape rule agrees with the run
    sp = "".join(ch for ch in layouts[0] if ch in "DHW")
    xt, wt = to_layout(x, "NC" + sp, layouts[0]), to_layout(w, "OI" + sp, layouts[1])
    (t,) = types("convolution", [("f64", xt.shape), ("f64", wt.shape)],
                 window_strides=strides, padding=pads, lhs_dilation=lds, rhs_dilation=rds,
                 feature_group_count=fgc, batch_group_count=bgc, input_layout=layouts[0],
                 kernel_layout=layouts[1], output_layout=layouts[2])
    assert tuple(d.value for d in t.shape) == got.shape


@pytest.mark.parametrize("dt", NUMERIC_DTYPES, ids=str)
@pytest.mark.parametrize("case", [CONV_CASES[2], CONV_CASES[5], CONV_CASES[7]],
                         ids=["nhwc", "groups", "batch_groups"])
def test_conv_numerics_dtypes(dt, case):
    xs, ws, layouts, strides, pads, lds, rds, fgc, bgc = case
    rng = np.random.default_rng(5)
    x, w = rand(rng, xs, dt), rand(rng, ws, dt)
    got, want = run_conv(x, w, layouts, strides, pads, lds, rds, fgc, bgc)
    assert_matches(got, want, dt)


def test_conv_half_accumulates_in_f32():
    ones = np.ones((1, 4096, 1), np.float16)
    (got,) = run("convolution", [ones, ones], window_strides=[1], padding=[[0, 0]],
                 lhs_dilation=[1], rhs_dilation=[1], input_layout="NCW", kernel_layout="OIW",
                 output_layout="NCW")
    assert got.dtype == np.float16 and got.reshape(-1)[0] == 4096


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_conv_hypothesis(data):
    ns = data.draw(st.integers(1, 2))
    sp = [data.draw(st.integers(0, 5)) for _ in range(ns)]
    ks = [data.draw(st.integers(1, 3)) for _ in range(ns)]
    strides = [data.draw(st.integers(1, 3)) for _ in range(ns)]
    pads = [[data.draw(st.integers(-1, 2)), data.draw(st.integers(-1, 2))] for _ in range(ns)]
    lds = [data.draw(st.integers(1, 2)) for _ in range(ns)]
    rds = [data.draw(st.integers(1, 2)) for _ in range(ns)]
    groups = data.draw(st.sampled_from([(1, 1), (2, 1), (1, 2)]))
    fgc, bgc = groups
    n = data.draw(st.integers(0, 2)) * bgc
    i = data.draw(st.integers(0, 2))
    o = data.draw(st.integers(0, 2)) * fgc * bgc
    for s, k, stv, (lo, hi), ld, rd in zip(sp, ks, strides, pads, lds, rds, strict=True):
        assume(not (s == 0 and ld > 1))
        padded = ((s - 1) * ld + 1 if s else 0) + lo + hi
        assume(padded >= 0 and (padded - (k - 1) * rd - 1) // stv + 1 >= 0)
    letters = "HW"[:ns] if ns == 2 else "W"
    layouts = data.draw(st.sampled_from([
        ("NC" + letters, "OI" + letters, "NC" + letters),
        ("N" + letters + "C", letters + "IO", "N" + letters + "C")]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = rand(rng, (n, i * fgc, *sp), DType.F64)
    w = rand(rng, (o, i, *ks), DType.F64)
    got, want = run_conv(x, w, layouts, strides, pads, lds, rds, fgc, bgc)
    assert_matches(got, want, DType.F64)


# -- convolution: shape rule -----------------------------------------------------------

def conv_types(lhs, rhs, layouts=("NCHW", "OIHW", "NCHW"), **kw):
    ns = len(layouts[0]) - 2
    attrs = dict(window_strides=[1] * ns, padding=[[0, 0]] * ns, lhs_dilation=[1] * ns,
                 rhs_dilation=[1] * ns, input_layout=layouts[0], kernel_layout=layouts[1],
                 output_layout=layouts[2])
    attrs.update(kw)
    return types("convolution", [lhs, rhs], **attrs)


def test_conv_shape_rule_symbolic():
    nhwc = ("NHWC", "HWIO", "NHWC")
    assert conv_types(("f32", ["B", "H", "W", 3]), ("f32", [3, 3, 3, 16]), nhwc,
                      padding=[[1, 1], [1, 1]]) == [TensorType.of("f32", ["B", "H", "W", 16])]
    assert conv_types(("f32", ["B", "H", "W", 3]), ("f32", [3, 3, 3, 16]), nhwc,
                      window_strides=[2, 2], padding=[[1, 1], [1, 1]]) == [
        TensorType.of("f32", ["B", "floordiv(H + 1, 2)", "floordiv(W + 1, 2)", 16])]
    # valid padding, dilated kernel: H - (3 - 1) * 2
    assert conv_types(("bf16", ["B", 8, "H", "W"]), ("bf16", [4, 8, 3, 1]),
                      rhs_dilation=[2, 1]) == [TensorType.of("bf16", ["B", 4, "H - 4", "W"])]
    # transposed convolution: lhs_dilation 2 doubles the size
    assert conv_types(("f32", ["N", 4, "L"]), ("f32", [2, 4, 3]), ("NCW", "OIW", "NCW"),
                      lhs_dilation=[2], padding=[[1, 1]]) == [
        TensorType.of("f32", ["N", 2, "2*L - 1"])]
    # the kernel's spatial dims may be symbolic too
    assert conv_types(("f32", [1, 1, "H", 5]), ("f32", [1, 1, "K", 5])) == [
        TensorType.of("f32", [1, 1, "H - K + 1", 1])]


def test_conv_shape_rule_static_groups_and_3d():
    assert conv_types(("f32", [2, 32, 9, 9]), ("f32", [64, 1, 3, 3]),
                      feature_group_count=32, window_strides=[2, 2]) == [
        TensorType.of("f32", [2, 64, 4, 4])]
    assert conv_types(("f32", [4, 3, 5, 5]), ("f32", [6, 3, 3, 3]), batch_group_count=2) == [
        TensorType.of("f32", [2, 6, 3, 3])]
    assert conv_types(("f16", [1, 2, 4, 6, 8]), ("f16", [5, 2, 1, 3, 3]),
                      ("NCDHW", "OIDHW", "NDHWC"), window_strides=[1, 2, 3]) == [
        TensorType.of("f16", [1, 4, 2, 2, 5])]
    assert conv_types(("f32", ["N", 3, 2, 2]), ("f32", [1, 3, 3, 3])) == [
        TensorType.of("f32", ["N", 1, 0, 0])]  # window one past the input: empty output
    # symbolic batch with batch groups: N // 2
    assert conv_types(("f32", ["N", 3, 5, 5]), ("f32", [6, 3, 3, 3]), batch_group_count=2) == [
        TensorType.of("f32", ["floordiv(N, 2)", 6, 3, 3])]


def test_conv_facts():
    conv = get_op("convolution")
    attrs = dict(window_strides=[1, 1], padding=[[0, 0]] * 2, lhs_dilation=[1, 1],
                 rhs_dilation=[1, 1], input_layout="NCHW", kernel_layout="OIHW",
                 output_layout="NCHW")
    op = build("convolution", [("f32", ["N", "C", 5, 5]), ("f32", [16, 3, 3, 3])], **attrs)
    assert list(conv.facts(op)) == [Eq(as_expr("C"), as_expr(3))]
    op = build("convolution", [("f32", ["N", "C", 5, 5]), ("f32", ["O", "I", 3, 3])],
               feature_group_count=4, **attrs)
    assert op.results[0].type == TensorType.of("f32", ["N", "O", 3, 3])
    assert list(conv.facts(op)) == [Eq(as_expr("C"), as_expr("4*I")), Divisible(as_expr("O"), 4)]
    op = build("convolution", [("f32", ["N", 3, 5, 5]), ("f32", [4, 3, 3, 3])],
               batch_group_count=2, **attrs)
    assert list(conv.facts(op)) == [Divisible(as_expr("N"), 2)]


BASE = dict(window_strides=[1, 1], padding=[[0, 0], [0, 0]], lhs_dilation=[1, 1],
            rhs_dilation=[1, 1], input_layout="NCHW", kernel_layout="OIHW",
            output_layout="NCHW")


@pytest.mark.parametrize("lhs,rhs,over,match", [
    (("f32", [1, 3, 5, 5]), ("f32", [4, 3, 3, 3]), dict(input_layout="NCHX"),
     r"attribute input_layout='NCHX' must hold N and C once each"),
    (("f32", [1, 3, 5, 5]), ("f32", [4, 3, 3, 3]), dict(kernel_layout="OHWW"),
     r"attribute kernel_layout='OHWW' must hold O and I"),
    (("f32", [1, 3, 5, 5]), ("f32", [4, 3, 3, 3]), dict(output_layout="NC"),
     r"attribute output_layout='NC' must have 1 to 3 spatial dims"),
    (("f32", [1, 3, 5, 5]), ("f32", [4, 3, 3, 3]), dict(kernel_layout="OIDW"),
     r"must use the same spatial letters"),
    (("f32", [1, 3, 5]), ("f32", [4, 3, 3, 3]), {},
     r"operand #0 'lhs' \(f32\[1, 3, 5\]\) has rank 3, expected 4"),
    (("f32", [1, 3, 5, 5]), ("f32", [4, 3, 3]), {},
     r"operand #1 'rhs' \(f32\[4, 3, 3\]\) has rank 3, expected 4"),
    (("f32", [1, 3, 5, 5]), ("f32", [4, 3, 3, 3]), dict(window_strides=[1]),
     r"attribute window_strides has 1 entries, expected one per spatial dim \(2\)"),
    (("f32", [1, 3, 5, 5]), ("f32", [4, 3, 3, 3]), dict(padding=[[0, 0]]),
     r"attribute padding has 1 entries"),
    (("f32", [1, 3, 5, 5]), ("f32", [4, 3, 3, 3]), dict(window_strides=[0, 1]),
     r"attribute window_strides=\[0, 1\] must be >= 1"),
    (("f32", [1, 3, 5, 5]), ("f32", [4, 3, 3, 3]), dict(rhs_dilation=[1, 0]),
     r"attribute rhs_dilation=\[1, 0\] must be >= 1"),
    (("f32", [2, 4, 5, 5]), ("f32", [4, 2, 3, 3]),
     dict(feature_group_count=2, batch_group_count=2), r"at most one may exceed 1"),
    (("f32", [1, 3, 5, 5]), ("f32", [4, 3, 3, 3]), dict(feature_group_count=0),
     r"feature_group_count=0 and batch_group_count=1 must be >= 1"),
    (("f32", [1, 3, 5, 5]), ("f32", [4, 2, 3, 3]), {},
     r"input features of operand #0 'lhs' .* dimension 3 does not match 2"),
    (("f32", [1, 6, 5, 5]), ("f32", [4, 2, 3, 3]), dict(feature_group_count=2),
     r"dimension 6 does not match 4"),
    (("f32", [1, 5, 5, 5]), ("f32", [4, 1, 3, 3]), dict(feature_group_count=2),
     r"operand #0 'lhs' .* has 5 input features, not a multiple of feature_group_count=2"),
    (("f32", [1, 4, 5, 5]), ("f32", [3, 2, 3, 3]), dict(feature_group_count=2),
     r"operand #1 'rhs' .* has 3 output features, not a multiple of feature_group_count=2"),
    (("f32", [3, 4, 5, 5]), ("f32", [4, 4, 3, 3]), dict(batch_group_count=2),
     r"operand #0 'lhs' .* has batch 3, not a multiple of batch_group_count=2"),
    (("f32", [4, 4, 5, 5]), ("f32", [3, 4, 3, 3]), dict(batch_group_count=2),
     r"has 3 output features, not a multiple of batch_group_count=2"),
    (("f32", [1, 3, 2, 5]), ("f32", [4, 3, 4, 3]), {},
     r"spatial dim H: the window \(kernel 4, rhs_dilation=1\) does not fit the padded input"),
    (("f32", [1, 3, 5, 5]), ("f32", [4, 3, 3, 3]), dict(padding=[[-3, -3], [0, 0]]),
     r"spatial dim H: the window"),
    (("f32", [1, 3, 5, 5]), ("f32", [4, 3, 0, 3]), {},
     r"operand #1 'rhs' .* has an empty spatial dim H"),
    (("f32", [1, 3, 0, 5]), ("f32", [4, 3, 1, 3]), dict(lhs_dilation=[2, 1]),
     r"operand #0 'lhs' .* has an empty spatial dim H, unsupported with lhs_dilation=2"),
    (("bool", [1, 3, 5, 5]), ("bool", [4, 3, 3, 3]), {},
     r"operand #0 'lhs' has dtype bool, expected a numeric dtype"),
    (("f32", [1, 3, 5, 5]), ("bf16", [4, 3, 3, 3]), {},
     r"operand #1 'rhs' has dtype bf16, expected f32"),
])
def test_conv_verify_errors(lhs, rhs, over, match):
    with pytest.raises(VerifyError, match="^convolution: .*" + match):
        types("convolution", [lhs, rhs], **{**BASE, **over})


def test_conv_interpret_errors():
    # f32[N, C, H, W] with a 3x3 kernel and no padding: H = 2 at run time has no window
    x = np.zeros((1, 1, 1, 2), np.float32)
    w = np.zeros((1, 1, 3, 3), np.float32)
    with pytest.raises(InterpretError, match="convolution: spatial dim H: the window"):
        run("convolution", [x, w], **BASE)
    with pytest.raises(InterpretError, match="convolution: input .* do not fit"):
        run("convolution", [np.zeros((1, 2, 4, 4), np.float32), w], **BASE)
    with pytest.raises(InterpretError, match="lhs_dilation=2"):
        run("convolution", [np.zeros((1, 1, 0, 4), np.float32), np.zeros((1, 1, 1, 1),
                                                                          np.float32)],
            **{**BASE, "lhs_dilation": [2, 1]})

