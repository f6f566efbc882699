"""The ``native`` engine: runs a compiled C module (``native/module.so``) through cffi.

The module's host function does the whole call natively (symbol binding, buffer
allocation, every kernel and BLAS call); Python only passes pointers in and allocates the
outputs when the module asks, through a callback, so a bridge can hand in its own
framework-allocated buffers (``allocate_output``). GEMM comes from an ILP64 BLAS found once
at load time and passed to every call (the module itself keeps no global mutable state):
the one a bridge prefers (its framework's, see :func:`use_blas_library`) or the OpenBLAS
that numpy wheels ship, with single-precision GEMMs going to oneDNN when its standalone
build is installed (see :func:`blas_functions`).
"""

from __future__ import annotations

import atexit
import functools
import glob
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .abi import ABI_VERSION, MODULE_FILE, load_ffi
from .arrays import as_numpy
from .artifact import Artifact
from .dtypes import numpy_dtype
from .errors import DiscRuntimeError, EngineError, FastPathMiss, InputError
from .options import RUNTIME_OPTIONS
from .thread_counters import ThreadCounters


def launch_support_header() -> str:
    """The C++ header every framework's launch op includes after ``disc_abi.h``
    (``csrc/disc_launch_support.h``): loading and calling a module with the process's BLAS,
    and the failure, stats and test-hook entry points its bridge reads from Python."""
    return (Path(__file__).parent / "csrc" / "disc_launch_support.h").read_text()


# cffi rather than ctypes: a call plus its output callback costs a few microseconds,
# which is the per-call overhead budget for small tensors
_ffi = load_ffi()
#: every module this process opened, kept loaded for the process's life, as a run-time
#: declared FFI keeps its libraries: the precompiled declarations' FFI would unload a
#: module (dlclose) once its last Python reference went, while native state of it may
#: outlive that (oneDNN primitives and their JIT code, packed weights, OpenMP's threads)
_LOADED: list[Any] = []
_NONNULL = _ffi.new("char[1]")  # storage address for zero-size outputs
_now = time.perf_counter


# ffi.from_buffer without a Python wrapper: (char[] type, array, writable). The
# precompiled declarations' FFI is C already; a run-time-declared one (abi.load_ffi's
# fallback) wraps its backend's call in Python, about 0.3 us more per pointer.
_from_buffer = getattr(getattr(_ffi, "_backend", None), "from_buffer", None) or _ffi.from_buffer
_BYTES = _ffi.typeof("char[]")
_NDARRAY, _EMPTY = np.ndarray, np.empty  # module globals: one lookup less per call
_U8 = np.dtype(np.uint8)
#: outputs of this many bytes or more start on a 64-byte line (_empty)
_ALIGN_MIN_BYTES = 16384


def _empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``np.empty`` whose data starts on a 64-byte line once it is big enough to matter.

    numpy's allocator is malloc's, 16-byte aligned (a page + 16 past the mmap threshold):
    a module's GEMM writing its output rows there ran about 10% slower (MKL sgemm, Zen 3),
    and its vector loops split loads over two lines at every row. The frameworks'
    allocators already align; this is the standalone runtime's. Small outputs keep the
    plain call (its cost is part of the per-call overhead)."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < _ALIGN_MIN_BYTES:
        return _EMPTY(shape, dtype)
    raw = _EMPTY(nbytes + 64, _U8)
    off = -raw.ctypes.data % 64
    return raw[off:off + nbytes].view(dtype).reshape(shape)


class _CallState:
    """Per-call output bookkeeping (one per call: calls may run concurrently)."""

    __slots__ = ("outputs", "allocate", "dtypes", "dtype_names", "error")

    def __init__(self, dtypes: Sequence[np.dtype], allocate: Callable[..., Any] | None):
        self.outputs: list[np.ndarray | None] = [None] * len(dtypes)
        self.allocate = allocate
        self.dtypes = dtypes
        # numpy computes ``dtype.name`` in Python (about 4 us): once here, not per call
        self.dtype_names = [d.name for d in dtypes]
        self.error: BaseException | None = None


@_ffi.callback("void *(void *, int64_t, int64_t, const int64_t *)")
def _alloc(ctx: Any, index: int, rank: int, shape_ptr: Any) -> Any:
    state: _CallState = _ffi.from_handle(ctx)
    try:
        shape = tuple(_ffi.unpack(shape_ptr, rank)) if rank else ()
        dtype = state.dtypes[index]
        if state.allocate is not None:
            arr = _checked_output(state.allocate(index, shape, state.dtype_names[index]),
                                  index, shape, dtype)
        else:
            arr = _empty(shape, dtype)
        state.outputs[index] = arr
        return _from_buffer(_BYTES, arr, False) if arr.size else _NONNULL
    except BaseException as exc:  # never let an exception unwind through C frames
        state.error = exc
        return _ffi.NULL


