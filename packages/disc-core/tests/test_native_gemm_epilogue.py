"""GEMM epilogues (native/gemm_epilogue.py, csrc/gemm.c): the kernel that consumes a GEMM's
output runs on each block of rows the GEMM helper computes. Checked against the reference
interpreter on shapes never seen at compile time (empty, 1, odd, large), f32 and f64,
every transpose layout, batched GEMMs, row kernels (softmax) as epilogues, implicit
broadcasts, and convolutions (one GEMM per image, bias and ReLU fused); the plans show the
fusion, the counters which path ran, and one compilation serves every shape."""

from __future__ import annotations

import math

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, interpret, jit
from disc_core.native import fusion_count, launch_counts
from disc_runtime import CompileCache

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
RNG = np.random.default_rng(24)


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    return Compiler(CompileCache(tmp_path_factory.mktemp("cache")), target="native")


def randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def check(exe, graph, inputs, tol):
    got = exe.run(inputs)
    want = interpret(graph, inputs)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol,
                                   atol=tol)


def plan(exe) -> dict:
    return exe.artifact.metadata["native"]["fusion"]


def counters(exe, inputs) -> dict[str, int]:
    module = exe._run_fn.module
    counts = np.zeros(module.num_counters, np.int64)
    module.run([np.asarray(a) for a in inputs], counters=counts)
    names = exe.artifact.metadata["native"]["counters"]
    return {n: int(c) for n, c in zip(names, counts) if c}


def activation(b: GraphBuilder, h, kind: str, shape, dt: str):
    """GELU (erf and tanh forms), SiLU or ReLU of ``h``, from core primitives."""
    def c(v):
        return b.full(v, dt, shape)

    if kind == "relu":
        return b.max(h, c(0.0))
    if kind == "silu":
        return b.div(h, b.add(c(1.0), b.exp(b.neg(h))))
    if kind == "gelu":
        return b.mul(b.mul(h, c(0.5)), b.add(c(1.0), b.erf(b.mul(h, c(1 / math.sqrt(2))))))
    inner = b.mul(c(math.sqrt(2 / math.pi)), b.add(h, b.mul(c(0.044715), b.mul(h, b.mul(h, h)))))
    return b.mul(b.mul(h, c(0.5)), b.add(c(1.0), b.tanh(inner)))


def linear(kind: str, dt: str = "f32", *, k: int = 48, n: int = 40, residual: bool = True,
           ta: bool = False, tb: bool = False):
    """act(x @ w + bias) (+ residual) over [B, S, n], B and S symbolic."""
    b = GraphBuilder(f"linear_{kind}")
    B, S = b.symbol("B"), b.symbol("S")
    x = b.input("x", dt, [B, S, k])
    w = b.input("w", dt, [n, k] if tb else [k, n])
    bias = b.input("bias", dt, [n])
    if ta:  # x enters transposed: [k, B*S] contracted over its dim 0
        xt = b.input("xt", dt, [k, B * S])
        y = b.dot_general(xt, w, lhs_batch=[], rhs_batch=[], lhs_contract=[0],
                          rhs_contract=[1 if tb else 0])
        y = b.reshape(y, shape=[B, S, n])
    else:
        y = b.dot_general(x, w, lhs_batch=[], rhs_batch=[], lhs_contract=[2],
                          rhs_contract=[1 if tb else 0])
    shape = [B, S, n]
    h = b.add(y, b.broadcast_in_dim(bias, shape=shape, broadcast_dimensions=[2]))
    out = activation(b, h, kind, shape, dt)
    if residual:
        out = b.add(out, b.input("res", dt, shape))
    return b.build(out)


SHAPES = [(1, 1), (2, 3), (3, 77), (0, 5), (4, 0), (8, 300)]


