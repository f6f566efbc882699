"""GEMMs with a small C over a long K (weight gradients) split K across the module's team
and add the partial products: right against numpy for every transpose layout, batch
counts around the team size, K not a multiple of the team, and both dtypes."""

from __future__ import annotations

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder
from disc_runtime import CompileCache

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
RNG = np.random.default_rng(9)


def _gemm(ta: bool, tb: bool, batched: bool, dtype: str):
    b = GraphBuilder("gemm")
    M, N, K, B = b.symbol("M"), b.symbol("N"), b.symbol("K"), b.symbol("B")
    lead = [B] if batched else []
    x = b.input("x", dtype, lead + ([K, M] if ta else [M, K]))
    w = b.input("w", dtype, lead + ([N, K] if tb else [K, N]))
    nb = len(lead)
    return b.build(b.dot_general(x, w, lhs_batch=list(range(nb)), rhs_batch=list(range(nb)),
                                 lhs_contract=[nb + (0 if ta else 1)],
                                 rhs_contract=[nb + (1 if tb else 0)]))


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    return Compiler(CompileCache(tmp_path_factory.mktemp("cache")), target="native")


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_split_k_products_are_right(compiler, ta, tb, dtype) -> None:
    np_dtype = np.float32 if dtype == "f32" else np.float64
    tol = 2e-4 if dtype == "f32" else 1e-10
    # (M, N, K, batches): split K (a long K under a small C, one batch or fewer than the
    # team), the row/column split, an odd K, a 1x1 C
    cases = [(32, 27, 8193, 1), (27, 32, 4096, 1), (5, 3, 70001, 1), (64, 48, 96, 1),
             (3, 2, 9001, 3), (1, 1, 20000, 1), (2, 3, 40000, 2)]
    for batched in (False, True):
        exe = compiler.compile(_gemm(ta, tb, batched, dtype))
        for m, n, k, nbatch in cases:
            if not batched and nbatch != 1:
                continue
            lead = (nbatch,) if batched else ()
            x = RNG.standard_normal(lead + ((k, m) if ta else (m, k))).astype(np_dtype)
            w = RNG.standard_normal(lead + ((n, k) if tb else (k, n))).astype(np_dtype)
            xs = np.swapaxes(x, -1, -2) if ta else x
            ws = np.swapaxes(w, -1, -2) if tb else w
            want = xs.astype(np.float64) @ ws.astype(np.float64)
            got = exe.run([x, w])[0]
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.sqrt(k))
