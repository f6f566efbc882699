"""Streaming (non-temporal) output stores of row and loop kernels: a call that moves more
bytes than the last-level cache computes each row in chunks into a stack buffer and
streams the chunks out (prelude ``disc_stream_bytes``). The tests shrink the cache size the
toolchain reports, so every call above 64 columns streams, and check the results against
the reference interpreter around the chunk size, on unaligned rows and in every dtype."""

from __future__ import annotations

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, catalog, interpret
from disc_core.native import toolchain
from disc_core.native.build import build_native
from disc_core.passes import default_pipeline
from disc_runtime import CompileCache

RNG = np.random.default_rng(11)
#: under the 64-column floor (never streamed), around the chunk of 1024, several chunks;
#: odd lengths start most rows off a 32-byte boundary (the streaming head)
COLUMNS = (7, 64, 65, 100, 1023, 1024, 1025, 2500)


@pytest.fixture
def tiny_cache(monkeypatch):
    """The toolchain reports a 4 KB last-level cache: modules get -DDISC_LLC_BYTES=4096
    (and a target of their own in the compile cache)."""
    monkeypatch.setattr(toolchain, "last_level_cache_bytes", lambda: 4096)


@pytest.fixture
def compiler(tmp_path):
    return Compiler(CompileCache(tmp_path / "cache"), target="native")


def sources(graph) -> str:
    default_pipeline().run(graph)
    build = build_native(graph)
    return "\n".join(v.decode() for k, v in build.files.items() if k.endswith(".c"))


def check(compiler, graph, inputs, rtol=1e-5, atol=1e-5) -> None:
    exe = compiler.compile(graph)
    assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
    assert "-DDISC_LLC_BYTES=4096" in toolchain.find_toolchain().flags
    got, want = exe.run(inputs), interpret(graph, inputs)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                   atol=atol)


def two_outputs(dtype: str):
    """x * y + 1 and x - y over [R, H]: two outputs streamed by one loop."""
    b = GraphBuilder("two_outputs")
    R, H = b.symbol("R"), b.symbol("H")
    x, y = b.input("x", dtype, [R, H]), b.input("y", dtype, [R, H])
    one = b.full(1, dtype, [R, H])
    return b.build(b.add(b.mul(x, y), one), b.sub(x, y))


def dtype_np(dtype: str) -> str:
    return {"f32": "float32", "f64": "float64", "i32": "int32", "i64": "int64"}[dtype]


@pytest.mark.parametrize("cols", COLUMNS)
def test_row_kernels_stream_and_match(tiny_cache, compiler, cols) -> None:
    """LayerNorm, softmax and RMSNorm rows (reductions, then the streamed store loop)."""
    for rows in (1, 3, 37):
        x = (RNG.standard_normal((2, rows, cols)) * 3).astype(np.float32)
        g, bt = RNG.standard_normal(cols).astype(np.float32), RNG.standard_normal(
            cols).astype(np.float32)
        check(compiler, catalog.layernorm(), [x, g, bt], atol=1e-4)
        check(compiler, catalog.softmax(3), [x], atol=1e-6)
        check(compiler, catalog.rmsnorm(), [x[0], g], atol=1e-4)


@pytest.mark.parametrize("dtype", ["f32", "f64", "i32", "i64"])
@pytest.mark.parametrize("cols", COLUMNS)
def test_loop_kernels_stream_every_output_in_every_dtype(tiny_cache, compiler, dtype,
                                                         cols) -> None:
    g = two_outputs(dtype)
    for rows in (1, 5):
        x = (RNG.standard_normal((rows, cols)) * 50).astype(dtype_np(dtype))
        y = (RNG.standard_normal((rows, cols)) * 50).astype(dtype_np(dtype))
        check(compiler, g, [x, y])
    bias = catalog.gelu_bias_residual()
    x = RNG.standard_normal((2, 3, cols)).astype(np.float32)
    check(compiler, bias, [x, x[::-1].copy(), x[0, 0].copy()], atol=1e-5)


def test_the_store_loop_streams_when_a_call_moves_more_than_the_cache(tiny_cache) -> None:
    """The decision counts the bytes per element a call moves: the row-layout inputs it
    reads and the outputs it writes (LayerNorm: x and y; gamma and beta are not rows)."""
    ln = sources(catalog.layernorm(hidden=768))
    assert "disc_streams((S[0]*S[1]), C, sizeof(float) + sizeof(float))" in ln
    assert "disc_stream_bytes(out0 + r*C + c0, stream0, (size_t)(c1 - c0) * sizeof(float))" in ln
    assert "if (disc_stream) disc_stream_fence();" in ln
    two = sources(two_outputs("f64"))
    assert "disc_stream_bytes(out1 + r*C + c0, stream1" in two
    assert ("sizeof(double) + sizeof(double) + sizeof(double) + sizeof(double)" in two), two


def test_outputs_not_written_whole_in_the_kernel_layout_do_not_stream() -> None:
    """A split concatenate writes its row in one loop per operand: no streaming there."""
    b = GraphBuilder("cat")
    R, H = b.symbol("R"), b.symbol("H")
    x = b.input("x", "f32", [R, H])
    y = b.concatenate(b.exp(x), b.neg(x), dimension=1)
    text = sources(b.build(y))
    assert "disc_stream_bytes(" not in text.split("#define disc_streams")[1]


def test_the_last_level_cache_is_read_from_sysfs(tmp_path) -> None:
    """The largest-level data or unified cache wins (instruction caches are skipped);
    unreadable entries are ignored; nothing readable gives None (the prelude's default)."""
    def cache(i: int, level: int, kind: str, size: str) -> None:
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")

    read = toolchain.last_level_cache_bytes.__wrapped__
    assert read(str(tmp_path)) is None
    cache(0, 1, "Data", "32K")
    cache(1, 1, "Instruction", "64K")
    assert read(str(tmp_path)) == 32 << 10
    cache(2, 2, "Unified", "512K")
    cache(3, 3, "Unified", "8192K")
    cache(4, 4, "Instruction", "64M")
    (tmp_path / "index5").mkdir()  # no files: skipped
    assert read(str(tmp_path)) == 8 << 20