@pytest.mark.parametrize("kind", ["gelu", "gelu_tanh", "silu", "relu"])
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_linear_bias_activation_residual(tmp_path, kind, dt) -> None:
    np_dt = np.float32 if dt == "f32" else np.float64
    g = linear(kind, dt)
    fn = jit(g, cache=CompileCache(tmp_path))
    exe = None
    for bsz, s in SHAPES:
        ins = [randn(bsz, s, 48, dtype=np_dt), randn(48, 40, dtype=np_dt),
               randn(40, dtype=np_dt), randn(bsz, s, 40, dtype=np_dt)]
        got = fn(*ins)
        want = interpret(g, ins)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4 if dt == "f32" else 1e-10,
                                   atol=1e-4 if dt == "f32" else 1e-10)
    assert fn.stats.compiles == 1  # one compilation for every shape of the rank
    exe = Compiler(CompileCache(tmp_path), target="native").compile(g)
    # the whole chain after the GEMM runs inside it: no kernel of its own
    assert plan(exe) == {"librarycall": 1, "gemm_epilogue": 1}
    native = exe.artifact.metadata["native"]
    # the epilogue is generated code, counted as a kernel, and a fusion (with the GEMM)
    assert launch_counts(native) == (1, 1)
    assert fusion_count(native) == 1


@pytest.mark.parametrize("ta,tb", [(False, True), (True, False), (True, True)])
def test_transposed_operands(compiler, ta, tb) -> None:
    g = linear("relu", ta=ta, tb=tb)
    exe = compiler.compile(g)
    assert plan(exe).get("gemm_epilogue") == 1
    for bsz, s in [(1, 1), (3, 5), (7, 101)]:
        ins = [randn(bsz, s, 48), randn(*((40, 48) if tb else (48, 40))), randn(40)]
        if ta:
            ins.append(np.ascontiguousarray(ins[0].reshape(-1, 48).T))
        ins.append(randn(bsz, s, 40))
        check(exe, g, ins, 1e-4)


def test_rows_blocks_and_after_paths(compiler) -> None:
    """Many rows: C computed in row blocks, each followed by the epilogue. K = 0 (C is
    zeros): the GEMM, then the epilogue over every row. Both paths are exact."""
    b = GraphBuilder("k_symbolic")
    M, K, N = b.symbol("M"), b.symbol("K"), b.symbol("N")
    x, w = b.input("x", "f32", [M, K]), b.input("w", "f32", [K, N])
    bias = b.input("bias", "f32", [N])
    y = b.dot_general(x, w, lhs_batch=[], rhs_batch=[], lhs_contract=[1], rhs_contract=[0])
    y = b.add(y, b.broadcast_in_dim(bias, shape=[M, N], broadcast_dimensions=[1]))
    g = b.build(b.max(y, b.full(0.0, "f32", [M, N])))
    exe = compiler.compile(g)
    assert plan(exe) == {"librarycall": 1, "gemm_epilogue": 1}
    big = [randn(4099, 64), randn(64, 257), randn(257)]
    check(exe, g, big, 1e-4)
    assert counters(exe, big) == {"kernel0.gemm_blocks": 1}
    empty_k = [randn(33, 0), randn(0, 20), randn(20)]
    check(exe, g, empty_k, 0)
    assert counters(exe, empty_k) == {"kernel0.after_gemm": 1}
    # wide rows: blocks of at most 256 (N = 1024) or 262 (N = 1000) rows whose count is
    # raised to a multiple of the threads (612 rows: 4 blocks of 153, not 256 + 256 + 100)
    for shape in [(0, 3, 4), (5, 3, 0), (1, 1, 1), (17, 9, 1), (612, 32, 1024),
                  (613, 8, 1000), (3, 5, 2048)]:
        m, k, n = shape
        check(exe, g, [randn(m, k), randn(k, n), randn(n)], 1e-4)


def test_bias_that_may_broadcast_at_run_time(compiler) -> None:
    """A bias whose length is another symbol: 1 (broadcast) or N, both versions of the
    epilogue kernel, and a clear error otherwise."""
    b = GraphBuilder("maybe")
    M, N, L = b.symbol("M"), b.symbol("N"), b.symbol("L")
    x, w = b.input("x", "f32", [M, 16]), b.input("w", "f32", [16, N])
    bias = b.input("bias", "f32", [L])
    y = b.dot_general(x, w, lhs_batch=[], rhs_batch=[], lhs_contract=[1], rhs_contract=[0])
    g = b.build(b.add(y, b.broadcast_in_dim(bias, shape=[M, N], broadcast_dimensions=[1])))
    exe = compiler.compile(g)
    assert plan(exe).get("gemm_epilogue") == 1
    for m, n, length in [(50, 30, 30), (50, 30, 1), (3, 1, 1), (300, 7, 7)]:
        check(exe, g, [randn(m, 16), randn(16, n), randn(length)], 1e-4)
    with pytest.raises(Exception, match="expected 1 or 30"):
        exe.run([randn(50, 16), randn(16, 30), randn(4)])


