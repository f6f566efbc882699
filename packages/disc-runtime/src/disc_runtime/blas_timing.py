"""How fast a BLAS library runs the GEMMs compiled modules make, measured on this machine.

A bridge prefers its framework's BLAS (disc-torch: the MKL inside libtorch_cpu) so that
DISC's GEMMs run what eager mode runs, but the fastest library depends on the CPU: on a
2-core AMD EPYC (Zen 5) numpy's OpenBLAS ran transformer-sized single-thread GEMMs 10-27%
faster than that MKL, on Intel Xeons MKL was 1.1-1.4x faster than OpenBLAS. So the choice
is measured, once per process (about 10-20 ms), the way modules call BLAS: one thread per
call (modules split a GEMM across their own OpenMP team), row-major operands through the
ILP64 Fortran interface (or oneDNN's row-major ``dnnl_sgemm``, which modules call for f32
when it is installed), the layouts of a linear layer's forward and backward, a
convolution's skinny im2col product and an attention score product.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import cffi
import numpy as np

__all__ = ["GEMM_SHAPES", "fortran_sgemm", "onednn_sgemm", "onednn_sgemm_seconds", "sgemm_seconds"]

_ffi = cffi.FFI()
_ffi.cdef("""
typedef void (*disc_sgemm_fn)(const char *, const char *, const int64_t *, const int64_t *,
    const int64_t *, const float *, const float *, const int64_t *, const float *,
    const int64_t *, const float *, float *, const int64_t *, size_t, size_t);
typedef int (*disc_threads_local_fn)(int);
typedef int (*disc_sgemm_rowmajor_fn)(char, char, int64_t, int64_t, int64_t, float,
    const float *, int64_t, const float *, int64_t, float, float *, int64_t);
""")

#: (transpose A, transpose B, M, N, K) of row-major C[M, N] = op(A) op(B), each one
#: thread's share of a module's GEMM: linear layers (forward, input and weight gradients)
#: at 480 tokens split over 2 threads, a 3x3x3 convolution's im2col product, attention
#: scores of a 120-token head
GEMM_SHAPES: tuple[tuple[bool, bool, int, int, int], ...] = (
    (False, False, 240, 768, 256),
    (False, True, 240, 256, 1024),
    (True, False, 256, 768, 240),
    (False, False, 2048, 32, 27),
    (False, True, 120, 120, 64),
)


def fortran_sgemm(sgemm: int, ta: bool, tb: bool, a: np.ndarray, b: np.ndarray,
                   c: np.ndarray) -> None:
    """``c = op(a) @ op(b)`` (row-major float32 arrays) through the Fortran-interface
    ``sgemm`` at address ``sgemm``: column-major, it computes c' = op(b)' op(a)'."""
    fn = _ffi.cast("disc_sgemm_fn", sgemm)
    m, n = c.shape
    k = a.shape[0] if ta else a.shape[1]
    i64 = _ffi.new("int64_t[6]", [n, m, k, b.shape[1], a.shape[1], n])
    alpha, beta = _ffi.new("float *", 1.0), _ffi.new("float *", 0.0)
    fn(b"T" if tb else b"N", b"T" if ta else b"N", i64 + 0, i64 + 1, i64 + 2, alpha,
       _ffi.cast("float *", _ffi.from_buffer(b)), i64 + 3,
       _ffi.cast("float *", _ffi.from_buffer(a)), i64 + 4, beta,
       _ffi.cast("float *", _ffi.from_buffer(c)), i64 + 5, 1, 1)


def onednn_sgemm(sgemm_rowmajor: int, ta: bool, tb: bool, a: np.ndarray, b: np.ndarray,
                 c: np.ndarray) -> None:
    """``c = op(a) @ op(b)`` through oneDNN's row-major ``dnnl_sgemm`` (arguments by value)
    at address ``sgemm_rowmajor``."""
    fn = _ffi.cast("disc_sgemm_rowmajor_fn", sgemm_rowmajor)
    m, n = c.shape
    k = a.shape[0] if ta else a.shape[1]
    status = fn(b"T" if ta else b"N", b"T" if tb else b"N", m, n, k, 1.0,
                _ffi.cast("float *", _ffi.from_buffer(a)), a.shape[1],
                _ffi.cast("float *", _ffi.from_buffer(b)), b.shape[1], 0.0,
                _ffi.cast("float *", _ffi.from_buffer(c)), n)
    if status != 0:
        raise RuntimeError(f"dnnl_sgemm returned status {status}")


def onednn_sgemm_seconds(sgemm_rowmajor: int,
                           shapes: Sequence[tuple[bool, bool, int, int, int]] = GEMM_SHAPES,
                           repeats: int = 3) -> float:
    """:func:`sgemm_seconds` for oneDNN's ``dnnl_sgemm``: on one OpenMP thread (inside a
    module's parallel region it runs on the calling thread alone)."""
    import ctypes

    try:
        gomp = ctypes.CDLL("libgomp.so.1")
    except OSError:
        gomp = None
    previous = gomp.omp_get_max_threads() if gomp is not None else None
    if gomp is not None:
        gomp.omp_set_num_threads(1)
    try:
        return _best_total(lambda ta, tb, a, b, c: onednn_sgemm(sgemm_rowmajor, ta, tb, a, b, c),
                           shapes, repeats)
    finally:
        if gomp is not None:
            gomp.omp_set_num_threads(previous)


def _best_total(run, shapes: Sequence[tuple[bool, bool, int, int, int]], repeats: int
                ) -> float:
    rng = np.random.default_rng(0)
    total = 0.0
    for ta, tb, m, n, k in shapes:
        a = rng.standard_normal((k, m) if ta else (m, k), dtype=np.float32)
        b = rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
        c = np.empty((m, n), np.float32)
        run(ta, tb, a, b, c)
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            run(ta, tb, a, b, c)
            best = min(best, time.perf_counter() - start)
        total += best
    return total


def sgemm_seconds(sgemm: int, threads_local: int = 0,
                  shapes: Sequence[tuple[bool, bool, int, int, int]] = GEMM_SHAPES,
                  repeats: int = 3) -> float:
    """Seconds one thread takes for one of each of ``shapes`` (best of ``repeats`` after a
    warm-up call each). ``threads_local`` (the library's per-thread thread-count setter,
    0 if none) pins the library to one thread meanwhile, as modules do."""
    setter = _ffi.cast("disc_threads_local_fn", threads_local) if threads_local else None
    previous = setter(1) if setter is not None else None
    try:
        return _best_total(lambda ta, tb, a, b, c: fortran_sgemm(sgemm, ta, tb, a, b, c),
                           shapes, repeats)
    finally:
        if setter is not None:
            setter(previous)
