"""Convolution gradients (GraphBuilder.conv_input_grad / conv_filter_grad) and the general
native convolution lowering they need: lhs dilation (interior padding), batch groups, a
symbolic kernel with a static result. Checked against an independent numpy scatter-loop
implementation of the gradients, through the interpreter and natively."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, interpret
from disc_runtime import CompileCache

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    return Compiler(CompileCache(tmp_path_factory.mktemp("cache")), target="native")


def conv_grads(x, w, dy, stride, pad, dil, groups):
    """dx and dw of ``y = conv(x, w)`` (layouts NC... and OI...) for the upstream ``dy``:
    every kernel tap scatters ``dy`` back into the strided input positions it read."""
    n, i = x.shape[0], w.shape[1]
    og = w.shape[0] // groups
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [tuple(p) for p in pad])
    dxp, dw = np.zeros_like(xp), np.zeros(w.shape, np.float64)
    outs = dy.shape[2:]
    for g in range(groups):
        dyg = dy[:, g * og:(g + 1) * og].astype(np.float64)
        for tap in itertools.product(*(range(k) for k in w.shape[2:])):
            sl = tuple(slice(t * d, t * d + (o - 1) * s + 1, s)
                       for t, d, s, o in zip(tap, dil, stride, outs))
            xs = xp[(slice(None), slice(g * i, (g + 1) * i)) + sl]
            wt = w[(slice(g * og, (g + 1) * og), slice(None)) + tap].astype(np.float64)
            dw[(slice(g * og, (g + 1) * og), slice(None)) + tap] += np.einsum(
                "nfp,nip->fi", dyg.reshape(n, og, -1), xs.reshape(n, i, -1))
            dxp[(slice(None), slice(g * i, (g + 1) * i)) + sl] += np.einsum(
                "nf...,fi->ni...", dyg, wt)
    crop = tuple(slice(p[0], p[0] + h) for p, h in zip(pad, x.shape[2:]))
    return dxp[(slice(None), slice(None)) + crop], dw


def out_size(h, k, s, p, d):
    return (h + p[0] + p[1] - (k - 1) * d - 1) // s + 1


def grad_graph(ns, c, o, k, stride, pad, dil, groups, *, symbolic=True, static_hw=None):
    sp = "DHW"[3 - ns:]
    b = GraphBuilder("conv_grads")
    n = b.symbol("N") if symbolic else 2
    sizes = [b.symbol(ch) for ch in sp] if symbolic else list(static_hw)
    x = b.input("x", "f32", [n, c, *sizes])
    w = b.input("w", "f32", [o, c // groups, *[k] * ns])
    kw = dict(window_strides=stride, padding=pad, rhs_dilation=dil, feature_group_count=groups,
              input_layout="NC" + sp, kernel_layout="OI" + sp, output_layout="NC" + sp)
    y = b.convolution(x, w, lhs_dilation=[1] * ns, batch_group_count=1,
                      **{key: v for key, v in kw.items() if key != "feature_group_count"},
                      feature_group_count=groups)
    dy = b.input("dy", "f32", list(y.shape))
    dx = b.conv_input_grad(dy, w, x.shape, **kw)
    dw = b.conv_filter_grad(x, dy, w.shape, **kw)
    assert dx.type == x.type and dw.type == w.type, (dx.type, dw.type)
    return b.build(dx, dw)


def run_case(compiler, ns, c, o, k, stride, pad, dil, groups, shapes, symbolic=True):
    graphs = {}
    for n, hw in shapes:
        key = None if symbolic else hw
        if key not in graphs:
            graphs[key] = grad_graph(ns, c, o, k, stride, pad, dil, groups,
                                     symbolic=symbolic, static_hw=hw)
        g = graphs[key]
        exe = compiler.compile(g)
        assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
        xs = RNG.standard_normal((n, c, *hw)).astype(np.float32)
        ws = RNG.standard_normal((o, c // groups, *[k] * ns)).astype(np.float32)
        outs = [out_size(h, k, s, p, d) for h, s, p, d in zip(hw, stride, pad, dil)]
        dys = RNG.standard_normal((n, o, *outs)).astype(np.float32)
        want = conv_grads(xs, ws, dys, stride, pad, dil, groups)
        for got in (interpret(g, [xs, ws, dys]), exe.run([xs, ws, dys])):
            for gv, wv in zip(got, want):
                assert gv.shape == wv.shape
                np.testing.assert_allclose(gv, wv, rtol=1e-4, atol=1e-4)
    return exe


CASES = [  # ns, c, o, k, stride, pad, dil, groups
    (2, 4, 6, 3, [1, 1], [[1, 1], [1, 1]], [1, 1], 1),
    (2, 4, 6, 3, [2, 2], [[1, 1], [1, 1]], [1, 1], 1),
    (2, 4, 6, 3, [2, 1], [[0, 0], [2, 2]], [2, 1], 2),
    (2, 4, 4, 3, [1, 2], [[1, 1], [0, 1]], [1, 1], 4),  # depthwise, asymmetric padding
    (2, 3, 5, 1, [3, 3], [[2, 2], [1, 1]], [1, 1], 1),  # padding beyond the kernel extent
    (2, 2, 3, 3, [1, 1], [[3, 3], [0, 0]], [1, 1], 1),  # windows wholly inside the padding
    (1, 4, 6, 3, [3], [[1, 1]], [1], 1),
    (3, 4, 6, 2, [2, 1, 1], [[1, 1], [0, 0], [1, 1]], [1, 1, 2], 2),
]


@pytest.mark.parametrize("ns, c, o, k, stride, pad, dil, groups", CASES)
def test_conv_grads_symbolic_shapes(compiler, ns, c, o, k, stride, pad, dil, groups) -> None:
    """One compile for every batch and spatial size (odd, size 1 batch, unseen sizes)."""
    shapes = [(2, (9, 10, 11)[:ns]), (1, (8, 7, 9)[:ns]), (3, (12, 13, 8)[:ns]),
              (1, (7, 7, 7)[:ns])]
    exe = run_case(compiler, ns, c, o, k, stride, pad, dil, groups, shapes)
    assert exe.artifact.metadata["native"]["needs_blas"]


@pytest.mark.parametrize("ns, c, o, k, stride, pad, dil, groups", CASES[:4])
def test_conv_grads_static_shapes(compiler, ns, c, o, k, stride, pad, dil, groups) -> None:
    """Static sizes: the strided walk's remainder is known, so it folds into the padding."""
    run_case(compiler, ns, c, o, k, stride, pad, dil, groups,
             [(2, (9, 10, 11)[:ns]), (2, (6, 5, 4)[:ns])], symbolic=False)