def test_batched_scores_with_softmax_epilogue(compiler) -> None:
    """softmax(q @ k^T * scale) per head: the softmax row kernel runs on the GEMM's rows."""
    b = GraphBuilder("scores")
    B, S = b.symbol("B"), b.symbol("S")
    q, k = b.input("q", "f32", [B, S, 32]), b.input("k", "f32", [B, S, 32])
    s = b.dot_general(q, k, lhs_batch=[0], rhs_batch=[0], lhs_contract=[2], rhs_contract=[2])
    s = b.mul(s, b.full(0.125, "f32", [B, S, S]))
    m = b.broadcast_in_dim(b.reduce(s, kind="max", axes=[2]), shape=[B, S, S],
                           broadcast_dimensions=[0, 1])
    e = b.exp(b.sub(s, m))
    tot = b.broadcast_in_dim(b.reduce(e, kind="sum", axes=[2]), shape=[B, S, S],
                             broadcast_dimensions=[0, 1])
    g = b.build(b.div(e, tot))
    exe = compiler.compile(g)
    assert plan(exe) == {"librarycall": 1, "gemm_epilogue": 1}
    for bsz, sl in [(1, 1), (3, 7), (2, 130), (0, 4), (5, 0)]:
        check(exe, g, [randn(bsz, sl, 32), randn(bsz, sl, 32)], 1e-5)


def test_gemm_output_also_returned(compiler) -> None:
    """C also leaves the graph (a forward saving it for backward): written whole, and the
    epilogue still fused."""
    b = GraphBuilder("both")
    M = b.symbol("M")
    x, w = b.input("x", "f64", [M, 12]), b.input("w", "f64", [12, 9])
    y = b.dot_general(x, w, lhs_batch=[], rhs_batch=[], lhs_contract=[1], rhs_contract=[0])
    g = b.build(y, b.tanh(y))
    exe = compiler.compile(g)
    assert plan(exe) == {"librarycall": 1, "gemm_epilogue": 1}
    for m in [0, 1, 5, 1000]:
        check(exe, g, [randn(m, 12, dtype=np.float64), randn(12, 9, dtype=np.float64)], 1e-12)


def test_consumer_reading_another_layout_is_not_fused(compiler) -> None:
    """A kernel that reads C transposed needs all of C: it stays a kernel of its own."""
    b = GraphBuilder("transposed")
    M = b.symbol("M")
    x, w = b.input("x", "f32", [M, 8]), b.input("w", "f32", [8, 8])
    y = b.dot_general(x, w, lhs_batch=[], rhs_batch=[], lhs_contract=[1], rhs_contract=[0])
    g = b.build(b.exp(b.transpose(y, permutation=[1, 0])))
    exe = compiler.compile(g)
    assert "gemm_epilogue" not in plan(exe)
    check(exe, g, [randn(9, 8), randn(8, 8)], 1e-5)


