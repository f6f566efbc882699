"""Who threads a GEMM: the module's OpenMP team (batches, else halves of rows or columns,
one BLAS thread each) or, when the runtime says the BLAS threads on the same OpenMP runtime
(``disc_env.blas_threads_openmp``, PyTorch's MKL), the BLAS itself for a product with too
few batches to go round the team.

The BLAS here is a Python stand-in for the Fortran ``sgemm`` and the per-thread
thread-count setter: it computes with numpy from the raw pointers it is given and records
every call's sizes and the BLAS thread count in effect on the calling thread, so the
choice, the blocks and the restored count are all checked against the reference
interpreter with any BLAS installed."""

from __future__ import annotations

import ctypes
import ctypes.util
import threading

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, interpret
from disc_runtime import CompileCache, native

i64p, f32p, vp = ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_float), ctypes.c_void_p
FORTRAN_SGEMM = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, i64p, i64p, i64p,
                                 f32p, vp, i64p, vp, i64p, f32p, vp, i64p, ctypes.c_size_t,
                                 ctypes.c_size_t)
SETTER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)
RNG = np.random.default_rng(11)


def _colmajor(ptr: int, rows: int, cols: int, ld: int) -> np.ndarray:
    """The column-major rows x cols matrix at ``ptr`` with leading dimension ``ld``."""
    n = (cols - 1) * ld + rows
    flat = np.ctypeslib.as_array((ctypes.c_float * n).from_address(ptr))
    return np.lib.stride_tricks.as_strided(flat, (rows, cols), (4, ld * 4))


GOMP = ctypes.CDLL(ctypes.util.find_library("gomp") or "libgomp.so.1")


class FakeBlas:
    """Fortran sgemm plus ``set_num_threads_local``; every sgemm call is recorded as
    (m, n, k, how it runs): "blas-threaded" when made outside any OpenMP team with the
    BLAS thread count set to 2, "team" when made by a member of the module's team (the
    module sets one BLAS thread on its calling thread; MKL and OpenBLAS run single-threaded
    inside a team), "serial" otherwise with one BLAS thread."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int, int]] = []
        self.lock = threading.Lock()
        self.local = threading.local()
        self.sgemm_fn = FORTRAN_SGEMM(self.sgemm)
        self.setter_fn = SETTER(self.set_threads)
        self.sgemm_address = ctypes.cast(self.sgemm_fn, vp).value
        self.setter_address = ctypes.cast(self.setter_fn, vp).value

    def threads(self) -> int:
        return getattr(self.local, "n", 7)  # 7: the count this thread started with

    def set_threads(self, n: int) -> int:
        prev = self.threads()
        self.local.n = n
        return prev

    def sgemm(self, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, _l1, _l2) -> None:
        m, n, k = m[0], n[0], k[0]
        how = ("team" if GOMP.omp_in_parallel() else
               "blas-threaded" if self.threads() == 2 else
               "serial" if self.threads() == 1 else f"{self.threads()} threads")
        with self.lock:
            self.calls.append((m, n, k, how))
        opa = _colmajor(a, m, k, lda[0]) if ta == b"N" else _colmajor(a, k, m, lda[0]).T
        opb = _colmajor(b, k, n, ldb[0]) if tb == b"N" else _colmajor(b, n, k, ldb[0]).T
        out = _colmajor(c, m, n, ldc[0])
        prod = alpha[0] * (opa.astype(np.float64) @ opb.astype(np.float64))
        out[...] = prod if beta[0] == 0 else prod + beta[0] * out


@pytest.fixture
def two_threads():
    """The calling thread's OpenMP team is two threads, whatever the machine has."""
    before = GOMP.omp_get_max_threads()
    GOMP.omp_set_num_threads(2)
    yield
    GOMP.omp_set_num_threads(before)


def _setup(monkeypatch, tmp_path, threads_openmp: bool) -> tuple[FakeBlas, Compiler]:
    blas = FakeBlas()
    real = native.blas_functions()
    monkeypatch.setattr(native, "blas_functions", lambda: real._replace(
        sgemm=blas.sgemm_address, set_num_threads_local=blas.setter_address,
        sgemm_rowmajor=0, threads_openmp=threads_openmp))
    return blas, Compiler(CompileCache(tmp_path / "cache"), target="native")


