"""Streaming (non-temporal) output stores of row and loop kernels: a call that moves more
bytes than the last-level cache computes each row in chunks into a stack buffer and
streams the chunks out (prelude ``disc_stream_bytes``). The tests shrink the cache size the
toolchain reports, so every call above 64 columns streams, and check the results against
the reference interpreter around the chunk size, on unaligned rows and in every dtype."""

from __future__ import annotations

import re

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, catalog, interpret
from disc_core.native import toolchain
from disc_core.native.build import build_native
from disc_core.passes import default_pipeline
from disc_runtime import CompileCache

RNG = np.random.default_rng(11)
#: under the 64-column floor (never streamed); multiples of 16 (the vector width on AVX2
#: and AVX-512, so the ``fast_vec`` version, the one with the streamed form) around the
#: chunk of 1024 and over several chunks; and odd lengths, which take the plain remainder
#: version on a symbolic width (and the streamed one on a static width)
COLUMNS = (7, 64, 65, 1008, 1023, 1024, 1040, 2512)


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


def part_functions(text: str) -> dict[str, str]:
    """Each kernel version's ``_part`` function in a module's C source, by name."""
    parts = {}
    for head in re.finditer(r"static void (kernel\d+_\w+)_part\(", text):
        end = text.index("\n}\n", head.end())
        parts[head.group(1)] = text[head.end():end]
    return parts


def test_only_the_version_large_contiguous_calls_take_has_the_streamed_form() -> None:
    """A symbolic row width: the vector-multiple version streams, the remainder, short-row
    and strided versions keep one plain loop. A static width: the ``fast`` version. The
    streamed form writes through one loop (the element computation appears once)."""
    b = GraphBuilder("implicit_broadcast")  # y's rows may be 1 at run time: speculative
    R, M, H = b.symbol("R"), b.symbol("M"), b.symbol("H")
    x, y = b.input("x", "f32", [R, H]), b.input("y", "f32", [M, H])
    parts = part_functions(sources(b.build(b.add(x, b.broadcast_in_dim(
        y, shape=[R, H], broadcast_dimensions=[0, 1])))))
    ln = part_functions(sources(catalog.layernorm()))
    static = part_functions(sources(catalog.layernorm(hidden=768)))
    for p in (parts, ln):
        assert {"kernel0_fast", "kernel0_fast_vec", "kernel0_fast_short"} <= set(p)
        streamed = {name for name, body in p.items() if "disc_stream_bytes(" in body}
        assert streamed == {"kernel0_fast_vec"}, streamed
    assert "kernel0_strided" in parts
    assert set(static) == {"kernel0_fast"} and "disc_stream_bytes(" in static["kernel0_fast"]
    body = ln["kernel0_fast_vec"]
    assert body.count("dst0[c - c0] = ") == 1 and "out0[r*C + c] = " not in body


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
