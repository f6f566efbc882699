"""The C contract between a compiled module and the native engine, in one place, and the
cffi declarations of it that ``native`` calls through.

disc-core's code generator pastes ``ABI_TYPES`` into every module and defines the
``ABI_ENTRY`` functions; the framework launch ops include them as ``disc_abi.h``.

The cffi declarations (``CDEF``) come precompiled: ``_abi_ffi.py`` is cffi's out-of-line
ABI-mode module for them (``python -m disc_runtime.abi`` writes it; a test checks that it
is current). Declaring them at run time instead (``FFI.cdef``) imports pycparser and parses the text
(about 16 ms of every process's import), and then parses every type string the engine
names on its first use with pycparser too (about 0.3 ms each, about 4 ms on a process's
first call); the precompiled module's FFI parses type strings in C. ``load_ffi`` falls
back to the run-time declarations if the module is missing or stale.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

__all__ = ["ABI_ENTRY", "ABI_TYPES", "ABI_VERSION", "CDEF", "MODULE_FILE",
           "OUTPUT_DIMS_ENTRY", "PACK_COUNT_ENTRY", "TABLE_ALLOC_SOURCE", "TABLE_ALLOC_TYPES",
           "emit_ffi_module", "load_ffi"]

ABI_VERSION = 6
MODULE_FILE = "native/module.so"

ABI_TYPES = """
typedef void *(*disc_alloc_fn)(void *ctx, int64_t index, int64_t rank, const int64_t *shape);
typedef struct {
  disc_alloc_fn alloc;
  void *alloc_ctx;
  /* ILP64 Fortran-interface sgemm_ / dgemm_ (arguments by pointer, column-major), or NULL */
  void *sgemm;
  void *dgemm;
  int64_t *counters;  /* optional: one slot per kernel version, see the artifact metadata */
  /* optional: the BLAS's per-thread thread count (OpenBLAS openblas_set_num_threads_local,
     MKL mkl_set_num_threads_local; returns the previous count). Modules run GEMMs on
     their own OpenMP team with one BLAS thread each: a second thread pool spinning next
     to OpenMP's halves throughput. */
  int (*blas_threads_local)(int);
  /* optional: a row-major f32 GEMM with oneDNN's dnnl_sgemm signature (arguments by
     value: transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc; returns a
     status). When set, modules call it for f32 GEMMs instead of sgemm. */
  void *sgemm_rowmajor;
  /* optional (NULL: off): per-step wall-time profile, 2 + steps int64 slots the module
     adds to atomically: [0] profiled calls, [1] host nanoseconds (checks, allocation,
     copies), [2 + i] nanoseconds of step i as the artifact's metadata lists them
     (native.profile) */
  int64_t *profile;
  /* optional (NULL: none): per input, 0 or a stamp promising the input holds the same
     values at every call passing the same stamp (a frozen weight). A GEMM reading such
     an input as its weight keeps it packed in the BLAS's format between calls, when the
     three functions below are set (MKL's ILP64 sgemm_pack_get_size_64_, sgemm_pack_64_,
     sgemm_compute_64_; NULL elsewhere). */
  const uint64_t *in_stamps;
  void *sgemm_pack_get_size;
  void *sgemm_pack;
  void *sgemm_compute;
} disc_env;
"""
ABI_ENTRY = """
int64_t disc_abi_version(void);
int64_t disc_run(void *const *in_data, const int64_t *in_shapes, int64_t n_in,
                 const disc_env *env, char *err, int64_t errlen);
