"""A Python stand-in for ``disc_env.sgemm_rowmajor`` (oneDNN's ``dnnl_sgemm`` signature):
it computes with numpy from the raw pointers and strides a module hands it, and records
each call, so tests can check what a module asked of its GEMM on any machine."""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from disc_core import Compiler
from disc_runtime import CompileCache, native

i64, f32, vp = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
ROWMAJOR = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char, ctypes.c_char, i64, i64, i64, f32, vp,
                            i64, vp, i64, f32, vp, i64)


def _matrix(ptr: int, rows: int, cols: int, ld: int) -> np.ndarray:
    """The row-major rows x cols matrix at ``ptr`` with leading dimension ``ld``."""
    n = (rows - 1) * ld + cols
    flat = np.ctypeslib.as_array((ctypes.c_float * n).from_address(ptr))
    return np.lib.stride_tricks.as_strided(flat, (rows, cols), (ld * 4, 4))


class FakeRowMajorGemm:
    """C = alpha op(A) op(B) + beta C in numpy, recording every call's (transa, transb, M,
    N, K) in ``calls``, its (A, B, C) addresses in ``pointers`` and its (lda, ldb) in
    ``leading``; beta = 0 must not read C, so C is overwritten rather than scaled then."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int, int, int]] = []
        self.pointers: list[tuple[int, int, int]] = []
        self.leading: list[tuple[int, int]] = []
        self.lock = threading.Lock()
        self.fn = ROWMAJOR(self)
        self.address = ctypes.cast(self.fn, ctypes.c_void_p).value

    def __call__(self, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) -> int:
        ta, tb = ta.decode(), tb.decode()
        with self.lock:
            self.calls.append((ta, tb, m, n, k))
            self.pointers.append((a, b, c))
            self.leading.append((lda, ldb))
        opa = _matrix(a, m, k, lda) if ta == "N" else _matrix(a, k, m, lda).T
        opb = _matrix(b, k, n, ldb) if tb == "N" else _matrix(b, n, k, ldb).T
        out = _matrix(c, m, n, ldc)
        prod = alpha * (opa.astype(np.float64) @ opb.astype(np.float64))
        out[...] = prod if beta == 0 else prod + beta * out
        return 0


def install(monkeypatch, tmp_path) -> tuple[FakeRowMajorGemm, Compiler]:
    """A fake GEMM the runtime hands every module compiled by the returned compiler (a
    native-target compiler over a fresh cache in ``tmp_path``)."""
    gemm = FakeRowMajorGemm()
    real = native.blas_functions()
    monkeypatch.setattr(native, "blas_functions",
                        lambda: real._replace(sgemm_rowmajor=gemm.address))
    return gemm, Compiler(CompileCache(tmp_path / "cache"), target="native")
