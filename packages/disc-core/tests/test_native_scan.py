"""The native scan (cumulative): one accumulator loop per outer index and inner chunk,
checked against the reference interpreter on symbolic shapes, every kind and dtype the
native engine has, each axis position, sizes 0 and 1 and parallel-sized work."""

from __future__ import annotations

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, interpret
from disc_runtime import CompileCache

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
RNG = np.random.default_rng(0)
NP = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    return Compiler(CompileCache(tmp_path_factory.mktemp("cache")), target="native")


@pytest.mark.parametrize("dtype", list(NP))
@pytest.mark.parametrize("kind", ["sum", "prod", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_cumulative_matches_the_interpreter(compiler, dtype, kind, axis) -> None:
    b = GraphBuilder("scan")
    A, B, C = b.symbol("A"), b.symbol("B"), b.symbol("C")
    x = b.input("x", dtype, [A, B, C])
    g = b.build(b.abs(b.cumulative(b.neg(x), kind=kind, axis=axis)))
    exe = compiler.compile(g)
    assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
    assert exe.artifact.metadata["native"]["fusion"]["scancall"] == 1
    for shape in [(2, 3, 4), (1, 1, 1), (0, 3, 2), (3, 0, 2), (2, 3, 0), (5, 301, 3),
                  (2, 2, 700), (40, 41, 40)]:
        scale = 1.1 if kind == "prod" else 3.0
        xs = (RNG.standard_normal(shape) * scale).astype(NP[dtype])
        if dtype == "f32" and xs.size > 3:
            xs.flat[2] = np.nan  # max/min/sum propagate it along the axis
        got, want = exe.run([xs])[0], interpret(g, [xs])[0]
        assert got.shape == want.shape and got.dtype == want.dtype
        # the same sequential accumulation in the same precision: equal up to libm
        np.testing.assert_allclose(got, want, rtol=1e-12 if dtype != "f32" else 1e-7,
                                   equal_nan=True)


def test_reverse_cumsum_through_reverse(compiler) -> None:
    """The scan torch's cumsum backward needs: reverse, scan, reverse."""
    b = GraphBuilder("rscan")
    N, T = b.symbol("N"), b.symbol("T")
    x = b.input("x", "f64", [N, T])
    g = b.build(b.reverse(b.cumulative(b.reverse(x, dimensions=[1]), kind="sum", axis=1),
                          dimensions=[1]))
    for shape in [(3, 7), (1, 1), (0, 5), (4, 0), (2, 1000)]:
        xs = RNG.standard_normal(shape)
        got = compiler.compile(g).run([xs])[0]
        np.testing.assert_allclose(got, np.flip(np.cumsum(np.flip(xs, 1), 1), 1), rtol=1e-12,
                                   atol=1e-12)