def _matmul_graph(batched: bool, rhs_t: bool):
    b = GraphBuilder(f"thr_{batched}_{rhs_t}")
    M, N, K = b.symbol("M"), b.symbol("N"), b.symbol("K")
    lead = [b.symbol("B")] if batched else []
    x = b.input("x", "f32", [*lead, M, K])
    w = b.input("w", "f32", [*lead, N, K] if rhs_t else [*lead, K, N])
    nb = len(lead)
    y = b.dot_general(x, w, lhs_batch=list(range(nb)), rhs_batch=list(range(nb)),
                      lhs_contract=[nb + 1], rhs_contract=[nb + 1 if rhs_t else nb])
    return b.build(b.tanh(y))


def _run(compiler, graph, inputs) -> None:
    exe = compiler.compile(graph)
    assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
    for g, w in zip(exe.run(inputs), interpret(graph, inputs)):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rhs_t", [False, True])
def test_a_blas_on_the_same_openmp_threads_a_lone_product_itself(
        monkeypatch, tmp_path, two_threads, rhs_t) -> None:
    blas, compiler = _setup(monkeypatch, tmp_path, threads_openmp=True)
    g = _matmul_graph(batched=False, rhs_t=rhs_t)
    # above the parallel threshold (B*M*N*K >= 262144): one call over all of C, with the
    # team's two threads given to the BLAS; M < N and M > N alike
    for m, n, k in [(96, 80, 64), (40, 200, 64), (201, 67, 33)]:
        blas.calls.clear()
        _run(compiler, g, [RNG.standard_normal((m, k)).astype(np.float32),
                           RNG.standard_normal((n, k) if rhs_t else (k, n)).astype(np.float32)])
        assert blas.calls == [(n, m, k, "blas-threaded")]  # column-major: C' = op(B)' op(A)'
        assert blas.threads() == 7  # the caller's BLAS thread count is restored
    # below it, and empty or unit sizes: one single-threaded call or none
    for m, n, k in [(3, 5, 7), (1, 1, 1), (0, 4, 3), (5, 3, 0)]:
        blas.calls.clear()
        _run(compiler, g, [RNG.standard_normal((m, k)).astype(np.float32),
                           RNG.standard_normal((n, k) if rhs_t else (k, n)).astype(np.float32)])
        assert blas.calls == ([(n, m, k, "serial")] if m and n and k else [])


def test_batches_that_go_round_the_team_still_split_over_it(monkeypatch, tmp_path,
                                                            two_threads) -> None:
    blas, compiler = _setup(monkeypatch, tmp_path, threads_openmp=True)
    g = _matmul_graph(batched=True, rhs_t=True)
    for bb, m, n, k in [(3, 40, 41, 64), (2, 64, 64, 64), (1, 96, 80, 64)]:
        blas.calls.clear()
        _run(compiler, g, [RNG.standard_normal((bb, m, k)).astype(np.float32),
                           RNG.standard_normal((bb, n, k)).astype(np.float32)])
        if bb >= 2:  # one call per batch, on the module's team
            assert blas.calls == [(n, m, k, "team")] * bb
        else:
            assert blas.calls == [(n, m, k, "blas-threaded")]


def test_a_blas_with_its_own_pool_gets_halves_of_the_product(monkeypatch, tmp_path,
                                                             two_threads) -> None:
    blas, compiler = _setup(monkeypatch, tmp_path, threads_openmp=False)
    g = _matmul_graph(batched=False, rhs_t=False)
    for m, n, k in [(96, 80, 64), (40, 200, 64)]:
        blas.calls.clear()
        _run(compiler, g, [RNG.standard_normal((m, k)).astype(np.float32),
                           RNG.standard_normal((k, n)).astype(np.float32)])
        assert len(blas.calls) == 2 and all(c[3] == "team" for c in blas.calls)
        assert sum(c[0] * c[1] for c in blas.calls) == m * n  # the halves tile C
        assert blas.threads() == 7