def conv_bias_relu(dt: str = "f32", c: int = 6, o: int = 5, stride: int = 1):
    b = GraphBuilder("conv_bias_relu")
    N, H, W = b.symbol("N"), b.symbol("H"), b.symbol("W")
    x = b.input("x", dt, [N, c, H, W])
    w = b.input("w", dt, [o, c, 3, 3])
    bias = b.input("bias", dt, [o])
    y = b.convolution(x, w, window_strides=[stride, stride], padding=[[1, 1], [1, 1]],
                      lhs_dilation=[1, 1], rhs_dilation=[1, 1], feature_group_count=1,
                      batch_group_count=1, input_layout="NCHW", kernel_layout="OIHW",
                      output_layout="NCHW")
    shape = list(y.shape)
    y = b.add(y, b.broadcast_in_dim(bias, shape=shape, broadcast_dimensions=[1]))
    return b.build(b.max(y, b.full(0.0, dt, shape)))


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("stride", [1, 2])
def test_convolution_bias_relu_per_image(tmp_path, dt, stride, monkeypatch) -> None:
    """NCHW convolution: one GEMM per image writes the output layout itself (no transpose
    pass), its weights shared across images, bias and ReLU fused into the GEMM."""
    monkeypatch.setenv("DISC_ONEDNN_CONV", "0")  # the im2col lowering, even with oneDNN
    np_dt = np.float32 if dt == "f32" else np.float64
    g = conv_bias_relu(dt, stride=stride)
    fn = jit(g, cache=CompileCache(tmp_path))
    for shape in [(1, 6, 1, 1), (2, 6, 5, 7), (0, 6, 4, 4), (3, 6, 0, 3), (4, 6, 33, 18),
                  (9, 6, 64, 40)]:
        ins = [randn(*shape, dtype=np_dt), randn(5, 6, 3, 3, dtype=np_dt),
               randn(5, dtype=np_dt)]
        got = fn(*ins)
        want = interpret(g, ins)
        tol = 1e-4 if dt == "f32" else 1e-10
        np.testing.assert_allclose(got[0], want[0], rtol=tol, atol=tol)
    assert fn.stats.compiles == 1
    exe = Compiler(CompileCache(tmp_path), target="native").compile(g)
    steps = plan(exe)
    # the patch gather runs inside the GEMM (its prologue: block by block into a buffer),
    # bias and ReLU too (its epilogue); left: the padded NHWC input and the weights'
    # [O, taps*C] layout. The output needs no transpose, the weights are never repeated
    # per image, and the patch matrix is never written whole.
    assert steps == {"librarycall": 1, "gemm_prologue": 1, "gemm_epilogue": 1, "loop": 2,
                     "alias": 3}
    native = exe.artifact.metadata["native"]
    assert launch_counts(native) == (4, 1)
    assert fusion_count(native) >= 2  # the gather prologue and the bias/ReLU epilogue


def test_convolution_without_epilogue_makes_its_patches_in_blocks(compiler, monkeypatch) -> None:
    """A bare convolution (its output returned as is): the patch gather is still the
    GEMM's prologue, with no epilogue; 1-D, odd channel counts, empty and unit sizes."""
    monkeypatch.setenv("DISC_ONEDNN_CONV", "0")  # the im2col lowering, even with oneDNN
    b = GraphBuilder("conv1d")
    N, L = b.symbol("N"), b.symbol("L")
    x, w = b.input("x", "f32", [N, 3, L]), b.input("w", "f32", [7, 3, 5])
    g = b.build(b.convolution(x, w, window_strides=[1], padding=[[2, 2]], lhs_dilation=[1],
                              rhs_dilation=[1], feature_group_count=1, batch_group_count=1,
                              input_layout="NCW", kernel_layout="OIW", output_layout="NCW"))
    exe = compiler.compile(g)
    steps = plan(exe)
    assert steps.get("gemm_prologue") == 1 and "gemm_epilogue" not in steps
    for n, length in [(1, 1), (2, 9), (0, 4), (3, 0), (5, 4001)]:
        check(exe, g, [randn(n, 3, length), randn(7, 3, 5)], 1e-4)


def test_weight_gradient_prologue_with_a_long_k(compiler, monkeypatch) -> None:
    """A convolution's weight gradient: a small C over K = every input position. Its patch
    gather is the GEMM's prologue; with several threads the helper makes the patches whole
    and splits K (blocks of C's columns would each read all of A again). Right either way,
    for large and tiny images."""
    monkeypatch.setenv("DISC_ONEDNN_CONV", "0")  # the im2col lowering, even with oneDNN
    b = GraphBuilder("filter_grad")
    N, H = b.symbol("N"), b.symbol("H")
    x = b.input("x", "f32", [N, 3, H, H])
    dy = b.input("dy", "f32", [N, 4, H, H])
    kw = dict(window_strides=[1, 1], padding=[[1, 1], [1, 1]], rhs_dilation=[1, 1],
              input_layout="NCHW", kernel_layout="OIHW", output_layout="NCHW")
    g = b.build(b.conv_filter_grad(x, dy, [4, 3, 3, 3], **kw))
    exe = compiler.compile(g)
    assert plan(exe).get("gemm_prologue") == 1
    for n, h in [(2, 64), (1, 1), (3, 5), (0, 4), (1, 130)]:
        check(exe, g, [randn(n, 3, h, h), randn(n, 4, h, h)], 2e-3)


