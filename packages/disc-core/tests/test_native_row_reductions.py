"""Row reductions of f32/f64 rows through the prelude's multi-accumulator helpers
(``disc_row_sum_f32`` ...) or loops split into parts with an accumulator each: which
reductions take which, and that they agree with the
reference interpreter on every row length around the vector and unroll widths, with NaN and
infinities anywhere in a row, empty rows, serial and parallel, every kernel version."""

from __future__ import annotations

import re

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, catalog, interpret
from disc_core.native.build import build_native
from disc_core.native.emit import PRELUDE
from disc_core.passes import default_pipeline
from disc_runtime import CompileCache

RNG = np.random.default_rng(7)
#: around 16 lanes (f32 on AVX-512) and 4 x 16 (the unrolled step), short rows, long rows
LENGTHS = [0, 1, 3, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 1000]


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    return Compiler(CompileCache(tmp_path_factory.mktemp("cache")), target="native")


def run_checked(compiler, graph, inputs, rtol=1e-5, atol=1e-5):
    exe = compiler.compile(graph)
    assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
    got, want = exe.run(inputs), interpret(graph, inputs)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                   atol=atol, equal_nan=True)
    return exe


def sources(graph) -> str:
    default_pipeline().run(graph)
    build = build_native(graph)
    return "\n".join(v.decode() for k, v in build.files.items() if k.endswith(".c"))


