"""The fused attention ops: shape rule and verifier, the reference against an independent
float64 computation (row by row; the gradient against finite differences of the forward),
and the native kernels against it on shapes never seen at compile time (S = 1, odd, not a
multiple of the kernels' blocks, Sk != Sq, empty batch, no keys), both dtypes, masks that
broadcast, causal, fully masked rows; one compilation across all of them."""

from __future__ import annotations

import numpy as np
import pytest
from op_testing import T, V, build

from disc_core import Compiler, GraphBuilder, interpret
from disc_core.opdef import Env, VerifyError, get_op
from disc_runtime import CompileCache

NP = {"f32": np.float32, "f64": np.float64}


# -- shape rule and verifier -------------------------------------------------------------

def test_shape_rule_static_and_symbolic():
    out = get_op("attention").result_types(
        [T("f32", ["B", "H", "S", 16]), T("f32", ["B", "H", "T", 16]),
         T("f32", ["B", "H", "T", 8]), T("f32", ["B", 1, 1, "T"])],
        get_op("attention").normalize_attrs({"scale": 0.25}))
    assert [str(t) for t in out] == ["f32[B, H, S, 8]", "f32[B, H, S]"]
    op = get_op("attention")
    out = op.result_types([T("f64", [3, 5, 4]), T("f64", [3, 7, 4]), T("f64", [3, 7, 2])],
                          op.normalize_attrs({}))
    assert [str(t) for t in out] == ["f64[3, 5, 2]", "f64[3, 5]"]
    grads = get_op("attention_grad").result_types(
        [T("f32", ["B", "S", "D"]), T("f32", ["B", "T", "D"]), T("f32", ["B", "T", "E"]),
         T("f32", ["B", "S", "E"]), T("f32", ["B", "S", "E"]), T("f32", ["B", "S"])],
        get_op("attention_grad").normalize_attrs({"causal": True}))
    assert [str(t) for t in grads] == ["f32[B, S, D]", "f32[B, T, D]", "f32[B, T, E]"]


@pytest.mark.parametrize("types, message", [
    ((("f32", [2, 5, 4]), ("f32", [2, 7, 3]), ("f32", [2, 7, 4])), "head dim"),
    ((("f32", [2, 5, 4]), ("f32", [3, 7, 4]), ("f32", [3, 7, 4])), "batch dim 0"),
    ((("f32", [2, 5, 4]), ("f32", [2, 7, 4]), ("f32", [2, 6, 4])), "key length"),
    ((("i32", [2, 5, 4]), ("i32", [2, 7, 4]), ("i32", [2, 7, 4])), "dtype"),
    ((("f32", [4]), ("f32", [4]), ("f32", [4])), "rank >= 2"),
    ((("f32", [2, 5, 4]), ("f32", [2, 7, 4]), ("f32", [2, 7, 4]), ("f32", [2, 5, 6])),
     "dim 2 of the mask"),
    ((("f32", [2, 5, 4]), ("f32", [2, 7, 4]), ("f32", [2, 7, 4]), ("f64", [1, 1, 7])),
     "dtype"),
])
def test_verifier_names_what_is_wrong(types, message):
    with pytest.raises(VerifyError, match=message):
        build("attention", *(V(d, s) for d, s in types), scale=1.0)


# -- the reference against an independent computation -----------------------------------

