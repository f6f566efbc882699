"""Transposes that move the innermost dim run in tiles (kernel_emit: tiled_transpose_body): exact
results for every permutation kind, odd, empty and power-of-two extents, every dtype."""

from __future__ import annotations

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder
from disc_runtime import CompileCache

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
RNG = np.random.default_rng(5)


def _transpose_graph(rank: int, perm: list[int], dtype: str):
    b = GraphBuilder("t")
    x = b.input("x", dtype, [b.symbol(f"d{i}") for i in range(rank)])
    return b.build(b.transpose(x, permutation=perm))


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    return Compiler(CompileCache(tmp_path_factory.mktemp("cache")), target="native")


@pytest.mark.parametrize("perm", [[1, 0], [0, 2, 1], [2, 0, 1], [2, 3, 0, 1], [0, 2, 3, 1],
                                  [3, 2, 1, 0]])
def test_tiled_transposes_are_exact(compiler, perm) -> None:
    exe = compiler.compile(_transpose_graph(len(perm), perm, "f32"))
    assert "tiles" in exe.artifact.path("native/module.c").read_text()  # the tiled path
    shapes = [(32,) * len(perm), (17,) * len(perm), (1,) * len(perm), (5, 0, 3, 2)[:len(perm)],
              (40, 3, 64, 33)[:len(perm)], (2, 16, 16, 48)[:len(perm)]]
    for shape in shapes:
        x = RNG.standard_normal(shape).astype(np.float32)
        np.testing.assert_array_equal(exe.run([x])[0], np.transpose(x, perm))


@pytest.mark.parametrize("dtype,np_dtype", [("f64", np.float64), ("i64", np.int64),
                                            ("i32", np.int32), ("bool", np.bool_)])
def test_tiled_transposes_of_every_dtype(compiler, dtype, np_dtype) -> None:
    exe = compiler.compile(_transpose_graph(3, [2, 0, 1], dtype))
    x = (RNG.standard_normal((7, 19, 33)) * 100).astype(np_dtype)
    np.testing.assert_array_equal(exe.run([x])[0], np.transpose(x, [2, 0, 1]))


def test_transposes_keeping_the_innermost_dim_stay_row_loops(compiler) -> None:
    """[B, T, H, D] -> [B, H, T, D] (attention heads) reads whole rows already."""
    g = _transpose_graph(4, [0, 2, 1, 3], "f32")
    exe = compiler.compile(g)
    assert "tiles" not in exe.artifact.path("native/module.c").read_text()
    x = RNG.standard_normal((2, 5, 3, 8)).astype(np.float32)
    np.testing.assert_array_equal(exe.run([x])[0], np.transpose(x, [0, 2, 1, 3]))


def test_fused_transposes_are_not_tiled(compiler) -> None:
    """A transpose feeding arithmetic in the same kernel keeps the general row loop."""
    b = GraphBuilder("fused")
    x = b.input("x", "f32", [b.symbol("a"), b.symbol("b")])
    exe = compiler.compile(b.build(b.exp(b.transpose(x, permutation=[1, 0]))))
    assert "tiles" not in exe.artifact.path("native/module.c").read_text()
    v = RNG.standard_normal((9, 20)).astype(np.float32)
    np.testing.assert_allclose(exe.run([v])[0], np.exp(v.T), rtol=1e-6)

