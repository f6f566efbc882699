"""Math functions are not fused through a broadcast that would run them once per index of
an outer dim (native/fusion.py, ``_recomputed_per_outer_index``): Llama's rotary
embedding applies cos and sin of a [S, D] table to [B, H, S, D] queries, and fused they
ran H times over. Per-row values (log of a softmax sum) and invariants of the inner loop
still fuse."""

from __future__ import annotations

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, catalog, interpret
from disc_core.native.build import lower_native
from disc_core.native.fusion import Kernel, plan_fusion
from disc_core.passes import default_pipeline
from disc_runtime import CompileCache

RNG = np.random.default_rng(7)


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    return Compiler(CompileCache(tmp_path_factory.mktemp("cache")), target="native")


def _kernels(graph) -> list[Kernel]:
    default_pipeline().run(graph)
    lower_native(graph)
    return [s for s in plan_fusion(graph).steps if isinstance(s, Kernel)]


def _ops_of(kernel: Kernel) -> set[str]:
    return {op.name for op in kernel.ops}


def _check(compiler, graph, inputs) -> None:
    exe = compiler.compile(graph)
    assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
    for got, want in zip(exe.run(inputs), interpret(graph, inputs), strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def rotary():
    """q * cos(t) + rotate_half(q) * sin(t): t [S, D] broadcast over [B, H, S, D]."""
    b = GraphBuilder("rotary")
    B, H, S, D = (b.symbol(n) for n in "BHSD")
    q = b.input("q", "f32", [B, H, S, D])
    t = b.input("t", "f32", [S, D])
    shape = [B, H, S, D]
    cos = b.broadcast_in_dim(b.cos(t), shape=shape, broadcast_dimensions=[2, 3])
    sin = b.broadcast_in_dim(b.sin(t), shape=shape, broadcast_dimensions=[2, 3])
    return b.build(b.add(b.mul(q, cos), b.mul(b.neg(q), sin)))


def column_exp():
    """x * exp(w): a per-column math function over [R, C] rows."""
    b = GraphBuilder("column_exp")
    R, C = b.symbol("R"), b.symbol("C")
    x, w = b.input("x", "f32", [R, C]), b.input("w", "f32", [C])
    return b.build(b.mul(x, b.broadcast_in_dim(b.exp(w), shape=[R, C],
                                                broadcast_dimensions=[1])))


def test_cos_and_sin_of_a_table_run_once_per_table_element():
    ks = _kernels(rotary())
    big = [k for k in ks if len(k.space) == 4]
    assert len(big) == 1 and not _ops_of(big[0]) & {"cos", "sin"}, [
        (k.space, sorted(_ops_of(k))) for k in ks]
    small = [k for k in ks if _ops_of(k) & {"cos", "sin"}]
    assert small and all(len(k.space) == 2 for k in small)


def test_a_per_column_math_function_runs_once_per_column():
    ks = _kernels(column_exp())
    (exp_kernel,) = [k for k in ks if "exp" in _ops_of(k)]
    assert len(exp_kernel.space) == 1


def test_per_row_and_inner_invariant_values_still_fuse():
    """log-softmax: exp over every element and log of each row's sum in one row kernel;
    exp of a per-row value broadcast along the inner dim fuses into the loop too."""
    b = GraphBuilder("log_softmax")
    R, C = b.symbol("R"), b.symbol("C")
    x = b.input("x", "f32", [R, C])
    m = b.broadcast_in_dim(b.reduce(x, kind="max", axes=[1]), shape=[R, C],
                           broadcast_dimensions=[0])
    z = b.sub(x, m)
    lse = b.log(b.reduce(b.exp(z), kind="sum", axes=[1]))
    (k,) = _kernels(b.build(b.sub(z, b.broadcast_in_dim(lse, shape=[R, C],
                                                         broadcast_dimensions=[0]))))
    assert {"exp", "log"} <= _ops_of(k)
    assert len(_kernels(catalog.softmax(3))) == 1
    b = GraphBuilder("row_scale")
    R, C = b.symbol("R"), b.symbol("C")
    x, s = b.input("x", "f32", [R, C]), b.input("s", "f32", [R])
    g = b.build(b.mul(x, b.broadcast_in_dim(b.exp(s), shape=[R, C], broadcast_dimensions=[0])))
    (k,) = _kernels(g)
    assert "exp" in _ops_of(k)


@pytest.mark.parametrize("shape", [(2, 4, 5, 8), (1, 1, 1, 1), (3, 1, 7, 6), (2, 3, 0, 4),
                                   (1, 2, 33, 130)])
def test_rotary_matches_the_interpreter(compiler, shape):
    B, H, S, D = shape
    q = RNG.standard_normal(shape).astype(np.float32)
    t = (RNG.standard_normal((S, D)) * 4).astype(np.float32)
    _check(compiler, rotary(), [q, t])


@pytest.mark.parametrize("shape", [(3, 5), (1, 1), (0, 4), (4, 0), (17, 1000)])
def test_column_exp_matches_the_interpreter(compiler, shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    w = RNG.standard_normal(shape[1]).astype(np.float32)
    _check(compiler, column_exp(), [x, w])