class BlasFunctions(NamedTuple):
    """C function addresses of the BLAS DISC uses (0 where absent), for native code that
    calls BLAS itself: the native engine passes them to every module call, and a bridge's
    own C op (disc-tf's launch kernel) hands them to the modules it runs."""

    #: Fortran-interface ILP64 ``sgemm`` (every argument by pointer, 64-bit integers,
    #: column-major): the one GEMM entry point that OpenBLAS, MKL and BLIS all export
    sgemm: int
    #: Fortran-interface ILP64 ``dgemm``
    dgemm: int
    #: the BLAS's ``int f(int)`` that sets the calling thread's BLAS thread count and
    #: returns the previous one (OpenBLAS ``openblas_set_num_threads_local``, MKL
    #: ``mkl_set_num_threads_local``): modules run GEMMs on their own OpenMP team with one
    #: BLAS thread each, because a second thread pool spinning next to OpenMP's halves
    #: throughput. 0 when the library lacks it (OpenBLAS < 0.3.27).
    set_num_threads_local: int
    #: oneDNN's ``dnnl_sgemm`` (row-major, arguments by value), 0 when not used. Modules
    #: prefer it to ``sgemm`` for f32: on the GEMM shapes of transformer training it is
    #: 1.1-1.4x faster than OpenBLAS and, unlike OpenBLAS, does not zero C before a
    #: ``beta = 0`` product. It runs single-threaded inside a module's OpenMP team (the
    #: gomp build checks ``omp_in_parallel``), so it needs no thread-count setter.
    sgemm_rowmajor: int = 0


#: (sgemm, dgemm) export names tried in every candidate library, in order: the ILP64
#: OpenBLAS numpy and scipy wheels ship (scipy-openblas64), then MKL's ILP64 Fortran
#: interface (which PyTorch's libtorch_cpu also exports on x86-64) or an OpenBLAS built with
#: INTERFACE64=1 SYMBOLSUFFIX=64_.
GEMM_SYMBOLS: tuple[tuple[str, str], ...] = (
    ("scipy_sgemm_64_", "scipy_dgemm_64_"),
    ("sgemm_64_", "dgemm_64_"),
)
#: export names of MKL's packed f32 GEMM (size, pack, compute), ILP64 Fortran interface:
#: looked up beside ``sgemm_64_`` only (numpy's OpenBLAS has none)
PACKED_GEMM_SYMBOLS: tuple[str, str, str] = (
    "sgemm_pack_get_size_64_", "sgemm_pack_64_", "sgemm_compute_64_")
#: export names of the per-thread thread-count setter (``int f(int)``), tried in order
THREADS_LOCAL_SYMBOLS: tuple[str, ...] = (
    "openblas_set_num_threads_local", "MKL_Set_Num_Threads_Local",
    "openblas_set_num_threads_local64_",
)

#: PyPI distributions of oneDNN's standalone library whose threading runtime is the GNU
#: OpenMP that compiled modules use (the TBB and Intel OpenMP builds would add a second
#: thread pool); the ``disc-runtime[onednn]`` extra installs the first
ONEDNN_DISTRIBUTIONS: tuple[str, ...] = ("onednn-cpu-gomp",)

_preferred: list[str] = []


def use_blas_library(path: str | os.PathLike[str]) -> BlasFunctions:
    """Prefer the ILP64 BLAS in the shared library ``path`` for modules loaded from now on
    (``DISC_BLAS_LIB`` still overrides it). A bridge calls this with the BLAS its framework
    already uses, so that DISC's GEMMs run the same code as eager mode's. Returns what
    was found there; raises :class:`EngineError` when ``path`` has no ILP64 GEMM."""
    found = _load_blas(str(path))
    if found is None:
        raise EngineError(f"{path} exports no ILP64 Fortran-interface sgemm/dgemm "
                          f"(looked for {', '.join(s for s, _ in GEMM_SYMBOLS)})")
    _preferred[:] = [str(path)]
    blas_functions.cache_clear()
    return found


def _symbol_address(lib: Any, name: str) -> int:
    """Address of ``name`` in the ctypes library ``lib``, 0 when it does not export it."""
    import ctypes

    try:
        return int(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0)
    except AttributeError:
        return 0


def _load_blas(path: str) -> BlasFunctions | None:
    import ctypes

    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None

    def address(name: str) -> int:
        return _symbol_address(lib, name)

    for sname, dname in GEMM_SYMBOLS:
        s, d = address(sname), address(dname)
        if s and d:
            local = next((a for a in map(address, THREADS_LOCAL_SYMBOLS) if a), 0)
            return BlasFunctions(s, d, local)
    return None


def onednn_library() -> str | None:
    """Path of an installed oneDNN shared library built on GNU OpenMP
    (:data:`ONEDNN_DISTRIBUTIONS`), or None."""
    from importlib import metadata

    for name in ONEDNN_DISTRIBUTIONS:
        try:
            files = metadata.distribution(name).files or []
        except metadata.PackageNotFoundError:
            continue
        for f in files:
            if f.name.startswith("libdnnl.so"):
                return os.path.realpath(f.locate())
    return None