def test_module_split_into_units_keeps_fused_entries(tmp_path, monkeypatch) -> None:
    """Compiled as several translation units, the GEMM helper (with the host) calls the
    prologue and epilogue entries of kernels in other units through their prototypes."""
    monkeypatch.setenv("DISC_ONEDNN_CONV", "0")  # the im2col lowering, even with oneDNN
    from disc_core.native import emit

    monkeypatch.setattr(emit, "SPLIT_MIN_CHARS", 1)
    monkeypatch.setenv("DISC_COMPILE_UNITS", "3")
    g = conv_bias_relu()
    exe = Compiler(CompileCache(tmp_path), target="native").compile(g)
    native = exe.artifact.metadata["native"]
    assert native["units"] == 3
    assert native["fusion"]["gemm_prologue"] == 1 and native["fusion"]["gemm_epilogue"] == 1
    for shape in [(2, 6, 9, 11), (1, 6, 1, 1)]:
        check(exe, g, [randn(*shape), randn(5, 6, 3, 3), randn(5)], 1e-4)


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_nhwc_convolution_makes_its_lhs_in_row_blocks(compiler, dt, monkeypatch) -> None:
    """NHWC (TensorFlow's layout): the patches are the GEMM's lhs, made per block of C's
    rows (the prologue), each block followed by bias and ReLU (the epilogue)."""
    monkeypatch.setenv("DISC_ONEDNN_CONV", "0")  # the im2col lowering, even with oneDNN
    np_dt = np.float32 if dt == "f32" else np.float64
    b = GraphBuilder("nhwc")
    N, H, W = b.symbol("N"), b.symbol("H"), b.symbol("W")
    x, w = b.input("x", dt, [N, H, W, 6]), b.input("w", dt, [3, 3, 6, 5])
    bias = b.input("bias", dt, [5])
    y = b.convolution(x, w, window_strides=[1, 1], padding=[[1, 1], [1, 1]],
                      lhs_dilation=[1, 1], rhs_dilation=[1, 1], feature_group_count=1,
                      batch_group_count=1, input_layout="NHWC", kernel_layout="HWIO",
                      output_layout="NHWC")
    shape = list(y.shape)
    y = b.add(y, b.broadcast_in_dim(bias, shape=shape, broadcast_dimensions=[3]))
    g = b.build(b.max(y, b.full(0.0, dt, shape)))
    exe = compiler.compile(g)
    steps = plan(exe)
    assert steps["gemm_prologue"] == 1 and steps["gemm_epilogue"] == 1
    tol = 1e-4 if dt == "f32" else 1e-10
    for n, h, wd in [(1, 1, 1), (2, 5, 7), (0, 3, 3), (3, 0, 4), (4, 33, 18), (8, 64, 64)]:
        check(exe, g, [randn(n, h, wd, 6, dtype=np_dt), randn(3, 3, 6, 5, dtype=np_dt),
                       randn(5, dtype=np_dt)], tol)


def test_gemm_fusion_off_runs_the_gemm_and_its_consumer_apart(tmp_path, monkeypatch) -> None:
    """``DISC_GEMM_FUSION=0`` (for comparisons): the GEMM is one library call, its consumer a
    kernel of its own, the results the same, under another compile-cache key."""
    g = linear("gelu", "f32")
    ins = [randn(3, 77, 48), randn(48, 40), randn(40), randn(3, 77, 40)]
    fused = Compiler(CompileCache(tmp_path), target="native").compile(g)
    monkeypatch.setenv("DISC_GEMM_FUSION", "0")
    apart = Compiler(CompileCache(tmp_path), target="native").compile(g)
    assert plan(fused) == {"librarycall": 1, "gemm_epilogue": 1}
    assert plan(apart) == {"librarycall": 1, "loop": 1}
    assert apart.artifact.key != fused.artifact.key
    for exe in (fused, apart):
        check(exe, g, ins, 1e-4)


