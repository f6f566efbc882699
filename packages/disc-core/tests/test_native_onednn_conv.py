"""Convolutions through oneDNN's primitives (native/onednn_conv.py, csrc/onednn_conv.c):
forward with the bias add and ReLU folded in as post-ops, input and filter gradients, any
layout, groups, strides, dilation; checked against the reference interpreter on shapes of
one compilation each, including empty and unit sizes. Skipped where oneDNN is not
installed (the core's own environment): there the im2col lowering runs, which
test_conv_grad.py and test_native_gemm_epilogue.py cover."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, interpret, jit
from disc_core.native.lower import backend_lowering
from disc_core.native.onednn_conv import onednn_conv_library
from disc_runtime import CompileCache
from disc_runtime.abi import MODULE_FILE
from disc_runtime.native import module_load_path

pytestmark = pytest.mark.skipif(onednn_conv_library() is None,
                                reason="oneDNN not installed (disc-runtime[onednn])")
RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    return Compiler(CompileCache(tmp_path_factory.mktemp("cache")), target="native")


def lowered_ops(g) -> list[str]:
    h = g.clone()
    backend_lowering().run(h)
    return [op.name for op in h.ops]


def check(compiler, g, inputs, rtol=2e-4, atol=2e-4):
    exe = compiler.compile(g)
    assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
    for got, want in zip(exe.run(inputs), interpret(g, inputs), strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return exe


def conv_bias_relu(c: int, o: int, k: int, stride: int, pad: int, dil: int, groups: int,
                   relu: bool = True, layouts=("NCHW", "OIHW", "NCHW")):
    il, kl, ol = layouts
    b = GraphBuilder("cbr")
    N, H, W = b.symbol("N"), b.symbol("H"), b.symbol("W")
    dims = {"N": N, "C": c, "H": H, "W": W}
    x = b.input("x", "f32", [dims[ch] for ch in il])
    kd = {"O": o, "I": c // groups, "H": k, "W": k}
    w = b.input("w", "f32", [kd[ch] for ch in kl])
    bias = b.input("bias", "f32", [o])
    y = b.convolution(x, w, window_strides=[stride] * 2, padding=[[pad, pad]] * 2,
                      lhs_dilation=[1, 1], rhs_dilation=[dil] * 2,
                      feature_group_count=groups, batch_group_count=1, input_layout=il,
                      kernel_layout=kl, output_layout=ol)
    y = b.add(y, b.broadcast_in_dim(bias, shape=list(y.shape),
                                    broadcast_dimensions=[ol.index("C")]))
    if relu:
        y = b.max(y, b.full(0.0, "f32", list(y.shape)))
    return b.build(y)


@pytest.mark.parametrize("c, o, k, stride, pad, dil, groups", [
    (32, 32, 3, 1, 1, 1, 1),   # the benchmark's row
    (3, 16, 7, 2, 3, 1, 1),    # a CNN stem
    (16, 24, 1, 1, 0, 1, 1),   # pointwise
    (16, 8, 1, 2, 0, 1, 1),    # strided 1x1 (negative right padding inside oneDNN)
    (8, 16, 3, 1, 2, 2, 4),    # dilated, grouped
    (8, 8, 3, 2, 1, 1, 8),     # depthwise, strided
    (32, 16, 3, 2, 1, 1, 1),   # channel-blocked activations (multiples of 16), strided
    (32, 64, 3, 1, 1, 1, 2),   # channel-blocked, grouped
    (16, 16, 3, 1, 1, 1, 16),  # channel-blocked, depthwise
    (24, 40, 3, 2, 1, 1, 1),   # multiples of 8, not 16: nChw8c on AVX2, oneDNN's own with AVX-512
    (24, 24, 3, 1, 1, 1, 24),  # the same, depthwise
])
def test_forward_with_bias_and_relu_is_one_primitive(compiler, c, o, k, stride, pad, dil,
                                                     groups) -> None:
    g = conv_bias_relu(c, o, k, stride, pad, dil, groups)
    assert lowered_ops(g) == ["fused_convolution"]  # bias add and ReLU folded in
    exe = None
    for n, h, w in [(2, 9, 11), (1, 1, 1), (3, 16, 16), (0, 5, 5), (2, 0, 4), (1, 33, 7)]:
        if (h + 2 * pad - dil * (k - 1) - 1) < 0 or (w + 2 * pad - dil * (k - 1) - 1) < 0:
            continue  # the window does not fit: an error in the frameworks too
        x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
        wt = RNG.standard_normal((o, c // groups, k, k)).astype(np.float32)
        bias = RNG.standard_normal(o).astype(np.float32)
        exe = check(compiler, g, [x, wt, bias])
    assert exe is not None and compiler.stats.compiles >= 1
    assert exe.artifact.metadata["native"]["fusion"] == {"librarycall": 1}


def test_one_compilation_serves_every_shape(tmp_path) -> None:
    g = conv_bias_relu(4, 6, 3, 1, 1, 1, 1)
    fn = jit(g, cache=CompileCache(tmp_path))
    for n, h, w in [(1, 5, 5), (2, 8, 3), (4, 17, 9), (1, 2, 30)]:
        inputs = [RNG.standard_normal((n, 4, h, w)).astype(np.float32),
                  RNG.standard_normal((6, 4, 3, 3)).astype(np.float32),
                  RNG.standard_normal(6).astype(np.float32)]
        np.testing.assert_allclose(fn(*inputs)[0], interpret(g, inputs)[0], rtol=2e-4,
                                   atol=2e-4)
    assert fn.stats.compiles == 1


def test_other_layouts_are_read_through_their_strides(compiler) -> None:
    """NHWC input and output, HWIO kernel (TensorFlow's layouts): no transposes."""
    g = conv_bias_relu(5, 7, 3, 2, 1, 1, 1, layouts=("NHWC", "HWIO", "NHWC"))
    assert lowered_ops(g) == ["fused_convolution"]
    for n, h, w in [(2, 9, 6), (1, 1, 1)]:
        check(compiler, g, [RNG.standard_normal((n, h, w, 5)).astype(np.float32),
                            RNG.standard_normal((3, 3, 5, 7)).astype(np.float32),
                            RNG.standard_normal(7).astype(np.float32)])


def test_relu_stays_apart_when_its_input_is_also_used(compiler) -> None:
    """The pre-activation is returned too (a training forward saves it): only the bias is
    folded, the ReLU runs as a kernel over the convolution's output."""
    b = GraphBuilder("two_uses")
    N, H = b.symbol("N"), b.symbol("H")
    x = b.input("x", "f32", [N, 3, H, H])
    w = b.input("w", "f32", [4, 3, 3, 3])
    y = b.convolution(x, w, window_strides=[1, 1], padding=[[1, 1], [1, 1]],
                      lhs_dilation=[1, 1], rhs_dilation=[1, 1], feature_group_count=1,
                      batch_group_count=1, input_layout="NCHW", kernel_layout="OIHW",
                      output_layout="NCHW")
    r = b.max(y, b.full(0.0, "f32", list(y.shape)))
    g = b.build(y, r)
    ops = lowered_ops(g)
    assert ops.count("fused_convolution") == 1 and "max" in ops
    check(compiler, g, [RNG.standard_normal((2, 3, 6, 6)).astype(np.float32),
                        RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)])


