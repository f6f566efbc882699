"""Shape facts the native engine must check at run time.

Verification accepts an equality between dims it cannot prove (a reshape's element counts,
a dot_general's contraction dims, concatenate's other dims) and states it as a fact that
shape propagation and the kernels take as true. The reference engine fails a call that
breaks one; the native module must fail it too, before any kernel runs, so that bridges
fall back to the framework instead of returning a wrong answer. A fact that holds
structurally costs nothing: no check in the generated C.
"""

from __future__ import annotations

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, compile_text, interpret
from disc_core.opdef import InterpretError
from disc_core.printer import print_graph
from disc_core.symbolic import floordiv
from disc_runtime import CompileCache, InputError

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
F32 = np.float32
COUNT_MESSAGE = r"op #\d+ \(reshape\): the operand \[.*\] has 15 elements but the result .* has 12"


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    return Compiler(CompileCache(tmp_path_factory.mktemp("cache")), target="native")


def native(compiler, graph):
    exe = compiler.compile(graph)
    assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
    return exe


def agree(exe, graph, inputs):
    for got, want in zip(exe.run(inputs), interpret(graph, inputs), strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def rows(n: int, cols: int = 3) -> np.ndarray:
    return np.arange(n * cols, dtype=F32).reshape(n, cols) / 7 - 1


def halves_graph(around: bool):
    """x[s0, 3] -> [2, s0 // 2, 3]: element counts equal only for even s0 (the issue's
    repro; ``around``: computed before and used by elementwise ops after)."""
    b = GraphBuilder("halves")
    s = b.symbol("s0")
    x = b.input("x", "f32", [s, 3])
    src = b.op("exp", b.op("neg", x)) if around else x
    y = b.reshape_to(src, [2, floordiv(s, 2), 3])
    out = b.op("add", y, y)
    return b.build(b.op("tanh", b.op("mul", out, y)) if around else out)


@pytest.mark.parametrize("around", [False, True], ids=["bare", "fused"])
def test_reshape_element_count_is_checked(compiler, around):
    graph = halves_graph(around)
    exe = native(compiler, graph)
    for n in (0, 2, 4, 6, 130):
        agree(exe, graph, [rows(n)])
    for n in (1, 5, 131):
        with pytest.raises(InterpretError):
            interpret(graph, [rows(n)])
        with pytest.raises(InputError, match=r"op #\d+ \(reshape\).*elements"):
            exe.run([rows(n)])
    with pytest.raises(InputError, match=COUNT_MESSAGE):
        exe.run([rows(5)])


def test_reshape_of_a_value_computed_in_a_kernel(compiler):
    """The reshaped value is written by one kernel and read under the result's (smaller)
    shape by the next: the check runs before either."""
    b = GraphBuilder("computed")
    s, h = b.symbol("s0"), b.symbol("h")
    x, w = b.input("x", "f32", [s, h]), b.input("w", "f32", [h])
    wb = b.op("broadcast_in_dim", w, shape=[s, h], broadcast_dimensions=[1])
    y = b.reshape_to(b.op("mul", b.op("exp", x), wb), [floordiv(s, 2), 2 * h])
    graph = b.build(b.op("reduce", b.op("sqrt", y), kind="sum", axes=[1]))
    exe = native(compiler, graph)
    for n in (0, 2, 8):
        agree(exe, graph, [rows(n, 5), np.ones(5, F32)])
    with pytest.raises(InputError, match=r"\(reshape\).* has 35 elements but the result .* "
                                         r"has 30"):
        exe.run([rows(7, 5), np.ones(5, F32)])


def test_folded_reshape_chain_keeps_its_check(compiler):
    """reshape(reshape(x, [2, s0 // 2, 3]), [s0, 3]) is not x: canonicalization once folded
    the pair, so neither engine failed for odd s0."""
    b = GraphBuilder("chain")
    s = b.symbol("s0")
    x = b.input("x", "f32", [s, 3])
    y = b.reshape_to(b.reshape_to(x, [2, floordiv(s, 2), 3]), [s, 3])
    graph = b.build(b.op("add", y, y))
    exe = native(compiler, graph)
    agree(exe, graph, [rows(4)])
    with pytest.raises(InputError, match=COUNT_MESSAGE):
        exe.run([rows(5)])
    with pytest.raises(InterpretError):
        Compiler(target="reference").compile(graph).run([rows(5)])


def test_dot_general_contraction_dims_are_checked(compiler):
    """lhs [m, s] contracted with rhs [2*t, n]: BLAS was called with K = s, reading past
    the rhs when s > 2*t."""
    b = GraphBuilder("dot")
    m, s, t, n = (b.symbol(c) for c in "mstn")
    x, z = b.input("x", "f32", [m, s]), b.input("z", "f32", [t, 2, n])
    r = b.reshape_to(z, [2 * t, n])
    graph = b.build(b.op("dot_general", x, r, lhs_batch=[], rhs_batch=[], lhs_contract=[1],
                         rhs_contract=[0]))
    exe = native(compiler, graph)
    agree(exe, graph, [rows(3, 4), np.ones((2, 2, 5), F32)])
    agree(exe, graph, [rows(0, 6), np.ones((3, 2, 5), F32)])
    for k in (2, 6):
        with pytest.raises(InputError, match=rf"op #\d+ \(dot_general\): dims s = {k} and "
                                             r"2\*t = 4 must be equal"):
            exe.run([rows(3, k), np.ones((2, 2, 5), F32)])


def test_concatenate_other_dims_are_checked(compiler):
    b = GraphBuilder("cat")
    s, t = b.symbol("s"), b.symbol("t")
    x, z = b.input("x", "f32", [s, 3]), b.input("z", "f32", [t, 2, 4])
    graph = b.build(b.op("concatenate", x, b.reshape_to(z, [2 * t, 4]), dimension=1))
    exe = native(compiler, graph)
    agree(exe, graph, [rows(4), np.ones((2, 2, 4), F32)])
    with pytest.raises(InputError, match=r"op #\d+ \(concatenate\): dims 2\*t = 4 and s = 6"):
        exe.run([rows(6), np.ones((2, 2, 4), F32)])


def _host_source(graph) -> str:
    return compile_text(print_graph(graph), stop_after="emit", target="native").text


def test_provable_reshapes_emit_no_check():
    """[b, s, h] -> [b*s, h] and back, [s0, 4] -> [s0, 2, 2]: equal element counts by
    construction, so no check (and no failure message) in the module."""
    b = GraphBuilder("provable")
    bs, s, h = b.symbol("b"), b.symbol("s"), b.symbol("h")
    x = b.input("x", "f32", [bs, s, h])
    y = b.reshape_to(b.op("exp", b.reshape_to(x, [bs * s, h])), [bs, s * h])
    z = b.input("z", "f32", [s, 4])
    w = b.reshape_to(b.op("neg", z), [s, 2, 2])
    src = _host_source(b.build(b.op("tanh", y), b.op("exp", w)))
    assert "disc_run" in src
    assert "elements but the result" not in src and "must be equal" not in src


def test_unprovable_reshape_emits_one_check():
    src = _host_source(halves_graph(around=True))
    assert src.count("elements but the result") == 1
    # before the outputs are allocated, so before any kernel runs
    assert src.index("elements but the result") < src.index("env->alloc(")