def _rows(q, k, v, mask, scale, causal):
    """softmax(q kᵀ scale + mask) v one row at a time, float64, torch's conventions."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    lead = q.shape[:-2]
    out = np.zeros(lead + (q.shape[-2], v.shape[-1]))
    lse = np.zeros(lead + (q.shape[-2],))
    m = None if mask is None else np.broadcast_to(
        np.asarray(mask, np.float64), lead + (q.shape[-2], k.shape[-2]))
    for idx in np.ndindex(*lead, q.shape[-2]):
        b, i = idx[:-1], idx[-1]
        s = np.array([float(q[b][i] @ k[b][j]) * scale for j in range(k.shape[-2])])
        if m is not None:
            s = s + m[b][i]
        if causal:
            s[i + 1:] = -np.inf
        if s.size and np.max(s) > -np.inf:
            w = np.exp(s - np.max(s))
            out[b][i] = (w / w.sum()) @ v[b]
            lse[b][i] = np.log(w.sum()) + np.max(s)
    return out, lse


def _inputs(shape_q, sk, dv, dtype, seed=0, mask_shape=None, masked_rows=()):
    rng = np.random.default_rng(seed)
    *lead, sq, d = shape_q
    q = rng.standard_normal(shape_q).astype(dtype)
    k = rng.standard_normal((*lead, sk, d)).astype(dtype)
    v = rng.standard_normal((*lead, sk, dv)).astype(dtype)
    mask = None
    if mask_shape is not None:
        mask = np.where(rng.random(mask_shape) < 0.25, -np.inf, rng.standard_normal(mask_shape)
                        ).astype(dtype)
        for r in masked_rows:
            mask[..., r, :] = -np.inf
    return q, k, v, mask


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mask_shape", [None, (2, 1, 1, 6), (1, 1, 5, 6)])
def test_reference_matches_row_by_row_softmax(causal, mask_shape):
    q, k, v, mask = _inputs((2, 3, 5, 4), 6, 3, np.float64, mask_shape=mask_shape,
                            masked_rows=(1,) if mask_shape and mask_shape[2] > 1 else ())
    inputs = [q, k, v] + ([mask] if mask is not None else [])
    attrs = get_op("attention").normalize_attrs({"scale": 0.7, "causal": causal})
    out, lse = get_op("attention").run(inputs, attrs, Env())
    want_out, want_lse = _rows(q, k, v, mask, 0.7, causal)
    np.testing.assert_allclose(out, want_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-12, atol=1e-12)


def test_reference_default_scale_and_nan_rows():
    q, k, v, mask = _inputs((1, 4, 8), 3, 2, np.float64, mask_shape=(1, 4, 3), masked_rows=(2,))
    op = get_op("attention")
    out, _ = op.run([q, k, v, mask], op.normalize_attrs({"rsqrt_head_dim": True,
                                                         "empty_rows": "nan"}), Env())
    want, _ = _rows(q, k, v, mask, 1 / np.sqrt(8), False)
    assert np.isnan(out[0, 2]).all()
    rows = [0, 1, 3]
    np.testing.assert_allclose(out[0, rows], want[0, rows], rtol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_reference_gradient_matches_finite_differences(causal):
    q, k, v, mask = _inputs((2, 4, 3), 5, 2, np.float64, seed=3, mask_shape=(1, 1, 5))
    mask = np.where(np.isinf(mask), -np.inf, 0.0)
    fwd, bwd = get_op("attention"), get_op("attention_grad")
    attrs = {"scale": 0.6, "causal": causal}
    fa = fwd.normalize_attrs(attrs)
    do = np.random.default_rng(4).standard_normal((2, 4, 2))

    def loss(q_, k_, v_):
        return float((fwd.run([q_, k_, v_, mask], fa, Env())[0] * do).sum())

    out, lse = fwd.run([q, k, v, mask], fa, Env())
    grads = bwd.run([q, k, v, out, do, lse, mask], bwd.normalize_attrs(attrs), Env())
    eps = 1e-6
    for n, x in enumerate((q, k, v)):
        num = np.zeros_like(x)
        for idx in np.ndindex(*x.shape):
            args = [q.copy(), k.copy(), v.copy()]
            args[n][idx] += eps
            hi = loss(*args)
            args[n][idx] -= 2 * eps
            num[idx] = (hi - loss(*args)) / (2 * eps)
        np.testing.assert_allclose(grads[n], num, rtol=1e-6, atol=1e-8)


# -- the native kernels -------------------------------------------------------------------

@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    return Compiler(CompileCache(tmp_path_factory.mktemp("attn")), target="native")


def _graph(dt, mask_dims, causal, symbolic_head, scale_attrs):
    b = GraphBuilder()
    d = "D" if symbolic_head else 16
    q = b.input("q", dt, ["B", "H", "S", d])
    k = b.input("k", dt, ["B", "H", "T", d])
    v = b.input("v", dt, ["B", "H", "T", "E"])
    do = b.input("do", dt, ["B", "H", "S", "E"])
    extra = [b.input("m", dt, mask_dims)] if mask_dims is not None else []
    out, lse = b.op("attention", q, k, v, *extra, causal=causal, **scale_attrs)
    grads = b.op("attention_grad", q, k, v, out, do, lse, *extra, causal=causal,
                 **scale_attrs)
    return b.build(out, lse, *grads)


SHAPES = [  # B, H, S, T, E (head dim 16 unless symbolic)
    (2, 3, 5, 7, 16), (1, 2, 1, 1, 8), (2, 2, 130, 130, 16), (1, 1, 257, 100, 5),
    (1, 2, 64, 300, 16), (0, 2, 3, 3, 16), (2, 1, 9, 0, 16), (3, 1, 17, 33, 1),
    (1, 1, 600, 530, 4),  # across the forward's 512-key blocks, causal rows past them
    (4, 8, 200, 77, 16),  # heads enough for the forward's double query blocks (no causal)
]


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("mask_dims, causal", [
    (None, False), (None, True), (["B", 1, 1, "T"], False), ([1, 1, "S", "T"], True),
    (["B", "H", "S", "T"], False)])
def test_native_matches_reference_on_unseen_shapes(compiler, dt, mask_dims, causal):
    symbolic_head = mask_dims is None and not causal
    scale = {"rsqrt_head_dim": True} if causal else {"scale": 0.3}
    g = _graph(dt, mask_dims, causal, symbolic_head, scale)
    before = compiler.stats.compiles
    exe = compiler.compile(g)
    assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
    tol = 2e-5 if dt == "f32" else 1e-12
    rng = np.random.default_rng(1)
    for B, H, S, Tk, E in SHAPES:
        D = 16 if not symbolic_head else 24
        size = {"B": B, "H": H, "S": S, "T": Tk}
        q, k, v, _ = _inputs((B, H, S, D), Tk, E, NP[dt], seed=S + Tk)
        do = rng.standard_normal((B, H, S, E)).astype(NP[dt])
        inputs = [q, k, v, do]
        if mask_dims is not None:
            shape = tuple(size.get(x, x) if isinstance(x, str) else x for x in mask_dims)
            m = np.where(rng.random(shape) < 0.3, -np.inf, rng.standard_normal(shape))
            if S > 2 and shape[2] > 1:
                m[..., 2, :] = -np.inf  # a fully masked row
            inputs.append(m.astype(NP[dt]))
        got = exe.run(inputs)
        want = interpret(g, inputs)
        for n, (a, w) in enumerate(zip(got, want)):
            assert a.shape == w.shape and a.dtype == w.dtype
            scale_ = max(1.0, float(np.abs(w).max())) if w.size else 1.0
            np.testing.assert_allclose(a, w, rtol=tol, atol=tol * scale_,
                                       err_msg=f"output {n} at {(B, H, S, Tk, E)}")
    # every shape ran on the one compilation
    assert compiler.stats.compiles - before <= 1


def test_native_rejects_a_mask_dim_that_neither_matches_nor_broadcasts(compiler):
    b = GraphBuilder()
    q = b.input("q", "f32", ["B", "S", 4])
    k = b.input("k", "f32", ["B", "T", 4])
    v = b.input("v", "f32", ["B", "T", 4])
    m = b.input("m", "f32", ["M", 1, "T"])
    out, _ = b.op("attention", q, k, v, m, scale=1.0)
    exe = compiler.compile(b.build(out))
    ok = [np.ones((2, 3, 4), np.float32), np.ones((2, 5, 4), np.float32),
          np.ones((2, 5, 4), np.float32)]
    exe.run(ok + [np.zeros((1, 1, 5), np.float32)])
    exe.run(ok + [np.zeros((2, 1, 5), np.float32)])
    with pytest.raises(Exception, match="mask dim 0 is 3, expected 1 or 2"):
        exe.run(ok + [np.zeros((3, 1, 5), np.float32)])


def _padding_mask(shape, lead, tail, dtype):
    """An additive mask that is -inf over the first lead[b] and last tail[b] keys of
    batch b (key padding on either side) and random finite values between."""
    m = np.random.default_rng(5).standard_normal(shape)
    for b, (lo, hi) in enumerate(zip(lead, tail)):
        m[b, ..., :lo] = -np.inf
        if hi:
            m[b, ..., -hi:] = -np.inf
    return m.astype(dtype)


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("rows", [1, "S"])
def test_native_skips_padded_keys_with_the_same_results(compiler, dt, causal, rows):
    """Keys a mask leaves -inf for every row (padding at the head or tail, a whole batch
    padded out) are skipped by the kernels (csrc/attention.c, disc_attn_keys): outputs,
    logsumexp and gradients (zero for the skipped keys) still match the reference, for a
    mask broadcast over the query rows and one given per row, on both sides of the
    forward's 512-key blocks and the backward's 128-key blocks."""
    g = _graph(dt, ["B", 1, rows, "T"], causal, False, {"scale": 0.25})
    exe = compiler.compile(g)
    assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
    tol = 2e-5 if dt == "f32" else 1e-12
    rng = np.random.default_rng(2)
    # B = 4: no padding, a head and a tail, all keys padded out, a tail past a block edge
    for S, Tk, lead, tail in [(7, 9, (0, 2, 9, 0), (0, 3, 0, 4)),
                              (150, 600, (0, 100, 600, 0), (0, 30, 0, 470)),
                              (600, 600, (0, 513, 600, 0), (0, 0, 0, 129))]:
        q, k, v, _ = _inputs((4, 2, S, 16), Tk, 16, NP[dt], seed=S)
        do = rng.standard_normal((4, 2, S, 16)).astype(NP[dt])
        m = _padding_mask((4, 1, S if rows == "S" else 1, Tk), lead, tail, NP[dt])
        if rows == "S":
            m[0, 0, 3, :] = -np.inf  # one fully masked row: the others keep every key
        inputs = [q, k, v, do, m]
        got = exe.run(inputs)
        want = interpret(g, inputs)
        for n, (a, w) in enumerate(zip(got, want)):
            scale_ = max(1.0, float(np.abs(w).max())) if w.size else 1.0
            np.testing.assert_allclose(a, w, rtol=tol, atol=tol * scale_,
                                       err_msg=f"output {n} at S={S}, T={Tk}")
        dk, dv = got[3], got[4]
        assert not dk[2].any() and not dv[2].any()  # the padded-out batch
        assert not dk[1, :, :100 if Tk == 600 else 2].any()


@pytest.fixture
def omp_threads():
    """Sets the OpenMP team size of this thread's next parallel regions (libgomp, which the
    native modules use), restoring it after."""
    import ctypes

    gomp = ctypes.CDLL("libgomp.so.1")
    previous = gomp.omp_get_max_threads()
    yield gomp.omp_set_num_threads
    gomp.omp_set_num_threads(previous)


@pytest.mark.parametrize("causal", [False, True])
def test_native_backward_with_fewer_heads_than_threads(compiler, omp_threads, causal):
    """Fewer heads than threads: the backward's tasks are (head, key block) and dQ is summed
    over per-thread copies (csrc/attention.c, split). Gradients match the reference with 1
    to 3 heads on 4 and 7 threads, key lengths across the 128-key blocks, and a padding
    mask whose -inf tail the tasks clip."""
    g = _graph("f32", ["B", 1, 1, "T"], causal, False, {"scale": 0.25})
    exe = compiler.compile(g)
    assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
    rng = np.random.default_rng(9)
    for threads in (4, 7):
        omp_threads(threads)
        for B, H, S, Tk in [(1, 1, 300, 300), (1, 3, 200, 450), (2, 1, 129, 129),
                            (1, 2, 40, 700)]:
            q, k, v, _ = _inputs((B, H, S, 16), Tk, 16, np.float32, seed=S + Tk)
            do = rng.standard_normal((B, H, S, 16)).astype(np.float32)
            m = _padding_mask((B, 1, 1, Tk), [0] * B, [0] + [Tk // 3] * (B - 1), np.float32)
            if B == 1:
                m[0, ..., -Tk // 4:] = -np.inf
            inputs = [q, k, v, do, m]
            got = exe.run(inputs)
            want = interpret(g, inputs)
            for n, (a, w) in enumerate(zip(got, want)):
                scale_ = max(1.0, float(np.abs(w).max()))
                np.testing.assert_allclose(a, w, rtol=2e-5, atol=2e-5 * scale_,
                                           err_msg=f"output {n} at {(B, H, S, Tk)}, "
                                                   f"{threads} threads")