def _onednn_sgemm() -> int:
    """Address of ``dnnl_sgemm`` in the installed oneDNN, or 0."""
    import ctypes

    path = onednn_library()
    if path is None:
        return 0
    try:
        return _symbol_address(ctypes.CDLL(path), "dnnl_sgemm")
    except OSError:
        return 0


def _first_blas_path(paths: list[str]) -> tuple[str, BlasFunctions] | None:
    for path in paths:
        found = _load_blas(path)
        if found is not None:
            return path, found
    return None


#: a library a bridge preferred gives way to numpy's OpenBLAS (with oneDNN for f32) only
#: when that measures at least this much faster (a stable choice where the two are close)
BLAS_SWITCH_RATIO = 0.9
_choice: dict[str, Any] = {}


def blas_choice() -> dict[str, Any]:
    """Which library :func:`blas_functions` chose and why: ``library`` (its path, None
    when none was found), ``f32_gemm`` (the library f32 GEMMs run in: oneDNN's when its
    row-major sgemm is used), ``reason`` and, when the choice was measured, ``seconds``
    (one thread's time for :data:`disc_runtime.blas_timing.GEMM_SHAPES`, per library)."""
    blas_functions()
    return dict(_choice)


def _record(path: str | None, fns: BlasFunctions, reason: str, **more: Any) -> BlasFunctions:
    _choice.update(library=path, reason=reason, **more,
                   f32_gemm=onednn_library() if fns.sgemm_rowmajor else path)
    return fns


def _gemm_seconds(fns: BlasFunctions) -> float:
    """One thread's time for the f32 GEMMs a module makes, through what a module calls:
    oneDNN's row-major sgemm when ``fns`` has it, else the Fortran sgemm."""
    from . import blas_timing

    if fns.sgemm_rowmajor:
        return blas_timing.onednn_sgemm_seconds(fns.sgemm_rowmajor)
    return blas_timing.sgemm_seconds(fns.sgemm, fns.set_num_threads_local)


def _measured_choice(preferred: tuple[str, BlasFunctions], challenger: tuple[str, BlasFunctions]
                     ) -> tuple[str, BlasFunctions]:
    """The bridge's preferred library, unless ``challenger`` (numpy's OpenBLAS, with
    oneDNN for f32 when installed) runs the GEMMs modules make at least
    1 / BLAS_SWITCH_RATIO times faster on this machine."""
    from . import blas_timing
    from .facts import cpu_identity, file_identity, remembered

    measured_now = []

    def measure() -> dict[str, float]:
        # each timed twice, alternately: a burst of load on the machine hits both alike
        seconds = {path: float("inf") for path, _ in (preferred, challenger)}
        for path, fns in (preferred, challenger, preferred, challenger):
            seconds[path] = min(seconds[path], _gemm_seconds(fns))
        measured_now.append(True)
        return seconds

    # measured once per machine and set of libraries (disc_runtime.facts): ~0.1 s a start
    seconds = remembered("blas-seconds", {
        "preferred": file_identity(preferred[0]), "challenger": file_identity(challenger[0]),
        "onednn": file_identity(onednn_library()) if challenger[1].sgemm_rowmajor else None,
        "cpu": cpu_identity(), "shapes": blas_timing.GEMM_SHAPES}, measure)
    faster = seconds[challenger[0]] < BLAS_SWITCH_RATIO * seconds[preferred[0]]
    path, fns = challenger if faster else preferred
    reason = ("measured faster than the preferred library" if faster
              else "preferred by the bridge (not measured slower)")
    if not measured_now:
        reason += " (measured by an earlier process on this machine)"
    _record(path, fns, reason, seconds=seconds)
    return path, fns


