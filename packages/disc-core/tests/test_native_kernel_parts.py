"""A kernel's ``_part`` function (its rows or chunks) stays a function of its own
(``DISC_PART``, noinline): inlined into the OpenMP-outlined parallel loop, its pointers
lose ``restrict`` and gcc left the inner loop scalar, data-dependent branches included."""

from __future__ import annotations

import re
import subprocess

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


def _distinct_part_functions(source: str) -> dict[str, int]:
    """Each ``_part`` function of ``source`` by name -> its first line, keeping one of any
    that are the same code once the prelude's target macros are expanded: a version whose
    attribute is empty on this CPU (DISC_SHORT_ROWS without AVX-512) is the general
    version's twin, and gcc folds identical functions into one before vectorizing."""
    lines = source.splitlines()
    first = next(i for i, line in enumerate(lines) if "_part(" in line)
    macros = {m: _expanded("\n".join(lines[:first]), m) for m in ("DISC_SHORT_ROWS", "DISC_WIDE")}
    seen: set[str] = set()
    out: dict[str, int] = {}
    for i, line in enumerate(lines):
        m = re.search(r"static void (\w+)_part\(", line)
        if not m:
            continue
        end = next(j for j in range(i, len(lines)) if lines[j] == "}")
        attrs = line[:m.start()]
        for macro, value in macros.items():
            attrs = attrs.replace(macro, value)
        body = re.sub(r"\bv\d+\b", "v", "\n".join([" ".join(attrs.split())] + lines[i + 1:end]))
        if body not in seen:
            seen.add(body)
            out[m.group(1)] = i + 1
    return out


def _expanded(prelude: str, macro: str) -> str:
    """What ``macro`` expands to after ``prelude`` with the flags modules are built with."""
    from disc_core.native.toolchain import find_toolchain

    tc = find_toolchain()
    text = subprocess.run([tc.cc, *tc.flags, "-E", "-P", "-x", "c", "-"], check=True,
                          input=f"{prelude}\nDISC_EXPANDED {macro};\n", capture_output=True,
                          text=True).stdout
    return text.rsplit("DISC_EXPANDED", 1)[1].split(";", 1)[0].strip()


def test_gelu_on_a_symbolic_hidden_size_is_vectorized_in_every_version() -> None:
    """erf inlined (DISC_MATH, always_inline) in each of the kernel's versions (general,
    vector-multiple, short rows where they differ from the general one): at -O2 gcc had
    left it a call, and each version's loop scalar. The vector-multiple version runs
    full-width vectors: with -march=znver1 gcc preferred 16-byte vectors on AVX2."""
    g = catalog.gelu_bias_residual()  # hidden size symbolic
    default_pipeline().run(g)
    build = build_native(g, vector_report=True)
    report = build.metadata["vector_report"]
    source = build.files["native/module.c"].decode()
    parts = _distinct_part_functions(source)
    starts = sorted((line, name) for name, line in parts.items())
    widths: dict[str, set[int]] = {}
    for line, width in re.findall(r"module\d*\.c:(\d+):\d+: optimized: loop vectorized "
                                  r"using (\d+) byte vectors", report):
        name = max((s for s in starts if s[0] <= int(line)), default=(0, None))[1]
        widths.setdefault(name, set()).add(int(width))
    assert set(parts) <= set(widths), (parts, report)
    prelude = source[:source.index("DISC_PART static void")]
    lanes = int(_expanded(prelude, "DISC_VEC_LANES"))  # 4-byte lanes of the widest vectors
    assert max(widths["kernel0_fast_vec"]) == 4 * lanes, report


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