def gelu_backward(dt: str, *, row: bool = False):
    """The gradient through a linear layer's GELU, as a backward pass computes it: the
    GEMM dy @ w gives d(gelu output), the epilogue multiplies by gelu'(h) and sums the
    result over every row (the bias gradient). ``row``: also a row reduction (a row
    kernel with column sums, as a LayerNorm's backward is)."""
    b = GraphBuilder(f"gelu_backward_{dt}_{row}")
    B, S = b.symbol("B"), b.symbol("S")
    dy, w = b.input("dy", dt, [B, S, 24]), b.input("w", dt, [24, 40])
    h = b.input("h", dt, [B, S, 40])
    shape = [B, S, 40]
    g = b.dot_general(dy, w, lhs_batch=[], rhs_batch=[], lhs_contract=[2], rhs_contract=[0])

    def c(v):
        return b.full(v, dt, shape)

    cdf = b.mul(c(0.5), b.add(c(1.0), b.erf(b.mul(h, c(1 / math.sqrt(2))))))
    pdf = b.mul(c(1 / math.sqrt(2 * math.pi)), b.exp(b.mul(c(-0.5), b.mul(h, h))))
    dh = b.mul(g, b.add(cdf, b.mul(h, pdf)))
    if row:
        mean = b.reduce(dh, kind="sum", axes=[2])
        dh = b.sub(dh, b.broadcast_in_dim(mean, shape=shape, broadcast_dimensions=[0, 1]))
    return b.build(dh, b.reduce(dh, kind="sum", axes=[0, 1]),
                   b.reduce(b.mul(dh, h), kind="sum", axes=[0, 1]))


@pytest.mark.parametrize("row", [False, True])
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_epilogue_with_column_sums(tmp_path, dt, row) -> None:
    """A row kernel that also sums its values over all rows (LayerNorm's dgamma/dbeta)
    runs as the GEMM's epilogue: each block of rows sums into its own
    partial row, added up in row order after the GEMM. Checked against the interpreter
    on empty, single, odd and many-block shapes, the same bits on every call, one
    compile, and the blocks path taken (counters)."""
    np_dt = np.float32 if dt == "f32" else np.float64
    tol = 1e-4 if dt == "f32" else 1e-10
    g = gelu_backward(dt, row=row)
    fn = jit(g, cache=CompileCache(tmp_path))
    for bsz, s in [(1, 1), (2, 3), (0, 5), (3, 0), (3, 77), (8, 300), (4, 612)]:
        ins = [randn(bsz, s, 24, dtype=np_dt), randn(24, 40, dtype=np_dt),
               randn(bsz, s, 40, dtype=np_dt)]
        got = fn(*ins)
        want = interpret(g, ins)
        for x, y in zip(got, want):
            assert x.shape == y.shape
            np.testing.assert_allclose(x, y, rtol=tol, atol=tol * max(1, bsz * s) ** 0.5)
        again = fn(*ins)
        for x, y in zip(got, again):
            np.testing.assert_array_equal(x, y)  # row-order sums: the same every call
    assert fn.stats.compiles == 1
    exe = Compiler(CompileCache(tmp_path), target="native").compile(g)
    if not row:  # a loop kernel with column sums stays after the GEMM (measured slower)
        assert plan(exe) == {"librarycall": 1, "loop": 1}
        return
    assert plan(exe) == {"librarycall": 1, "gemm_epilogue": 1}
    big = [randn(8, 300, 24, dtype=np_dt), randn(24, 40, dtype=np_dt),
           randn(8, 300, 40, dtype=np_dt)]
    assert counters(exe, big) == {"kernel0.gemm_blocks": 1}


def test_column_sums_too_large_for_partial_rows_run_after_the_gemm(tmp_path,
                                                                   monkeypatch) -> None:
    """Partial rows over ``SUMS_MAX_BYTES`` (here lowered to 4 KiB) are not allocated: the
    GEMM runs alone and the kernel after it as a step of its own; smaller shapes of the
    same module still run fused. Both exact."""
    from disc_core.native import gemm_epilogue

    monkeypatch.setattr(gemm_epilogue, "SUMS_MAX_BYTES", 4096)
    g = gelu_backward("f32", row=True)
    exe = Compiler(CompileCache(tmp_path), target="native").compile(g)
    assert plan(exe) == {"librarycall": 1, "gemm_epilogue": 1}
    small = [randn(2, 3, 24), randn(24, 40), randn(2, 3, 40)]  # 6 x 40 floats: fused
    big = [randn(4, 77, 24), randn(24, 40), randn(4, 77, 40)]  # 308 x 40: after
    for ins in (small, big):
        check(exe, g, ins, 1e-4)
    assert "kernel0.gemm_blocks" in counters(exe, small)
    after = counters(exe, big)
    assert "kernel0.gemm_blocks" not in after and any(
        n.startswith("kernel0.") for n in after), after