def test_gradients_are_convolutions_xla_style() -> None:
    """dx: dy dilated by the stride, at stride 1; dw: feature groups become batch groups."""
    g = grad_graph(2, 4, 6, 3, [2, 2], [[1, 1], [1, 1]], [1, 1], 2)
    convs = [op for op in g.ops if op.name == "convolution"]
    assert sorted(list(op.attrs["lhs_dilation"]) for op in convs) == [[1, 1], [1, 1], [2, 2]]
    dw = g.outputs[1].producer
    assert dw.name == "convolution" and dw.attrs["batch_group_count"] == 2
    assert list(dw.attrs["rhs_dilation"]) == [2, 2]


# -- the general native convolution lowering, against the interpreter ------------------------

def check(compiler, g, inputs, rtol=1e-4, atol=1e-4):
    exe = compiler.compile(g)
    assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
    for got, want in zip(exe.run(inputs), interpret(g, inputs)):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return exe


@pytest.mark.parametrize("low, high, interior", [
    ([1, -2], [2, 3], [2, 1]),
    ([0, 0], [0, 0], [1, 3]),
    ([-1, 2], [-2, 0], [3, 0]),
])
def test_interior_padding_natively(compiler, low, high, interior) -> None:
    """An interior-padded read: out index i holds element (i - low) / (interior + 1) where
    that divides exactly and is in range, else the padding value."""
    b = GraphBuilder("interior")
    N, M = b.symbol("N"), b.symbol("M")
    x = b.input("x", "f32", [N, M])
    p = b.pad(b.exp(x), b.constant(np.float32(-7)), low=low, high=high, interior=interior)
    g = b.build(b.tanh(p))
    for shape in [(3, 6), (1, 1), (4, 9), (2, 2), (5, 3)]:
        if any(lo + hi + d + (d - 1) * it < 0
               for lo, hi, it, d in zip(low, high, interior, shape)):
            continue
        check(compiler, g, [RNG.standard_normal(shape).astype(np.float32)])


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_convolution_with_lhs_dilation_and_strides(compiler, dtype) -> None:
    """lhs_dilation together with a window stride > 1 and negative padding: the general
    im2col path over the interior-padded input."""
    b = GraphBuilder("dilated")
    N, H = b.symbol("N"), b.symbol("H")
    x = b.input("x", dtype, [N, H, 7, 3])  # NHWC
    w = b.input("w", dtype, [3, 2, 3, 5])  # HWIO
    y = b.convolution(x, w, window_strides=[2, 1], padding=[[1, -1], [2, 0]],
                      lhs_dilation=[3, 2], rhs_dilation=[1, 2], input_layout="NHWC",
                      kernel_layout="HWIO", output_layout="NCHW")
    g = b.build(y)
    npt = np.float32 if dtype == "f32" else np.float64
    for n, h in [(2, 5), (1, 1), (3, 8)]:
        check(compiler, g, [RNG.standard_normal((n, h, 7, 3)).astype(npt),
                            RNG.standard_normal((3, 2, 3, 5)).astype(npt)])