def three_reductions(dtype: str, hidden: int | None = None):
    """sum(x), max(x), min(x) and sum(x * x) over the last dim of [R, H]."""
    b = GraphBuilder("row_stats")
    R = b.symbol("R")
    H = b.symbol("H") if hidden is None else hidden
    x = b.input("x", dtype, [R, H])
    return b.build(b.reduce(x, kind="sum", axes=[1]), b.reduce(x, kind="max", axes=[1]),
                   b.reduce(x, kind="min", axes=[1]),
                   b.reduce(b.mul(x, x), kind="sum", axes=[1]))


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_row_sum_max_min_on_every_length_around_the_vector_width(compiler, dtype) -> None:
    npdt = np.float32 if dtype == "f32" else np.float64
    g = three_reductions(dtype)
    for rows in (1, 5, 300):  # 300 rows of 1000: parallel where threads allow
        for n in LENGTHS:
            x = (RNG.standard_normal((rows, n)) * 10).astype(npdt)
            run_checked(compiler, g, [x], rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_nan_and_infinities_anywhere_in_a_row(compiler, dtype) -> None:
    """max/min are NaN when any element is (in the unrolled part, the single-vector part,
    the scalar tail, the last element); infinities win max/min and make sums infinite."""
    npdt = np.float32 if dtype == "f32" else np.float64
    g = three_reductions(dtype)
    for n in (1, 17, 70, 129, 1000):
        for pos in sorted({0, n // 2, n - 1, min(n - 1, 64), min(n - 1, 66)}):
            for special in (np.nan, np.inf, -np.inf):
                x = RNG.standard_normal((3, n)).astype(npdt)
                x[1, pos] = special
                x[2, :] = -np.inf if special == np.inf else np.inf  # a row of one infinity
                run_checked(compiler, g, [x], rtol=1e-5, atol=1e-4)


def test_softmax_and_layernorm_rows_take_the_helpers_or_split_loops() -> None:
    """The benchmark's row kernels: a reduction of an input row goes through a helper
    (LayerNorm's mean, softmax's max). A sum of plain arithmetic is computed and summed
    by one loop over four parts of the row, an accumulator each (LayerNorm's variance: no
    row buffer, no second pass); a max or min of a computed operand fills a row buffer the
    helper reduces, and a sum of exps (softmax's) fills it with the exp's argument, which
    the exp-and-sum helper exponentiates in place (without the overflow clamp: the argument
    is x - max(x))."""
    ln = sources(catalog.layernorm(hidden=768))
    assert len(re.findall(r"disc_row_sum_f32\(", ln)) == 1, ln
    assert "disc_row_sum_f32((in0 + r*C), C)" in ln
    assert "rowbuf" not in ln.split("kernel0_fast_part(")[1].split("\n}\n")[0]
    assert re.search(r"reduction\(\+:acc\d+\) reduction\(\+:acc\d+_1\) "
                     r"reduction\(\+:acc\d+_2\) reduction\(\+:acc\d+_3\)", ln), ln
    sm = sources(catalog.softmax(3))
    assert "disc_row_max_f32((in0 + r*C), C, -INFINITY)" in sm
    # exp(x - max) from the input row, shifted by the row's max, into a row buffer
    assert re.search(r"disc_row_exp_sum_f32\(rowbuf0, \(in0 \+ r\*C\), v\d+, C, 0\)", sm)
    assert "disc_row_sum_f32(rowbuf" not in sm and "_3 +=" not in sm
    scores = sources(catalog.attention_scores())
    assert "disc_row_max_f32(rowbuf0, C, -INFINITY)" in scores and "_3 +=" not in scores
    assert re.search(r"disc_row_exp_sum_f32\(rowbuf1, rowbuf0, v\d+, C, 0\)", scores)
    for text in (ln, sm):  # the input rows two ahead are prefetched, where the CPU gains
        assert ("if (DISC_ROW_PREFETCH && r + 2 < hi) disc_prefetch_row(in0 + (r + 2)*C, C);"
                in text)


def computed_reductions(dtype: str):
    """Reductions of computed operands (the split loop): sum(x * x), max(2x), min(x - 1)."""
    b = GraphBuilder("computed_stats")
    R, H = b.symbol("R"), b.symbol("H")
    x = b.input("x", dtype, [R, H])
    return b.build(b.reduce(b.mul(x, x), kind="sum", axes=[1]),
                   b.reduce(b.mul(x, b.full(2.0, dtype, [R, H])), kind="max", axes=[1]),
                   b.reduce(b.sub(x, b.full(1.0, dtype, [R, H])), kind="min", axes=[1]))


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_split_loop_reductions_on_every_length_and_special_value(compiler, dtype) -> None:
    """The four-part loop (the sum of squares; max and min beside it fill row buffers for
    the helpers) agrees with the interpreter on every length around the part width (4 x
    the vector lanes) and the rest loop, with NaN or an infinity in each part, the rest,
    the first and last element."""
    npdt = np.float32 if dtype == "f32" else np.float64
    g = computed_reductions(dtype)
    text = sources(computed_reductions(dtype))
    assert re.search(r"acc\d+_3 \+= ", text) and "disc_row_max_" in text, text
    for rows in (1, 5, 300):
        for n in LENGTHS:
            x = (RNG.standard_normal((rows, n)) * 10).astype(npdt)
            run_checked(compiler, g, [x], rtol=1e-5, atol=1e-3)
    for n in (17, 64, 70, 129, 1000):
        quarter = n // 4
        for pos in sorted({0, quarter, 2 * quarter + 1, 3 * quarter + 2, n - 1}):
            for special in (np.nan, np.inf, -np.inf):
                x = RNG.standard_normal((3, n)).astype(npdt)
                x[1, pos] = special
                x[2, :] = -np.inf if special == np.inf else np.inf
                run_checked(compiler, g, [x], rtol=1e-5, atol=1e-4)


def test_short_static_rows_and_other_kinds_keep_the_simd_loop() -> None:
    """Static rows under 32 elements, products and integer sums keep the 'omp simd' loop."""
    short = sources(three_reductions("f32", hidden=8))
    assert "disc_row_" not in short.replace(PRELUDE, "")
    b = GraphBuilder("others")
    R, H = b.symbol("R"), b.symbol("H")
    x, i = b.input("x", "f32", [R, H]), b.input("i", "i32", [R, H])
    g = b.build(b.reduce(x, kind="prod", axes=[1]), b.reduce(i, kind="sum", axes=[1]))
    text = sources(g)
    assert "reduction(*:" in text and "reduction(+:" in text


def test_reduction_of_a_broadcast_input_takes_the_split_loop(compiler) -> None:
    """An operand read from an input that is not laid out as the kernel's rows (a vector
    broadcast along the rows) is reduced by the split loop, with no row buffer."""
    b = GraphBuilder("bcast_red")
    R, H = b.symbol("R"), b.symbol("H")
    x, w = b.input("x", "f32", [R, H]), b.input("w", "f32", [H])
    wb = b.broadcast_in_dim(w, shape=[R, H], broadcast_dimensions=[1])
    g = b.build(b.add(b.reduce(wb, kind="sum", axes=[1]), b.reduce(x, kind="max", axes=[1])))
    assert "rowbuf" not in sources(g).split("disc_run(")[0].split("#define DISC_ROW_REDUCE")[1]
    for rows, n in [(3, 0), (4, 1), (2, 65), (50, 1000)]:
        run_checked(compiler, g, [RNG.standard_normal((rows, n)).astype(np.float32),
                                  RNG.standard_normal(n).astype(np.float32)],
                    rtol=1e-5, atol=1e-4)


def one_hot_loss_grad(vocab: int):
    """Cross-entropy's backward row as torch traces it: -grad where iota == target (i64,
    negative targets wrapped), 0 elsewhere, the grad a masked scalar quotient; its row
    sum and the row itself."""
    b = GraphBuilder("one_hot_grad")
    R = b.symbol("R")

    def rows(v):  # [R] or [R, 1] along the rows of [R, vocab]
        return b.broadcast_in_dim(b.reshape_to(v, [R]), shape=[R, vocab],
                                  broadcast_dimensions=[0])

    num, den = b.input("num", "f32", []), b.input("den", "f32", [])
    target, keep = b.input("target", "i64", [R, 1]), b.input("keep", "bool", [R, 1])
    wrapped = b.select(b.compare(target, b.full(0, "i64", [R, 1]), direction="lt"),
                       b.add(target, b.full(vocab, "i64", [R, 1])), target)
    hit = b.compare(b.op("iota", shape=[R, vocab], dimension=1, dtype="i64"),
                    rows(wrapped), direction="eq")
    onehot = b.select(hit, b.full(-1.0, "f32", [R, vocab]), b.full(0.0, "f32", [R, vocab]))
    scale = b.select(keep, b.broadcast_to(b.div(num, den), [R, 1]), b.full(0.0, "f32", [R, 1]))
    term = b.mul(onehot, rows(scale))
    total = b.reduce(term, kind="sum", axes=[1])
    return b.build(rows(total), term)


def test_mixed_dtype_operands_keep_the_helper(compiler) -> None:
    """A sum whose operand's loop mixes dtypes (an i64 compare selecting f32 terms) is
    not split: GCC 12.2 miscompiled that four-part loop (GPT-2's loss backward came out
    as garbage); it fills a row buffer for the helper and agrees with the interpreter on
    every row count and vocabulary around the part width."""
    for vocab in (101, 64, 1000):
        text = sources(one_hot_loss_grad(vocab))
        assert not re.search(r"acc\d+_3 \+= ", text) and "disc_row_sum_f32(rowbuf" in text
    for vocab in (101, 64, 129, 1000):
        g = one_hot_loss_grad(vocab)
        for rows in (1, 14, 300):
            target = RNG.integers(-vocab, vocab, (rows, 1)).astype(np.int64)
            keep = RNG.random((rows, 1)) < 0.7
            run_checked(compiler, g, [np.float32(3.0), np.float32(2.0), target, keep],
                        rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_benchmark_rows_on_odd_and_edge_sizes(compiler, dtype) -> None:
    """softmax, LayerNorm and RMSNorm (symbolic hidden size) on empty, single and odd rows
    and on long ones, every version (vector-multiple, remainder, short)."""
    npdt = np.float32 if dtype == "f32" else np.float64
    for rows, n in [(0, 5), (3, 0), (1, 1), (7, 17), (5, 33), (4, 64), (9, 130), (64, 768),
                    (3, 1001)]:
        x = (RNG.standard_normal((rows, n)) * 4).astype(npdt)
        run_checked(compiler, catalog.softmax(2) if dtype == "f32" else _softmax64(), [x],
                    rtol=1e-5, atol=1e-6)
    if dtype == "f32":
        for rows, n in [(1, 1), (7, 17), (9, 130), (3, 1001)]:
            x = (RNG.standard_normal((1, rows, n)) * 2 + 1).astype(np.float32)
            g, bt = RNG.standard_normal(n).astype(np.float32), RNG.standard_normal(n).astype(
                np.float32)
            run_checked(compiler, catalog.layernorm(), [x, g, bt], rtol=1e-4, atol=1e-4)
            run_checked(compiler, catalog.rmsnorm(), [x[0], g], rtol=1e-4, atol=1e-4)


def _softmax64():
    b = GraphBuilder("softmax64")
    R, H = b.symbol("R"), b.symbol("H")
    x = b.input("x", "f64", [R, H])
    m = b.broadcast_in_dim(b.reduce(x, kind="max", axes=[1]), shape=[R, H],
                           broadcast_dimensions=[0])
    e = b.exp(b.sub(x, m))
    s = b.broadcast_in_dim(b.reduce(e, kind="sum", axes=[1]), shape=[R, H],
                           broadcast_dimensions=[0])
    return b.build(b.div(e, s))


@pytest.mark.parametrize("n", [8191, 8192, 8193, 20000])
def test_rows_longer_than_a_stack_row_buffer(compiler, n) -> None:
    """Rows whose helper-only buffer would not fit on the stack (DISC_STACK_ROWBUF, 32 KiB)
    reduce in the simd loop instead (no buffer); rows that fit use the helper. Both agree
    with the interpreter: LayerNorm and RMSNorm (computed operands), softmax (a buffer the
    normalisation reuses, malloc'ed when long)."""
    x = (RNG.standard_normal((1, 3, n)) * 2 + 1).astype(np.float32)
    g, bt = (RNG.standard_normal(n).astype(np.float32) for _ in range(2))
    run_checked(compiler, catalog.layernorm(), [x, g, bt], rtol=1e-4, atol=1e-4)
    run_checked(compiler, catalog.rmsnorm(), [x[0], g], rtol=1e-4, atol=1e-4)
    run_checked(compiler, catalog.softmax(2), [x[0] * 4], rtol=1e-4, atol=1e-7)
    run_checked(compiler, three_reductions("f32"), [x[0]], rtol=1e-5, atol=1e-2)


@pytest.mark.parametrize(("march", "prefetch"), [("znver1", "0"), ("znver3", "0"),
                                                 ("sapphirerapids", "1"), ("x86-64-v3", "1")])
def test_row_prefetch_is_decided_per_cpu_kind(march, prefetch) -> None:
    """The prelude turns the row prefetch off where it measured slower (AMD Zen: the
    hardware prefetcher keeps up) and keeps it elsewhere (measured faster on Intel)."""
    import subprocess

    from disc_core.native.toolchain import find_toolchain

    cc = find_toolchain().cc
    proc = subprocess.run([cc, f"-march={march}", "-fopenmp", "-E", "-P", "-x", "c", "-"],
                          input=f"{PRELUDE}\nDISC_EXPANDED DISC_ROW_PREFETCH;\n",
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"this C compiler does not know -march={march} (not x86?)")
    assert proc.stdout.rsplit("DISC_EXPANDED", 1)[1].split(";", 1)[0].strip() == prefetch



def _exp_sum_library(tmp_path):
    """The prelude's ``disc_row_exp_sum_f32`` in a shared object of its own, built as
    modules are (same compiler and flags), called through ctypes: ``run(dst, src, shift,
    upper)``."""
    import ctypes

    from disc_core.native.toolchain import find_toolchain

    src = PRELUDE + (
        "\nfloat disc_test_exp_sum(float *d, const float *s, float shift, int64_t n,\n"
        "                         int upper) {\n"
        "  return upper ? disc_row_exp_sum_f32(d, s, shift, n, 1)\n"
        "               : disc_row_exp_sum_f32(d, s, shift, n, 0); }\n")
    tc = find_toolchain()
    tc.compile(src, tmp_path / "expsum.so")
    lib = ctypes.CDLL(str(tmp_path / "expsum.so"))
    lib.disc_test_exp_sum.restype = ctypes.c_float
    lib.disc_test_exp_sum.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float,
                                      ctypes.c_int64, ctypes.c_int]

    def run(dst: np.ndarray, src: np.ndarray, shift: float, upper: int) -> float:
        for a in (dst, src):
            assert a.dtype == np.float32 and a.flags.c_contiguous and a.size == src.size
        return lib.disc_test_exp_sum(dst.ctypes.data, src.ctypes.data, shift, src.size,
                                     upper)

    return run


def test_exp_sum_helper_is_accurate_on_a_sweep_of_float_bit_patterns(compiler,
                                                                    tmp_path) -> None:
    """Every 4099th float (both signs, NaNs) through the in-place exp-and-sum of a row, in
    rows whose lengths leave every tail (vector code on AVX-512 with masked last vectors,
    the inline exp elsewhere): <= 1 ulp where the result is normal (0.894 measured over
    every float), subnormal results within one unit of 2^-149, overflow, underflow and
    NaN exactly as double exp rounds them; bit for bit the elementwise exp op's results
    (identical over every float, measured). Without the overflow clamp (upper 0) on the
    arguments at most zero. Each row's sum is its results' sum. In place (as after a row
    loop's fill) and into another row; and with a shift, exp(x - s) of the float
    difference, as the elementwise ops compute it."""
    run = _exp_sum_library(tmp_path)
    b = GraphBuilder("exp")
    inline = compiler.compile(b.build(b.exp(b.input("x", "f32", ["N"]))))
    x = np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32)
    tiny, top = np.finfo(np.float32).tiny, np.finfo(np.float32).max
    for upper in (1, 0):
        xs = x if upper else x[~(x > 0)]
        got = xs.copy()
        start, k = 0, 0
        while start < got.size:  # rows of 1, 15, 16, 17, 31, 33, 1000, 1009 ... floats
            n = min((1, 15, 16, 17, 31, 33, 1000, 1009)[k % 8], got.size - start)
            row = got[start:start + n]
            if k % 2:
                total = run(row, row, 0.0, upper)
            else:
                total = run(row, row.copy(), 0.0, upper)
            with np.errstate(all="ignore"):
                want = row.astype(np.float64).sum()
            if np.isnan(want):
                assert np.isnan(total)
            elif np.isinf(want):
                assert total == want
            else:
                assert total == pytest.approx(want, rel=1e-5, abs=1e-37)
            start, k = start + n, k + 1
        with np.errstate(all="ignore"):
            exact = np.exp(xs.astype(np.float64))
            rounded = exact.astype(np.float32)
        normal = (exact >= tiny) & (exact <= top)
        ulps = np.abs(got[normal] - exact[normal]) / np.spacing(rounded[normal])
        assert ulps.max() <= 1.0
        sub = (exact > 0) & (exact < tiny)
        assert sub.any() and np.abs(got[sub] - exact[sub]).max() <= 2.0**-149
        rest = ~normal & ~sub
        np.testing.assert_array_equal(got[rest], rounded[rest])  # inf, 0 and NaN
        (elementwise,) = inline.run([xs])
        same = (got.view(np.uint32) == elementwise.view(np.uint32)) | (
            np.isnan(got) & np.isnan(elementwise))
        assert same.all(), xs[~same][:5]
    src = np.random.default_rng(5).uniform(-120, 20, 1000).astype(np.float32)
    for shift in (3.5, -2.0, 0.0):
        dst = np.empty_like(src)
        total = run(dst, src, shift, 1)
        (want,) = inline.run([src - np.float32(shift)])
        np.testing.assert_array_equal(dst, want)
        assert total == pytest.approx(want.astype(np.float64).sum(), rel=1e-5)


def exp_sums(form: str = "input"):
    """sum(exp(x)) over the last dim of [R, H] and exp(x) / sum (the exps read again after
    the sum); with ``form`` "computed" the same of exp(2x) (an argument computed in the
    row loop); "both": the sum and max of exp(x), which share one loop."""
    b = GraphBuilder(f"exp_sums_{form}")
    R, H = b.symbol("R"), b.symbol("H")
    x = b.input("x", "f32", [R, H])
    e = b.exp(b.mul(x, b.full(2.0, "f32", [R, H])) if form == "computed" else x)
    s = b.reduce(e, kind="sum", axes=[1])
    if form == "both":
        return b.build(s, b.reduce(e, kind="max", axes=[1]))
    return b.build(s, b.div(e, b.broadcast_in_dim(s, shape=[R, H], broadcast_dimensions=[0])))


def test_exp_sums_on_every_length_and_special_value(compiler) -> None:
    """A sum of exps of arguments that may be positive (the clamped helper), from the
    input row or in place from a row buffer the loop filled with the argument, and the
    exps read again from the row buffer after it; a sum and a max of the same exps in one
    loop keep computing the exp there (the helper would exponentiate the buffer after the
    max read it). Every length around the vector widths, NaN and infinities, overflow."""
    assert "disc_row_exp_sum_f32(rowbuf0, (in0 + r*C), 0.0f, C, 1)" in sources(exp_sums())
    assert "disc_row_exp_sum_f32(rowbuf0, rowbuf0, 0.0f, C, 1)" in sources(
        exp_sums("computed"))
    assert "disc_row_exp_sum_f32(" not in sources(exp_sums("both")).replace(PRELUDE, "")
    for g in (exp_sums(), exp_sums("computed"), exp_sums("both")):
        for n in LENGTHS:
            x = (RNG.standard_normal((5, n)) * 4).astype(np.float32)
            if n:
                x[1, n // 2] = np.nan
                x[2, n - 1] = np.inf
                x[3, 0] = 89.0  # overflows
                x[4, :] = -np.inf
            run_checked(compiler, g, [x], rtol=1e-5, atol=1e-30)


def mixed_width_reductions(index: str, acc: str, axis: int, n: int | None = None):
    """sum, max and min over ``axis`` of [R, C] (C static when ``n`` is given) of terms an
    integer compare selects: x where iota == target, iota converted to ``acc`` / 8 where
    iota < target, else -x; the sum of the converted iota alone; and the sums of -1 or 0
    by the same compare, alone and times a per-row scale. Such loops (``index``-wide
    compares choosing ``acc``-wide terms) are what GCC 12.2 miscompiled."""
    b = GraphBuilder(f"mixed_{index}_{acc}_{axis}")
    R, C = b.symbol("R"), (b.symbol("C") if n is None else n)
    x = b.input("x", acc, [R, C])
    target = b.input("target", index, [R])
    scale = b.input("scale", acc, [R])
    iota = b.op("iota", shape=[R, C], dimension=1, dtype=index)
    t = b.broadcast_in_dim(target, shape=[R, C], broadcast_dimensions=[0])
    ramp = b.div(b.convert(iota, dtype=acc), b.full(8.0, acc, [R, C]))
    hit = b.compare(iota, t, direction="eq")
    terms = b.select(hit, x, b.select(b.compare(iota, t, direction="lt"), ramp, b.neg(x)))
    picked = b.select(hit, b.full(-1.0, acc, [R, C]), b.full(0.0, acc, [R, C]))
    onehot = b.mul(picked, b.broadcast_in_dim(scale, shape=[R, C], broadcast_dimensions=[0]))
    return b.build(*(b.reduce(terms, kind=k, axes=[axis]) for k in ("sum", "max", "min")),
                   *(b.reduce(v, kind="sum", axes=[axis]) for v in (ramp, picked, onehot)))


@pytest.mark.parametrize("index", ["i64", "i32"])
@pytest.mark.parametrize("acc", ["f32", "f64"])
@pytest.mark.parametrize("axis", [1, 0])
def test_terms_chosen_by_integer_compares_reduce_right(compiler, index, acc, axis) -> None:
    """Every reduction kind over rows and columns of terms an i64/i32 compare selects,
    f32 and f64, static and symbolic row lengths around every part and vector width (and
    past a stack row buffer), serial and parallel, against the interpreter. With the
    one-dtype rule of split sums removed, GCC 12.2 gets the static-length rows of i32
    compares choosing f64 terms wrong (the one-hot test above covers i64 and f32)."""
    npdt = np.float32 if acc == "f32" else np.float64
    idt = np.dtype(index.replace("i", "int"))
    cases = [(1, 1), (3, 17), (2, 64), (5, 129), (64, 1000), (300, 257), (2, 9001)]
    for static in (False, True):
        for rows, n in cases:
            g = mixed_width_reductions(index, acc, axis, n if static else None)
            x = RNG.standard_normal((rows, n)).astype(npdt)
            target = RNG.integers(-2, n + 2, rows).astype(idt)
            scale = RNG.standard_normal(rows).astype(npdt)
            # f32 sums of 9001 ramp terms round by up to 4e-5 of the total in any order;
            # a lost or garbage lane or part is far beyond these bounds
            run_checked(compiler, g, [x, target, scale],
                        rtol=2e-4 if acc == "f32" else 1e-9,
                        atol=1e-3 if acc == "f32" else 1e-9)