"""

#: An optional module export (modules built by disc-core export it; older ones do not):
#: ``disc_table_alloc`` is an ``env->alloc`` that hands out output buffers the caller
#: allocated before the call, when it knows their shapes from an earlier call with the same
#: input dims. It checks every request against the shapes in the table; a request that
#: differs (an output shape that depends on input values) sets ``missed`` and fails the
#: call, which the caller then makes again with an allocating callback. Without it, each
#: output is a Python callback from inside ``disc_run`` (about 1.3 us each).
TABLE_ALLOC_TYPES = """
typedef struct {
  void **data;          /* output buffers, in output order */
  const int64_t *dims;  /* per output: its rank, then its dims */
  int64_t n;            /* number of outputs */
  int64_t missed;       /* set when a request differs from the table */
} disc_table;
void *disc_table_alloc(void *ctx, int64_t index, int64_t rank, const int64_t *shape);
"""
TABLE_ALLOC_SOURCE = TABLE_ALLOC_TYPES.replace(
    "void *disc_table_alloc(void *ctx, int64_t index, int64_t rank, const int64_t *shape);\n",
    """void *disc_table_alloc(void *ctx, int64_t index, int64_t rank, const int64_t *shape) {
  disc_table *t = (disc_table *)ctx;
  if (index < 0 || index >= t->n) { t->missed = 1; return NULL; }
  const int64_t *d = t->dims;
  for (int64_t i = 0; i < index; ++i) d += 1 + d[0];
  if (d[0] != rank) { t->missed = 1; return NULL; }
  for (int64_t j = 0; j < rank; ++j)
    if (d[1 + j] != shape[j]) { t->missed = 1; return NULL; }
  return t->data[index];
}
""")



#: An optional module export (modules built by disc-core export it; older ones do not):
#: ``disc_output_dims`` writes every output's rank and dims for the given input shapes
#: (checked as ``disc_run`` checks them) without running anything, so a caller can allocate
#: the outputs of a call on dims it has not seen yet and make that call through
#: ``disc_table_alloc`` too: a dynamic-shape stream, whose dims are often new, then never
#: pays a Python callback per output. Returns nonzero, with the reason in ``err``, for
#: inputs ``disc_run`` would reject.
OUTPUT_DIMS_ENTRY = """
int64_t disc_output_dims(const int64_t *in_shapes, int64_t n_in, int64_t *out_dims,
                         int64_t cap, char *err, int64_t errlen);
"""

#: An optional module export (modules of ABI 6 export it): how many times the module's
#: GEMMs packed a frozen weight (``disc_env.in_stamps``), for tests and reports.
PACK_COUNT_ENTRY = """
int64_t disc_pack_count(void);
"""

#: everything the engine declares to cffi
CDEF = ABI_TYPES + ABI_ENTRY + TABLE_ALLOC_TYPES + OUTPUT_DIMS_ENTRY + PACK_COUNT_ENTRY
#: the generated module's marker of the declarations it was made from
_CDEF_HASH = hashlib.sha256(CDEF.encode()).hexdigest()[:16]
FFI_MODULE = "disc_runtime._abi_ffi"


def _declared() -> Any:
    """A cffi FFI that declares ``CDEF`` now (pycparser)."""
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    return ffi


def emit_ffi_module(path: Path) -> None:
    """Write cffi's out-of-line ABI-mode module for ``CDEF`` to ``path`` (``_abi_ffi.py``
    beside this file is that, committed), marked with the declarations' hash."""
    builder = _declared()
    builder.set_source(FFI_MODULE, None)
    builder.emit_python_code(str(path))
    text = Path(path).read_text()
    Path(path).write_text(text.rstrip("\n") + f"\n\nCDEF_HASH = {_CDEF_HASH!r}\n")


def load_ffi() -> Any:
    """The cffi FFI for ``CDEF``: the precompiled module's when it is current, else one
    declared now (slower to make; only a source tree whose ABI text changed without
    ``emit_ffi_module`` has that)."""
    try:
        from . import _abi_ffi
    except ImportError:
        _abi_ffi = None
    if _abi_ffi is not None and getattr(_abi_ffi, "CDEF_HASH", None) == _CDEF_HASH:
        return _abi_ffi.ffi
    return _declared()


if __name__ == "__main__":  # python -m disc_runtime.abi: regenerate _abi_ffi.py
    emit_ffi_module(Path(__file__).with_name("_abi_ffi.py"))