@pytest.mark.parametrize("stride, pad, dil, groups", [(1, 1, 1, 1), (2, 1, 1, 1),
                                                      (1, 2, 2, 2), (2, 0, 1, 1)])
def test_gradients_run_in_onednn(compiler, stride, pad, dil, groups) -> None:
    """The input gradient (a forward convolution of the flipped kernel; a strided one
    oneDNN's backward-data primitive) and the filter gradient (XLA's form: batch and
    features swapped, a kernel of the output's run-time size: oneDNN's backward-weights
    primitive)."""
    b = GraphBuilder("grads")
    N, H, W = b.symbol("N"), b.symbol("H"), b.symbol("W")
    c, o, k = 4, 6, 3
    x = b.input("x", "f32", [N, c, H, W])
    w = b.input("w", "f32", [o, c // groups, k, k])
    kw = dict(window_strides=[stride] * 2, padding=[[pad, pad]] * 2, rhs_dilation=[dil] * 2,
              feature_group_count=groups, input_layout="NCHW", kernel_layout="OIHW",
              output_layout="NCHW")
    y = b.convolution(x, w, lhs_dilation=[1, 1], batch_group_count=1, **kw)
    dy = b.input("dy", "f32", list(y.shape))
    dx = b.conv_input_grad(dy, w, x.shape, **kw)
    dw = b.conv_filter_grad(x, dy, w.shape, **kw)
    g = b.build(dx, dw)
    h = g.clone()
    backend_lowering().run(h)
    convs = [op for op in h.ops if op.name == "fused_convolution"]
    assert len(convs) == 2 and "gather" not in [op.name for op in h.ops]  # no im2col left
    # a strided input gradient: one backward-data primitive over the unreversed kernel,
    # not one convolution per phase of the stride's input dilation
    assert [op.attrs["flip_kernel"] for op in convs].count(True) == int(stride > 1)
    out = lambda n: (n + 2 * pad - dil * (k - 1) - 1) // stride + 1  # noqa: E731
    for n, h, wd in [(2, 8, 9), (1, 5, 5), (3, 12, 7)]:
        check(compiler, g, [RNG.standard_normal((n, c, h, wd)).astype(np.float32),
                            RNG.standard_normal((o, c // groups, k, k)).astype(np.float32),
                            RNG.standard_normal((n, o, out(h), out(wd))).astype(np.float32)],
              rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("stride, pad, k", [(2, 1, 3), (2, 0, 3), (3, 1, 2), (2, 2, 5)])
def test_run_time_edge_pads_fold_into_the_calls(compiler, stride, pad, k) -> None:
    """A strided convolution's gradients cut or zero-extend by the remainder of the window
    walk, which depends on the run-time size: a ``pad`` with a symbolic edge on the filter
    gradient's input and on the input gradient's result. Both fold into the oneDNN calls
    (``lhs_high`` / ``out_high``), so no pass over memory is left; every size parity, the
    smallest sizes and a rectangular image are checked against the interpreter."""
    b = GraphBuilder("edges")
    N, H, W = b.symbol("N"), b.symbol("H"), b.symbol("W")
    c, o = 3, 5
    x = b.input("x", "f32", [N, c, H, W])
    w = b.input("w", "f32", [o, c, k, k])
    kw = dict(window_strides=[stride] * 2, padding=[[pad, pad]] * 2, rhs_dilation=[1, 1],
              feature_group_count=1, input_layout="NCHW", kernel_layout="OIHW",
              output_layout="NCHW")
    y = b.convolution(x, w, lhs_dilation=[1, 1], batch_group_count=1, **kw)
    dy = b.input("dy", "f32", list(y.shape))
    g = b.build(b.conv_input_grad(dy, w, x.shape, **kw), b.conv_filter_grad(x, dy, w.shape, **kw))
    assert "pad" in [op.name for op in g.ops]  # the edges are there before lowering
    ops = lowered_ops(g)
    assert ops.count("fused_convolution") == 2 and "pad" not in ops, ops
    out = lambda n: (n + 2 * pad - k) // stride + 1  # noqa: E731
    for n, h, wd in [(2, 8, 9), (1, 9, 8), (3, 12, 13), (1, k, k), (2, k + 1, 2 * k + 3)]:
        check(compiler, g, [RNG.standard_normal((n, c, h, wd)).astype(np.float32),
                            RNG.standard_normal((o, c, k, k)).astype(np.float32),
                            RNG.standard_normal((n, o, out(h), out(wd))).astype(np.float32)],
              rtol=1e-3, atol=1e-3)


def test_a_zero_edge_pad_before_a_forward_convolution_folds(compiler) -> None:
    """A forward convolution (bias and ReLU fused) of an input zero-padded at its high
    edges by a run-time amount, positive or negative (a cut), reads the unpadded input."""
    b = GraphBuilder("padded_forward")
    N, H, W = b.symbol("N"), b.symbol("H"), b.symbol("W")
    x = b.input("x", "f32", [N, 4, H, W])
    w = b.input("w", "f32", [8, 4, 3, 3])
    bias = b.input("bias", "f32", [8])
    even = lambda d: 2 * (d // 2) - d + 1  # noqa: E731  (1 for even d, 0 for odd)
    xp = b.pad(x, b.constant(np.zeros((), np.float32)), low=[0, 0, 0, 0],
               high=[0, 0, even(H), even(W) - 1], interior=[0, 0, 0, 0])
    y = b.convolution(xp, w, window_strides=[2, 2], padding=[[1, 1], [1, 1]],
                      lhs_dilation=[1, 1], rhs_dilation=[1, 1], feature_group_count=1,
                      batch_group_count=1, input_layout="NCHW", kernel_layout="OIHW",
                      output_layout="NCHW")
    y = b.add(y, b.broadcast_in_dim(bias, shape=list(y.shape), broadcast_dimensions=[1]))
    y = b.max(y, b.full(0.0, "f32", list(y.shape)))
    g = b.build(y)
    ops = lowered_ops(g)
    assert ops.count("fused_convolution") == 1 and "pad" not in ops, ops
    for n, h, wd in [(2, 8, 9), (1, 7, 6), (1, 1, 2), (3, 16, 16)]:
        check(compiler, g, [RNG.standard_normal((n, 4, h, wd)).astype(np.float32),
                            RNG.standard_normal((8, 4, 3, 3)).astype(np.float32),
                            RNG.standard_normal(8).astype(np.float32)])


def test_f64_and_the_option_keep_the_im2col_lowering(monkeypatch) -> None:
    """oneDNN's CPU engine has no f64 convolution; DISC_ONEDNN_CONV=0 turns it off."""
    b = GraphBuilder("f64")
    N = b.symbol("N")
    x = b.input("x", "f64", [N, 2, 5, 5])
    w = b.input("w", "f64", [3, 2, 3, 3])
    y = b.convolution(x, w, window_strides=[1, 1], padding=[[1, 1], [1, 1]],
                      lhs_dilation=[1, 1], rhs_dilation=[1, 1], feature_group_count=1,
                      batch_group_count=1, input_layout="NCHW", kernel_layout="OIHW",
                      output_layout="NCHW")
    assert "fused_convolution" not in lowered_ops(b.build(y))
    g = conv_bias_relu(4, 6, 3, 1, 1, 1, 1)
    monkeypatch.setenv("DISC_ONEDNN_CONV", "0")
    assert "fused_convolution" not in lowered_ops(g)


def test_tiny_images_with_strides_and_uneven_padding(compiler) -> None:
    """A forward convolution whose kernel outgrows its result on a tiny image is tried as
    oneDNN's backward-weights form first; with a stride and uneven padding oneDNN finds that
    form inconsistent, and the forward primitive runs instead (a 2x2 image here failed the
    call). Input gradients of the same convolution read every position they can reach."""
    b = GraphBuilder("tiny")
    N, H, W = b.symbol("N"), b.symbol("H"), b.symbol("W")
    x = b.input("x", "f32", [N, H, W, 3])
    w = b.input("w", "f32", [3, 3, 3, 4])
    kw = dict(window_strides=[1, 2], padding=[[1, 2], [2, 0]], rhs_dilation=[1, 1],
              feature_group_count=1, input_layout="NHWC", kernel_layout="HWIO",
              output_layout="NHWC")
    y = b.convolution(x, w, lhs_dilation=[1, 1], batch_group_count=1, **kw)
    dy = b.input("dy", "f32", list(y.shape))
    g = b.build(y, b.conv_input_grad(dy, w, x.shape, **kw))
    assert "gather" not in lowered_ops(g)
    for n, h, wd in [(1, 2, 2), (1, 1, 1), (2, 9, 7), (3, 6, 8), (1, 10, 3), (1, 3, 6)]:
        oh, ow = h + 1, (wd + 2 - 3) // 2 + 1
        check(compiler, g, [RNG.standard_normal((n, h, wd, 3)).astype(np.float32),
                            RNG.standard_normal((3, 3, 3, 4)).astype(np.float32),
                            RNG.standard_normal((n, oh, ow, 4)).astype(np.float32)])


def primitive_counts(exe) -> tuple[int, int]:
    """(convolution primitives made, problems oneDNN rejected) in ``exe``'s module (the
    loaded one: dlopen by the same name returns it)."""
    lib = ctypes.CDLL(module_load_path(exe.artifact.path(MODULE_FILE)))
    out = (ctypes.c_int64 * 2)()
    lib.disc_dnnl_counts(out)
    return out[0], out[1]


def tiny_strided_conv():
    """(graph, inputs): a strided, unevenly padded convolution on a 2x2 image, whose
    kernel outgrows its result (tried first as oneDNN's backward-weights form)."""
    b = GraphBuilder("rejected")
    N, H, W = b.symbol("N"), b.symbol("H"), b.symbol("W")
    x = b.input("x", "f32", [N, H, W, 3])
    w = b.input("w", "f32", [3, 3, 3, 4])
    y = b.convolution(x, w, window_strides=[1, 2], padding=[[1, 2], [2, 0]],
                      rhs_dilation=[1, 1], feature_group_count=1, input_layout="NHWC",
                      kernel_layout="HWIO", output_layout="NHWC", lhs_dilation=[1, 1],
                      batch_group_count=1)
    return b.build(y), [RNG.standard_normal((1, 2, 2, 3)).astype(np.float32),
                        RNG.standard_normal((3, 3, 3, 4)).astype(np.float32)]


def run_tiny_strided_conv(compiler, made_and_rejected: tuple[int, int]) -> None:
    """Four calls of tiny_strided_conv, each checked; the module's (primitives made,
    problems rejected) are ``made_and_rejected`` after the first and after the last."""
    g, inputs = tiny_strided_conv()
    exe = check(compiler, g, inputs)
    assert primitive_counts(exe) == made_and_rejected
    for _ in range(3):
        check(compiler, g, inputs)
    assert primitive_counts(exe) == made_and_rejected


def test_a_tiny_image_runs_in_the_backward_weights_form_made_once(compiler) -> None:
    """A forward convolution on a 2x2 image with a stride and uneven padding is tried first
    as oneDNN's backward-weights form (its kernel outgrows its result). oneDNN used to
    reject that form here (a negative right padding: the input's last column is unread);
    the call now describes only the part the windows read, so the first form runs, and
    later calls reuse the primitive. (Rejected problems are still cached as such; none of
    the shapes tried here is rejected any more.)"""
    run_tiny_strided_conv(compiler, made_and_rejected=(1, 0))


def test_a_rejected_problem_is_cached_and_its_other_form_runs(tmp_path, monkeypatch) -> None:
    """When oneDNN rejects a problem (here: a module built with -DDISC_DNNL_REJECT_KIND=1,
    which makes every backward-weights primitive fail to build), the rejection is cached:
    the tiny image's backward-weights form is tried once, the forward form runs and is made
    once, and later calls try neither again. Results match the interpreter throughout."""
    from disc_core.native import toolchain

    monkeypatch.setattr(toolchain, "FLAGS", (*toolchain.FLAGS, "-DDISC_DNNL_REJECT_KIND=1"))
    compiler = Compiler(CompileCache(tmp_path / "cache"), target="native")
    run_tiny_strided_conv(compiler, made_and_rejected=(1, 1))


@pytest.mark.parametrize("nsp", [1, 3])
def test_channel_blocked_layouts_in_one_and_three_dims(compiler, nsp) -> None:
    """Channel-blocked activations (nCw16c/nCdhw16c, nCw8c/nCdhw8c on AVX2) in 1 and 3 dims."""
    b = GraphBuilder(f"blocked{nsp}")
    sp = "DHW"[3 - nsp:]
    dims = [b.symbol("N"), 16] + [b.symbol(ch) for ch in sp]
    x = b.input("x", "f32", dims)
    w = b.input("w", "f32", [32, 16] + [3] * nsp)
    bias = b.input("bias", "f32", [32])
    y = b.convolution(x, w, window_strides=[1] * nsp, padding=[[1, 1]] * nsp,
                      lhs_dilation=[1] * nsp, rhs_dilation=[1] * nsp, feature_group_count=1,
                      batch_group_count=1, input_layout="NC" + sp, kernel_layout="OI" + sp,
                      output_layout="NC" + sp)
    y = b.add(y, b.broadcast_in_dim(bias, shape=list(y.shape), broadcast_dimensions=[1]))
    g = b.build(b.max(y, b.full(0.0, "f32", list(y.shape))))
    assert lowered_ops(g) == ["fused_convolution"]
    for n, s in [(2, 7), (1, 1), (3, 4)]:
        check(compiler, g, [RNG.standard_normal((n, 16) + (s,) * nsp).astype(np.float32),
                            RNG.standard_normal((32, 16) + (3,) * nsp).astype(np.float32),
                            RNG.standard_normal(32).astype(np.float32)])


def test_concurrent_calls_of_one_problem(compiler) -> None:
    """Calls of one problem from several threads at once: one of them uses the cache
    entry's memory objects, the others their own; every result is right."""
    g = conv_bias_relu(32, 32, 3, 1, 1, 1, 1)
    exe = compiler.compile(g)
    inputs = [[RNG.standard_normal((2, 32, 12, 10)).astype(np.float32),
               RNG.standard_normal((32, 32, 3, 3)).astype(np.float32),
               RNG.standard_normal(32).astype(np.float32)] for _ in range(4)]
    want = [interpret(g, a)[0] for a in inputs]
    errors: list[str] = []

    def worker(i: int) -> None:
        for _ in range(25):
            got = exe.run(inputs[i])[0]
            if not np.allclose(got, want[i], rtol=2e-4, atol=2e-4):
                errors.append(f"thread {i}: max error {np.abs(got - want[i]).max()}")
                return

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_modules_link_one_helper_object_and_keep_their_own_primitive_caches(
        tmp_path, monkeypatch) -> None:
    """The oneDNN helper is compiled once into an object every convolution module links
    (native/helper_objects.py); each module still has its own primitive cache and counts
    (the object's static state is copied into each module)."""
    from disc_core.native import helper_objects

    monkeypatch.setenv("DISC_CACHE_DIR", str(tmp_path / "objects"))
    monkeypatch.setattr(helper_objects, "_MEMORY", {})
    compiler = Compiler(CompileCache(tmp_path / "cache"), target="native")
    graphs = [conv_bias_relu(4, 6, 3, 1, 1, 1, 1), conv_bias_relu(3, 5, 1, 2, 0, 1, 1)]
    exes = [compiler.compile(g) for g in graphs]
    assert [e.artifact.metadata["native"]["helper_units"] for e in exes] == [1, 1]
    assert len(list((tmp_path / "objects" / helper_objects.LAYOUT).glob("*.o"))) == 1
    for exe, g, (c, o, k) in zip(exes, graphs, [(4, 6, 3), (3, 5, 1)]):
        inputs = [RNG.standard_normal((2, c, 7, 6)).astype(np.float32),
                  RNG.standard_normal((o, c, k, k)).astype(np.float32),
                  RNG.standard_normal(o).astype(np.float32)]
        np.testing.assert_allclose(exe.run(inputs)[0], interpret(g, inputs)[0], rtol=2e-4,
                                   atol=2e-4)
    assert primitive_counts(exes[0]) == (1, 0) and primitive_counts(exes[1]) == (1, 0)

