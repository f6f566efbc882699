"""A kernel's ``_part`` function (its rows or chunks) stays a function of its own
(``DISC_PART``, noinline): inlined into the OpenMP-outlined parallel loop, its pointers
lose ``restrict`` and gcc left the inner loop scalar, data-dependent branches included."""

from __future__ import annotations

import re

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, catalog, interpret
from disc_core.native.build import build_native
from disc_core.passes import default_pipeline
from disc_runtime import CompileCache


def gelu_only():
    """Exact GELU of [R, 768]: the graph whose loop gcc left scalar once inlined."""
    b = GraphBuilder("gelu")
    R, H = b.symbol("R"), 768
    x = b.input("x", "f32", [R, H])
    erf = b.erf(b.mul(x, b.full(0.7071067811865476, "f32", [R, H])))
    half = b.mul(x, b.full(0.5, "f32", [R, H]))
    return b.build(b.mul(half, b.add(erf, b.full(1.0, "f32", [R, H]))))


def test_gelu_loop_is_vectorized() -> None:
    g = gelu_only()
    default_pipeline().run(g)
    report = build_native(g, vector_report=True).metadata["vector_report"]
    assert "loop vectorized" in report, report


def test_gelu_on_a_symbolic_hidden_size_is_vectorized_in_every_version() -> None:
    """erf inlined (DISC_MATH, always_inline) in each of the kernel's three versions
    (general, vector-multiple, short rows): at -O2 gcc had left it a call, and each
    version's loop scalar."""
    g = catalog.gelu_bias_residual()  # hidden size symbolic
    default_pipeline().run(g)
    report = build_native(g, vector_report=True).metadata["vector_report"]
    loops = set(re.findall(r"(module\d*\.c:\d+):\d+: optimized: loop vectorized", report))
    assert len(loops) >= 3, report


@pytest.mark.parametrize("graph", [gelu_only, catalog.layernorm, lambda: catalog.softmax(3),
                                   catalog.layernorm_backward])
def test_every_part_function_is_kept_out_of_line(graph) -> None:
    g = graph()
    default_pipeline().run(g)
    text = "\n".join(v.decode() for k, v in build_native(g).files.items() if k.endswith(".c"))
    parts = re.findall(r"^(.*)static void (kernel\d+_\w+)_part\(", text, re.M)
    assert parts
    assert all("DISC_PART" in attrs for attrs, _ in parts), parts


def test_gelu_matches_the_interpreter(tmp_path) -> None:
    exe = Compiler(CompileCache(tmp_path), target="native").compile(gelu_only())
    rng = np.random.default_rng(3)
    for rows, scale in [(0, 1.0), (1, 1.0), (7, 0.01), (136, 5.0), (300, 1.0)]:
        x = (rng.standard_normal((rows, 768)) * scale).astype(np.float32)
        (got,) = exe.run([x])
        (want,) = interpret(gelu_only(), [x])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