@functools.lru_cache(maxsize=1)
def blas_functions() -> BlasFunctions:
    """The BLAS functions native modules call, looked up once per process (and again after
    :func:`use_blas_library`).

    ``DISC_BLAS_LIB`` (a shared library path) first; else the library a bridge preferred
    (:func:`use_blas_library`), unless the ILP64 OpenBLAS that numpy wheels ship
    (``numpy.libs/libscipy_openblas64_*.so``) measures faster on this machine
    (:func:`_measured_choice`; ``DISC_BLAS_TUNE=0`` keeps the preference unmeasured);
    else numpy's OpenBLAS. All zeros when none is found; then only graphs without
    ``dot_general`` run natively. With numpy's OpenBLAS, f32 GEMMs go to oneDNN's
    ``dnnl_sgemm`` when oneDNN is installed (``pip install disc-runtime[onednn]``), and
    that is what is measured against a preferred library; a library named by
    ``DISC_BLAS_LIB`` or preferred by a bridge is used alone, so ``DISC_BLAS_LIB``
    pointing at numpy's OpenBLAS turns oneDNN off. :func:`blas_choice` says which
    library was chosen and why.
    """
    _choice.clear()
    override = RUNTIME_OPTIONS.value("blas_lib")
    if override:
        found = _load_blas(override)
        if found is not None:
            return _record(override, found, "DISC_BLAS_LIB")
    np_dir = os.path.dirname(np.__file__)
    fallback = sorted(glob.glob(os.path.join(np_dir, os.pardir, "numpy.libs",
                                             "libscipy_openblas64_*.so")))
    preferred = _first_blas_path(_preferred)
    if preferred is not None:
        challenger = _first_blas_path(fallback)
        if (challenger is None or not RUNTIME_OPTIONS.value("blas_tune")
                or os.path.realpath(challenger[0]) == os.path.realpath(preferred[0])):
            return _record(*preferred, "preferred by the bridge")
        path, fns = challenger
        challenger = (path, fns._replace(sgemm_rowmajor=_onednn_sgemm()))
        return _measured_choice(preferred, challenger)[1]
    found = _first_blas_path(fallback)
    if found is not None:
        return _record(found[0], found[1]._replace(sgemm_rowmajor=_onednn_sgemm()),
                       "numpy's OpenBLAS")
    return _record(None, BlasFunctions(0, 0, 0), "no ILP64 BLAS found")


def packed_gemm_functions() -> tuple[int, int, int]:
    """Addresses of MKL's packed f32 GEMM (ILP64 Fortran ``sgemm_pack_get_size_64_``,
    ``sgemm_pack_64_``, ``sgemm_compute_64_``) in the library :func:`blas_functions`
    chose, or zeros: where f32 GEMMs go to oneDNN, or the library is not MKL. Modules
    keep GEMM weights a caller stamps as frozen packed between calls with them
    (``disc_env.in_stamps``)."""
    fns = blas_functions()
    path = _choice.get("library")
    if not path or fns.sgemm_rowmajor:
        return (0, 0, 0)
    return _packed_symbols(path)


@functools.lru_cache(maxsize=8)
def _packed_symbols(path: str) -> tuple[int, int, int]:
    import ctypes

    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return (0, 0, 0)
    found = tuple(_symbol_address(lib, name) for name in PACKED_GEMM_SYMBOLS)
    if not all(found) or not _symbol_address(lib, "sgemm_64_"):
        return (0, 0, 0)
    return found  # type: ignore[return-value]


def blas_thread_setter() -> int:
    """Address of the BLAS's per-thread thread-count setter (``int f(int)``), or 0.

    The ``blas_threads_local`` member of ``disc_env``: whoever calls ``disc_run`` outside
    this engine passes it so that GEMMs inside a module run single-threaded per OpenMP
    thread (see :class:`BlasFunctions`)."""
    return blas_functions().set_num_threads_local


def find_blas() -> tuple[int, int]:
    """(sgemm, dgemm) addresses of an ILP64 Fortran-interface BLAS, or (0, 0)."""
    return blas_functions()[:2]


_link_dir: str | None = None
_link_lock = threading.Lock()


def module_load_path(path: str | os.PathLike[str]) -> str:
    """The name to dlopen ``path`` under: a per-process symlink named by the file's device
    and inode. dlopen returns the module it already loaded under the same name, so loading
    a rebuilt cache entry (a new file at the same path) by its path would keep running
    the discarded file (SIGBUS if that was truncated); a name per file identity loads the
    new one, while the same file still maps once. The bridges' launch ops (which dlopen
    modules themselves) are handed this name too."""
    path = os.fspath(path)
    global _link_dir
    try:
        st = os.stat(path)
    except OSError:
        return path  # nothing to name: dlopen says what is missing
    with _link_lock:
        if _link_dir is None:
            _link_dir = tempfile.mkdtemp(prefix=f"disc-modules-{os.getpid()}-")
            atexit.register(shutil.rmtree, _link_dir, True)
        link = os.path.join(_link_dir, f"{st.st_dev}-{st.st_ino}.so")
        if not os.path.lexists(link):
            os.symlink(os.path.abspath(path), link)
    return link