def test_convolution_with_batch_groups_and_symbolic_kernel(compiler, monkeypatch) -> None:
    """A symbolic kernel size with a static result (the filter-gradient shape), iterated
    over result positions, with batch groups: one GEMM per group."""
    monkeypatch.setenv("DISC_ONEDNN_CONV", "0")  # the im2col lowering, even with oneDNN
    b = GraphBuilder("bgc")
    B, K = b.symbol("B"), b.symbol("K")
    x = b.input("x", "f32", [4, B, K])  # N=4 (two batch groups of 2), C=B, W=K
    w = b.input("w", "f32", [6, B, K])  # O=6, I=B, kernel K
    y = b.convolution(x, w, window_strides=[2], padding=[[1, 2]], lhs_dilation=[1],
                      rhs_dilation=[1], batch_group_count=2, input_layout="NCW",
                      kernel_layout="OIW", output_layout="NCW")
    assert [d.value for d in y.shape] == [2, 6, 2]  # floordiv(K + 3 - K, 2) + 1
    g = b.build(y)
    for bb, k in [(3, 10), (1, 1), (5, 13)]:
        exe = check(compiler, g, [RNG.standard_normal((4, bb, k)).astype(np.float32),
                                  RNG.standard_normal((6, bb, k)).astype(np.float32)])
    assert exe.artifact.metadata["native"]["fusion"]["librarycall"] == 2


def test_patch_matrix_is_one_gather_for_symbolic_kernel_and_result(compiler, monkeypatch) -> None:
    """Kernel and result extents both symbolic: the patch matrix is one gather whose
    indices are iota arithmetic (no per-tap slices and no concatenation to copy)."""
    monkeypatch.setenv("DISC_ONEDNN_CONV", "0")  # the im2col lowering, even with oneDNN
    b = GraphBuilder("symk")
    N, W, K = b.symbol("N"), b.symbol("W"), b.symbol("K")
    x = b.input("x", "f32", [N, 3, W])
    w = b.input("w", "f32", [4, 3, K])
    y = b.convolution(x, w, window_strides=[2], padding=[[1, 1]], lhs_dilation=[1],
                      rhs_dilation=[2], input_layout="NCW", kernel_layout="OIW",
                      output_layout="NCW")
    g = b.build(y)
    for n, wd, k in [(2, 9, 3), (1, 1, 1), (3, 20, 5), (0, 6, 2)]:
        exe = check(compiler, g, [RNG.standard_normal((n, 3, wd)).astype(np.float32),
                                  RNG.standard_normal((4, 3, k)).astype(np.float32)])
    ops = [k["ops"] for k in exe.artifact.metadata["native"]["kernels"]]
    assert sum("gather" in o for o in ops) == 1, ops
    assert not any("concatenate" in o or "slice" in o for o in ops), ops  # groups: slices


