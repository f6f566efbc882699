"""The ``native`` engine: runs a compiled C module (``native/module.so``) through ctypes.

The module's host function does the whole call natively (symbol binding, buffer
allocation, every kernel and BLAS call); Python only passes pointers in and allocates the
outputs when the module asks, through a callback, so a bridge can hand in its own
framework-allocated buffers (``allocate_output``). GEMM comes from the ILP64 OpenBLAS that
numpy wheels ship (``numpy.libs/libscipy_openblas64_*.so``), found once at load time and
passed to every call: the module itself keeps no global mutable state.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .artifact import Artifact
from .dtypes import numpy_dtype
from .errors import EngineError, InputError

ABI_VERSION = 1
MODULE_FILE = "native/module.so"

_AllocFn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_int64, ctypes.c_int64,
                            ctypes.POINTER(ctypes.c_int64))


class _Env(ctypes.Structure):
    _fields_ = [("alloc", _AllocFn), ("alloc_ctx", ctypes.py_object),
                ("sgemm", ctypes.c_void_p), ("dgemm", ctypes.c_void_p),
                ("counters", ctypes.POINTER(ctypes.c_int64))]


class _CallState:
    """Per-call output bookkeeping (one per call: calls may run concurrently)."""

    __slots__ = ("outputs", "allocate", "dtypes", "error")

    def __init__(self, dtypes: Sequence[np.dtype], allocate: Callable[..., Any] | None):
        self.outputs: list[np.ndarray | None] = [None] * len(dtypes)
        self.allocate = allocate
        self.dtypes = dtypes
        self.error: BaseException | None = None


def _alloc(state: _CallState, index: int, rank: int, shape_ptr: Any) -> int:
    try:
        shape = tuple(shape_ptr[i] for i in range(rank))
        if state.allocate is not None:
            arr = state.allocate(index, shape, state.dtypes[index].name)
        else:
            arr = np.empty(shape, state.dtypes[index])
        state.outputs[index] = arr
        return arr.__array_interface__["data"][0] or 1  # zero-size arrays may have no storage
    except BaseException as exc:  # never let an exception unwind through C frames
        state.error = exc
        return 0


_ALLOC = _AllocFn(_alloc)


@functools.lru_cache(maxsize=1)
def find_blas() -> tuple[int, int]:
    """(sgemm, dgemm) addresses of an ILP64 CBLAS, or (0, 0) when none is found."""
    candidates = []
    override = os.environ.get("DISC_BLAS_LIB")
    if override:
        candidates.append(override)
    np_dir = os.path.dirname(np.__file__)
    candidates += sorted(glob.glob(os.path.join(np_dir, os.pardir, "numpy.libs",
                                                "libscipy_openblas64_*.so")))
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
            s = ctypes.cast(lib.scipy_cblas_sgemm64_, ctypes.c_void_p).value
            d = ctypes.cast(lib.scipy_cblas_dgemm64_, ctypes.c_void_p).value
            return int(s or 0), int(d or 0)
        except (OSError, AttributeError):
            continue
    return 0, 0


class NativeModule:
    """A loaded module plus the signature facts a call needs."""

    def __init__(self, artifact: Artifact):
        self.lib = ctypes.CDLL(str(artifact.path(MODULE_FILE)))
        abi = self.lib.disc_abi_version()
        if abi != ABI_VERSION:
            raise EngineError(f"native module ABI {abi}, this disc-runtime speaks {ABI_VERSION}: "
                              f"recompile the artifact")
        self.fn = self.lib.disc_run
        self.fn.restype = ctypes.c_int64
        self.fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64),
                            ctypes.c_int64, ctypes.POINTER(_Env), ctypes.c_char_p,
                            ctypes.c_int64]
        sig = artifact.signature
        self.n_in = len(sig.inputs)
        self.out_dtypes = [numpy_dtype(s.dtype) for s in sig.outputs]
        self.num_counters = len(artifact.metadata.get("native", {}).get("counters", []))
        self.sgemm, self.dgemm = find_blas()
        self._local = threading.local()

    def _err(self) -> Any:
        buf = getattr(self._local, "err", None)
        if buf is None:
            buf = self._local.err = ctypes.create_string_buffer(512)
        return buf

    def run(self, inputs: list[np.ndarray], *, allocate_output: Callable[..., Any] | None = None,
            counters: np.ndarray | None = None) -> list[np.ndarray]:
        arrays = [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in inputs]
        ptrs = (ctypes.c_void_p * max(self.n_in, 1))(
            *[a.__array_interface__["data"][0] for a in arrays])
        dims = [d for a in arrays for d in a.shape]
        shapes = (ctypes.c_int64 * max(len(dims), 1))(*dims)
        state = _CallState(self.out_dtypes, allocate_output)
        cnt = (counters.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
               if counters is not None else None)
        env = _Env(_ALLOC, state, self.sgemm, self.dgemm, cnt)
        err = self._err()
        rc = self.fn(ptrs, shapes, len(arrays), ctypes.byref(env), err, 512)
        if state.error is not None:
            raise state.error
        if rc != 0:
            raise InputError(err.value.decode(errors="replace"))
        return state.outputs  # type: ignore[return-value]


def load_native_engine(artifact: Artifact) -> Callable[..., list[np.ndarray]]:
    module = NativeModule(artifact)

    def run(inputs: list[np.ndarray], allocate_output: Callable[..., Any] | None = None
            ) -> list[np.ndarray]:
        return module.run(inputs, allocate_output=allocate_output)

    run.module = module  # type: ignore[attr-defined]  # tests read counters through it
    run.trusted_outputs = True  # type: ignore[attr-defined]  # shapes come from the signature
    return run