class NativeModule:
    """A loaded module plus the signature facts a call needs."""

    def __init__(self, artifact: Artifact):
        self.lib = _ffi.dlopen(module_load_path(artifact.path(MODULE_FILE)))
        _LOADED.append(self.lib)
        abi = self.lib.disc_abi_version()
        if abi != ABI_VERSION:
            raise EngineError(f"native module ABI {abi}, this disc-runtime speaks {ABI_VERSION}: "
                              f"recompile the artifact")
        sig = artifact.signature
        self.n_in = len(sig.inputs)
        self.out_dtypes = [numpy_dtype(s.dtype) for s in sig.outputs]
        self.n_out = len(self.out_dtypes)
        self.in_specs = [(numpy_dtype(s.dtype), s.rank) for s in sig.inputs]
        self.num_counters = len(artifact.metadata.get("native", {}).get("counters", []))
        fns = blas_functions()
        self.sgemm = _ffi.cast("void *", fns.sgemm)
        self.dgemm = _ffi.cast("void *", fns.dgemm)
        self.blas_threads_local = _ffi.cast("int (*)(int)", fns.set_num_threads_local)
        self.sgemm_rowmajor = _ffi.cast("void *", fns.sgemm_rowmajor)
        self._packed_gemm = [_ffi.cast("void *", a) for a in packed_gemm_functions()]
        #: inputs the module may keep packed as GEMM weights when a call stamps them
        #: (``disc_env.in_stamps``): empty for modules built before, or with no such GEMM
        self.pack_inputs: list[int] = list(
            artifact.metadata.get("native", {}).get("pack_inputs", []))
        self._local = threading.local()
        #: what each profiled step is (name, kind, ops, shape), in slot order
        self.profile_steps: list[dict[str, Any]] = list(
            artifact.metadata.get("native", {}).get("profile", []))
        self._profile: np.ndarray | None = None
        self._profile_ptr: Any = _ffi.NULL
        # output shapes by input dims, for modules that export disc_table_alloc; None once a
        # call showed that some output shape depends on input values
        try:
            self._table_alloc: Any = self.lib.disc_table_alloc
        except AttributeError:  # a module built before the export existed
            self._table_alloc = None
        self._plans: dict[tuple[int, ...], _Plan] | None = (
            {} if self._table_alloc is not None else None)
        try:
            self._output_dims: Any = self.lib.disc_output_dims
        except AttributeError:  # a module built before the export existed: learnt by a call
            self._output_dims = None
        #: entries disc_output_dims writes: each output's rank, then its dims
        self._out_dims_len = sum(1 + s.rank for s in sig.outputs)

    def plan_for(self, dims: tuple[int, ...]) -> _Plan | None:
        """The output shapes of a call on these input dims (every input's dims, in order):
        remembered from an earlier call, or asked of the module; None when the module
        cannot say (built before ``disc_output_dims``, outputs whose shapes depend on
        values, or inputs it rejects: the call itself then says why)."""
        plans = self._plans
        if plans is None:
            return None
        plan = plans.get(dims)
        if plan is not None or self._output_dims is None:
            return plan
        n = self._out_dims_len
        buf = _ffi.new("int64_t[]", max(n, 1))
        err = _ffi.new("char[256]")
        if self._output_dims(dims or _ffi.NULL, len(self.in_specs), buf, n, err, 256) != 0:
            return None
        flat = _ffi.unpack(buf, n)
        shapes, at = [], 0
        for _ in range(self.n_out):
            rank = flat[at]
            shapes.append(tuple(flat[at + 1:at + 1 + rank]))
            at += 1 + rank
        plan = _Plan(shapes, self.out_dtypes)
        if len(plans) >= _MAX_PLANS:
            plans.clear()
        plans[dims] = plan
        return plan

    def packs_made(self) -> int:
        """How many times this module's GEMMs packed a stamped weight (0 for a module
        without the export)."""
        try:
            return int(self.lib.disc_pack_count())
        except AttributeError:
            return 0

    # profiling --------------------------------------------------------------------------
    def start_profiling(self) -> None:
        """Time every step of every later call (a clock read per step: about 20 ns each,
        so leave it off in production); idempotent, keeps what was already measured."""
        if self._profile is None:
            self._profile = np.zeros(2 + len(self.profile_steps), np.int64)
            self._profile_ptr = _ffi.from_buffer("int64_t[]", self._profile)

    @property
    def profile_address(self) -> int:
        """The address of the profile slots (0 when not profiling): what a launch op that
        calls the module itself passes as ``disc_env.profile``, so its calls count too."""
        return 0 if self._profile is None else int(self._profile.ctypes.data)

    def stop_profiling(self) -> None:
        """Stop timing; :meth:`profile` then says nothing."""
        self._profile, self._profile_ptr = None, _ffi.NULL

    def profile(self) -> list[dict[str, Any]] | None:
        """Per step (the module's host work first, as ``host``): name, kind, ops, shape,
        calls and total seconds since :meth:`start_profiling`; None when not profiling."""
        if self._profile is None:
            return None
        counts = self._profile.copy()  # one read: the module may be adding to it
        calls = int(counts[0])
        host = {"name": "host", "kind": "host", "ops": [], "shape": None}
        return [{**step, "calls": calls, "seconds": int(ns) * 1e-9}
                for step, ns in zip([host, *self.profile_steps], counts[1:])]

    def _slot(self) -> _Slot:
        """This thread's reusable call state (a fresh one if a call is already in flight on
        this thread, e.g. an allocate_output hook that runs DISC again)."""
        slot = getattr(self._local, "slot", None)
        if slot is None:
            slot = self._local.slot = self._new_slot()
        elif slot.busy:
            return self._new_slot()
        return slot

    def _new_slot(self) -> _Slot:
        slot = _Slot(self.out_dtypes, self._table_alloc, self.n_in)
        for env in (slot.env, slot.table_env):
            env.sgemm, env.dgemm = self.sgemm, self.dgemm
            env.blas_threads_local = self.blas_threads_local
            env.sgemm_rowmajor = self.sgemm_rowmajor
            (env.sgemm_pack_get_size, env.sgemm_pack, env.sgemm_compute) = self._packed_gemm
        return slot

    def run(self, inputs: list[np.ndarray], *, allocate_output: Callable[..., Any] | None = None,
            counters: np.ndarray | None = None) -> list[np.ndarray]:
        ptrs, dims = [], []
        for a in inputs:
            if not a.flags.c_contiguous:
                a = np.ascontiguousarray(a)
            ptrs.append(_from_buffer(_BYTES, a, False) if a.size else _NONNULL)
            dims.extend(a.shape)
        return self._call(ptrs, dims, allocate_output, counters)

    def run_checked(self, inputs: Sequence[Any], allocate_output: Callable[..., Any] | None
                    ) -> list[np.ndarray]:
        """The per-call hot path: checks what the C host code cannot (count, array type,
        dtype, rank, C-contiguity; the module itself checks every dim and symbol) in one
        pass while collecting pointers, and raises :class:`FastPathMiss` for anything
        else so that the caller's slow path words the error or copies the input."""
        if len(inputs) != self.n_in:
            raise FastPathMiss
        ptrs, dims = [], []
        try:
            for a, (dtype, rank) in zip(inputs, self.in_specs):
                if (type(a) is not _NDARRAY or a.ndim != rank
                        or (a.dtype is not dtype and a.dtype != dtype)):
                    raise FastPathMiss
                # cffi asks for a simple buffer, which numpy grants only C-contiguous
                ptrs.append(_from_buffer(_BYTES, a, False) if a.size else _NONNULL)
                dims += a.shape
        except ValueError:
            raise FastPathMiss from None
        plans = self._plans  # the planned call directly (one Python call less per call)
        key = tuple(dims)
        plan = (plans.get(key) or self.plan_for(key)) if plans is not None else None
        if plan is not None:
            outputs = self._call_planned(plan, ptrs, dims, allocate_output, None)
            if outputs is not None:
                return outputs
            self._plans = None  # output shapes depend on values: callbacks only
        return self._call(ptrs, dims, allocate_output, None)

    def _call(self, ptrs: list[Any], dims: list[int], allocate_output: Callable[..., Any] | None,
              counters: np.ndarray | None) -> list[np.ndarray]:
        plans = self._plans
        if plans is not None:
            key = tuple(dims)
            plan = self.plan_for(key)
            if plan is not None:
                outputs = self._call_planned(plan, ptrs, dims, allocate_output, counters)
                if outputs is not None:
                    return outputs
                self._plans = plans = None  # output shapes depend on values: callbacks only
        slot = self._slot()
        slot.busy = True
        state = slot.state
        state.outputs = [None] * self.n_out
        state.allocate = allocate_output
        env = slot.env
        env.profile = self._profile_ptr
        if counters is not None:
            env.counters = _ffi.from_buffer("int64_t[]", counters)
        try:
            rc = self.lib.disc_run(ptrs or _ffi.NULL, dims or _ffi.NULL, len(ptrs), env,
                                   slot.err, 512)
            if state.error is not None:
                raise state.error
            if rc != 0:
                raise InputError(_ffi.string(slot.err).decode(errors="replace"))
            outputs = state.outputs
        finally:
            state.outputs, state.allocate, state.error = [], None, None
            if counters is not None:
                env.counters = _ffi.NULL
            slot.busy = False
        if plans is not None:
            if len(plans) >= _MAX_PLANS:
                plans.clear()
            plans[key] = _Plan([o.shape for o in outputs], self.out_dtypes)  # type: ignore[union-attr]
        return outputs  # type: ignore[return-value]

    def _call_planned(self, plan: _Plan, ptrs: list[Any], dims: list[int],
                      allocate_output: Callable[..., Any] | None,
                      counters: np.ndarray | None) -> list[np.ndarray] | None:
        """One call with the outputs allocated here, in the shapes ``plan`` predicts (by
        ``allocate_output`` when given, checked as the callback path checks it), and
        handed to the module through ``disc_table_alloc``: no Python callback from inside
        the call. None when the module asked for another shape (nothing was returned; the
        caller runs the call again)."""
        slot = getattr(self._local, "slot", None)
        if slot is None or slot.busy:
            slot = self._slot()
        data = slot.table_data
        if allocate_output is None:
            outputs = [_empty(shape, dtype) for shape, dtype in plan.pairs]
        else:
            outputs = [_checked_output(allocate_output(i, shape, name), i, shape, dtype)
                       for i, (shape, dtype, name) in enumerate(plan.triples)]
        i = 0
        for arr in outputs:
            data[i] = _from_buffer(_BYTES, arr, False) if arr.size else _NONNULL
            i += 1
        slot.busy = True
        if slot.plan is not plan:
            slot.table.dims = plan.dims
            slot.plan = plan
        # (table.missed is still 0: a miss ends planned calls for the module)
        env = slot.table_env
        if slot.profile is not self._profile_ptr:  # a cffi store per call costs 0.15 us
            env.profile = slot.profile = self._profile_ptr
        if counters is not None:
            env.counters = _ffi.from_buffer("int64_t[]", counters)
        try:
            rc = self.lib.disc_run(ptrs or _ffi.NULL, dims or _ffi.NULL, len(ptrs), env,
                                   slot.err, 512)
            if rc != 0:
                if slot.table.missed:
                    return None
                raise InputError(_ffi.string(slot.err).decode(errors="replace"))
            return outputs
        finally:
            if counters is not None:
                env.counters = _ffi.NULL
            slot.busy = False