@pytest.mark.parametrize("dims, kernel, dilation, padding, groups, layouts", [
    # the input gradient of a 3x3 stride-2 conv (padding 1): four phases of 1-2 taps each
    (2, (3, 3), (2, 2), [[1, 2], [1, 2]], 1, ("NCHW", "OIHW", "NCHW")),
    # a 1x1 stride-2 conv's input gradient: three of four phases have no taps (zeros)
    (2, (1, 1), (2, 2), [[0, 1], [0, 1]], 1, ("NCHW", "OIHW", "NCHW")),
    # a transposed conv: stride 3 in one dim only, kernel longer than the stride,
    # channels last, feature groups
    (2, (5, 2), (3, 1), [[4, 4], [1, 0]], 2, ("NHWC", "HWIO", "NHWC")),
    # negative padding (cropping) and 1-D
    (1, (4,), (2,), [[-1, 2]], 1, ("NCW", "OIW", "NCW")),
    # 3-D, mixed strides
    (3, (3, 2, 3), (2, 1, 3), [[2, 1], [1, 1], [0, 2]], 1, ("NCDHW", "OIDHW", "NCDHW")),
])
def test_input_dilation_splits_into_one_convolution_per_phase(
        compiler, dims, kernel, dilation, padding, groups, layouts, monkeypatch) -> None:
    """A convolution of an input dilated by s (a strided conv's input gradient, a
    transposed conv) is computed as s**dims ordinary convolutions, one per output phase,
    that skip the dilation's zeros: one GEMM per phase with taps, none for a phase
    without. Symbolic spatial sizes, sizes 1 and odd, checked against the interpreter."""
    monkeypatch.setenv("DISC_ONEDNN_CONV", "0")  # the im2col lowering, even with oneDNN
    il, kl, ol = layouts
    b = GraphBuilder("phases")
    sp = [ch for ch in il if ch not in "NC"]
    syms = {ch: b.symbol(ch) for ch in sp}
    c, o = 2 * groups, 3 * groups
    in_dims = {"N": b.symbol("N"), "C": c, **syms}
    k_dims = {"O": o, "I": c // groups, **dict(zip(sp, kernel))}
    x = b.input("x", "f32", [in_dims[ch] for ch in il])
    w = b.input("w", "f32", [k_dims[ch] for ch in kl])
    y = b.convolution(x, w, window_strides=[1] * dims, padding=padding,
                      lhs_dilation=list(dilation), rhs_dilation=[1] * dims,
                      feature_group_count=groups, input_layout=il, kernel_layout=kl,
                      output_layout=ol)
    g = b.build(b.mul(y, y))
    for n, sizes in [(2, (5, 4, 3)), (1, (1, 1, 1)), (3, (6, 7, 2)), (1, (2, 2, 2))]:
        if any((h - 1) * s + 1 + lo + hi - k + 1 < 0  # the window must fit
               for h, s, (lo, hi), k in zip(sizes, dilation, padding, kernel)):
            continue
        shape = {"N": n, "C": c, **dict(zip(sp, sizes))}
        exe = check(compiler, g, [RNG.standard_normal([shape[ch] for ch in il])
                                  .astype(np.float32),
                                  RNG.standard_normal([k_dims[ch] for ch in kl])
                                  .astype(np.float32)])
    phases_with_taps = 1
    for k, s, (low, _) in zip(kernel, dilation, padding):
        phases_with_taps *= sum(1 for p in range(s) if (low - p) % s < k)
    calls = exe.artifact.metadata["native"]["fusion"].get("librarycall", 0)
    assert calls == phases_with_taps * groups, (calls, phases_with_taps)
