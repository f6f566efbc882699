"""Compiled clusters call the BLAS that eager PyTorch calls.

PyTorch's x86-64 wheels link MKL into ``libtorch_cpu`` and export its ILP64 Fortran GEMMs
(``sgemm_64_``) and ``mkl_set_num_threads_local``. Handing those to disc-runtime makes a
cluster's GEMMs run the same kernels as ``torch.mm`` (MKL skips the zero fill of C that
OpenBLAS does for ``beta = 0`` and has copy-free kernels for small matrices) and keeps a
single BLAS and OpenMP runtime in the process. It is a preference, not a rule: the runtime
measures it against numpy's OpenBLAS with oneDNN's sgemm for f32 (disc-torch installs
``disc-runtime[onednn]``) once per process and runs the one clearly faster on this CPU. On
a 2-core AMD EPYC Zen 5, where MKL takes a non-AVX-512 path, oneDNN ran the modules' GEMMs
2.2x faster and the GPT training step became 1.85x eager instead of 1.01x; see
``disc_runtime.native.blas_choice``. Without MKL (other platforms, source builds) the
runtime keeps numpy's OpenBLAS; ``DISC_BLAS_LIB`` overrides both, ``DISC_BLAS_TUNE=0``
keeps the preference unmeasured.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from disc_runtime import native
from disc_runtime.errors import EngineError


def torch_blas_library() -> Path | None:
    """The shared library holding torch's MKL GEMMs, or None when this torch has none."""
    if not torch.backends.mkl.is_available():
        return None
    lib = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    return lib if lib.exists() else None


@functools.lru_cache(maxsize=1)
def use_torch_blas() -> str | None:
    """Prefer torch's BLAS for native modules loaded from now on; returns its path, or None
    (numpy's OpenBLAS stays) when torch exports no ILP64 GEMM."""
    lib = torch_blas_library()
    if lib is None:
        return None
    try:
        native.use_blas_library(lib)
    except EngineError:
        return None
    return str(lib)