def _checked_output(arr: Any, index: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """What an ``allocate_output`` hook returned for output ``index``, as a numpy array,
    or the error that says what was expected."""
    if type(arr) is not np.ndarray:
        arr = as_numpy(arr, what=f"allocate_output for output #{index}")
    if arr.shape != shape or arr.dtype != dtype or not arr.flags.c_contiguous:
        raise DiscRuntimeError(
            f"allocate_output for output #{index} returned {arr.dtype} {arr.shape} "
            f"(contiguous: {arr.flags.c_contiguous}), expected a contiguous {dtype} "
            f"array of shape {shape}")
    return arr


#: input-dims entries a module remembers output shapes for (cleared when full)
_MAX_PLANS = 256


def _row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


class _Plan:
    """The output shapes of a module's calls on one tuple of input dims, and the same as
    ``disc_table.dims`` (rank, then dims, per output)."""

    __slots__ = ("dims", "pairs", "shapes", "strides", "triples")

    def __init__(self, shapes: list[tuple[int, ...]], dtypes: Sequence[np.dtype]):
        self.shapes = list(shapes)
        #: each output's row-major strides in elements (a framework's strided allocator's)
        self.strides = [_row_major_strides(s) for s in shapes]
        self.pairs = list(zip(shapes, dtypes))
        # numpy computes ``dtype.name`` in Python (microseconds): once here, not per call
        self.triples = [(s, d, d.name) for s, d in self.pairs]
        self.dims = _ffi.new("int64_t[]", [v for s in shapes for v in (len(s), *s)] or [0])


class _Slot:
    """Per-thread, reused call state: the env struct, its handle and the error buffer."""

    __slots__ = ("state", "handle", "env", "err", "busy", "table", "table_data", "table_env",
                 "plan", "profile", "in_addresses", "in_data", "out_addresses", "stamps",
                 "stamped")

    def __init__(self, dtypes: Sequence[np.dtype], table_alloc: Any = None, n_in: int = 0):
        self.state = _CallState(dtypes, None)
        self.handle = _ffi.new_handle(self.state)
        self.env = _ffi.new("disc_env *", {"alloc": _alloc, "alloc_ctx": self.handle,
                                          "counters": _ffi.NULL, "profile": _ffi.NULL})
        self.err = _ffi.new("char[512]")
        self.busy = False
        # the planned-output call: env->alloc = the module's disc_table_alloc over a table
        self.table_data = _ffi.new("void *[]", max(1, len(dtypes)))
        self.table = _ffi.new("disc_table *", {"data": self.table_data, "n": len(dtypes)})
        self.table_env = _ffi.new("disc_env *", {
            "alloc": table_alloc if table_alloc is not None else _ffi.NULL,
            "alloc_ctx": self.table, "counters": _ffi.NULL, "profile": _ffi.NULL})
        self.plan: _Plan | None = None  # whose dims the table points at
        self.profile: Any = _ffi.NULL  # what table_env.profile holds
        # PointerCall's: the inputs' and outputs' addresses as integers (one slice store
        # each per call), the same memory as the module's data pointer arrays
        self.in_addresses = _ffi.new("intptr_t[]", max(1, n_in))
        self.in_data = _ffi.cast("void **", self.in_addresses)
        self.out_addresses = _ffi.cast("intptr_t *", self.table_data)
        # PointerCall's frozen-weight stamps (disc_env.in_stamps), set on table_env only
        # while a call passes some
        self.stamps = _ffi.new("uint64_t[]", max(1, n_in))
        self.stamped = False


def load_native_engine(artifact: Artifact) -> Callable[..., list[np.ndarray]]:
    module = NativeModule(artifact)

    def run(inputs: list[np.ndarray], allocate_output: Callable[..., Any] | None = None
            ) -> list[np.ndarray]:
        return module.run(inputs, allocate_output=allocate_output)

    run.module = module  # type: ignore[attr-defined]  # tests read counters through it
    run.run_checked = module.run_checked  # type: ignore[attr-defined]  # Executable's hot path
    run.trusted_outputs = True  # type: ignore[attr-defined]  # shapes come from the signature
    run.profiler = module  # type: ignore[attr-defined]  # Executable.start_profiling
    # bridges' hot path, made by each Executable with its stats
    run.pointer_call = functools.partial(PointerCall, module)  # type: ignore[attr-defined]
    return run


class PointerCall:
    """Calls of one native module on raw addresses, for a bridge whose tensors are not
    numpy arrays (torch's): no array conversion, no output callback, few Python frames.
    Inside a compiled torch model the caches are cold when a cluster runs (dynamo's and
    aot_autograd's wrappers ran just before), so every Python frame and every numpy or
    cffi object made per call costs several times what a warm loop shows: a tiny
    cluster's call spent 13 us around a 2.5 us native call in ``run``'s numpy path.

    The caller owns what ``run`` checks for it: each input's dtype, rank and C-contiguity
    (per :attr:`in_specs`), and that every address stays valid for the call. The module
    itself checks every dim and size symbol, as always. Output shapes come from
    :meth:`plan`, which the module computes for dims it has not seen (``disc_output_dims``;
    a module built before that export learns them by one ``run`` on the same input dims,
    and a module whose output shapes depend on input values has none): the caller
    allocates them and passes their addresses. Size-0 inputs and outputs must get a
    non-null address (:attr:`nonnull`), as ``run`` gives them."""

    __slots__ = ("_module", "_stats", "_stats_local", "in_specs", "nonnull", "out_dtypes",
                 "pack_inputs")

    def __init__(self, module: NativeModule, stats: ThreadCounters | None = None):
        """``stats``: [calls, input errors, engine errors, seconds] counters to count
        calls into (an :class:`~disc_runtime.executable.Executable`'s)."""
        self._module = module
        self._stats = stats if stats is not None else ThreadCounters(4)
        self._stats_local = self._stats.local
        #: (numpy dtype, rank) of each input the module takes
        self.in_specs = list(module.in_specs)
        #: numpy dtype of each output
        self.out_dtypes = list(module.out_dtypes)
        #: an address to pass for a size-0 tensor (whose own may be 0)
        self.nonnull = int(_ffi.cast("intptr_t", _NONNULL))
        #: inputs a GEMM reads as its weight: a call may stamp them (``stamps``) so that
        #: the module keeps them packed between calls; empty when the BLAS cannot pack
        self.pack_inputs = list(module.pack_inputs) if module._packed_gemm[0] else []

    def plan(self, dims: tuple[int, ...]) -> _Plan | None:
        """The output shapes (``plan.shapes``) of a call on these input dims (every
        input's dims, in order), or None: then call through ``run`` (see
        :meth:`NativeModule.plan_for`)."""
        return self._module.plan_for(dims)

    def __call__(self, plan: _Plan, in_addresses: list[int], dims: list[int],
                 out_addresses: list[int], stamps: list[int] | None = None) -> bool:
        """One call of the module; False (nothing written) when it asked for output shapes
        other than ``plan``'s (its outputs depend on values: use ``run`` from now on).
        Raises :class:`InputError` with the module's words when it rejects the inputs.

        ``stamps``: per input, 0 or a stamp (< 2**64) the caller gives only while that
        input's values stay the same (a frozen weight; a new stamp after any change): the
        module keeps the :attr:`pack_inputs` so stamped packed for the BLAS between
        calls."""
        module = self._module
        slot = getattr(module._local, "slot", None)
        if slot is None or slot.busy:
            slot = module._slot()
        n_in = len(in_addresses)
        if n_in != module.n_in or len(out_addresses) != module.n_out:
            raise InputError(f"{n_in} inputs and {len(out_addresses)} outputs, the module "
                             f"takes {module.n_in} and gives {module.n_out}")
        slot.in_addresses[0:n_in] = in_addresses
        if out_addresses:
            slot.out_addresses[0:len(out_addresses)] = out_addresses
        slot.busy = True
        if slot.plan is not plan:
            slot.table.dims = plan.dims
            slot.plan = plan
        env = slot.table_env
        if stamps:
            slot.stamps[0:n_in] = stamps
            if not slot.stamped:
                env.in_stamps = slot.stamps
                slot.stamped = True
        elif slot.stamped:
            env.in_stamps = _ffi.NULL
            slot.stamped = False
        if slot.profile is not module._profile_ptr:
            env.profile = slot.profile = module._profile_ptr
        start = _now()
        try:
            rc = module.lib.disc_run(slot.in_data, dims or _ffi.NULL, n_in, env, slot.err, 512)
        finally:
            slot.busy = False
        try:
            cell = self._stats_local.cell
        except AttributeError:
            cell = self._stats.cell()
        cell[0] += 1
        cell[3] += _now() - start
        if rc == 0:
            return True
        if slot.table.missed:
            module._plans = None  # output shapes depend on values: callbacks only
            return False
        cell[2] += 1
        raise InputError(_ffi.string(slot.err).decode(errors="replace"))
