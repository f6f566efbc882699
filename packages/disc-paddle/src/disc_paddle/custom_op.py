"""Build, cache and load the ``disc_launch_<N>`` Paddle custom operators (``native/``).

The library is compiled once per (Paddle version, source, runtime ABI, output limit) by
Paddle's own extension builder (``paddle.utils.cpp_extension.load``, which knows Paddle's
include paths and link flags; about 15 s), in a private temporary directory, and then
published atomically under the DISC cache directory (``$DISC_CACHE_DIR/paddle_ops/<key>/``):
concurrent processes never load a half-written library, and clearing the cache makes the
next process rebuild it. Processes that start on a cold cache at once (the ranks of a
distributed job) build it once: the first takes the build lock
(:func:`disc_core.bridge.launch.build_lock`), the others wait on it and load its
library. Later processes register the cached library's operators directly (about 0.1 s)
instead of going through the builder again.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from disc_core.bridge.launch import LaunchLibrary, build_lock, publish, write_build_headers
from disc_runtime.abi import ABI_TYPES, ABI_VERSION
from disc_runtime.cache import default_cache_dir
from disc_runtime.native import launch_support_header

__all__ = ["MAX_OUTPUTS", "CustomOpUnavailable", "OpLibrary", "build_count", "gemm_library",
           "library_dir", "load_library", "op_name", "paddle_blas_library", "use_gemm"]

SOURCE = Path(__file__).parent / "native" / "disc_launch.cc"
LIB_NAME = "disc_paddle_ops.so"
#: clusters with more outputs than this are split or stay in Paddle (one op per count)
MAX_OUTPUTS = 64


class CustomOpUnavailable(RuntimeError):
    """The launch operators cannot be built or loaded here (no C++ compiler, build error)."""


def op_name(num_outputs: int) -> str:
    """The registered operator that launches a cluster with ``num_outputs`` results."""
    if not 1 <= num_outputs <= MAX_OUTPUTS:
        raise ValueError(f"a launch op has 1 to {MAX_OUTPUTS} outputs, not {num_outputs}")
    return f"disc_launch_{num_outputs}"


@dataclass
class OpLibrary:
    """The loaded library: its path and its C bookkeeping (failures, stats, test hook:
    :class:`disc_core.bridge.launch.LaunchLibrary`, ``take_failures``, ``stats`` ...)."""

    path: Path
    launch: LaunchLibrary

    def __getattr__(self, name: str) -> object:
        return getattr(self.launch, name)


_lock = threading.Lock()
_loaded: dict[Path, OpLibrary] = {}
_builds = 0
#: a build that failed in this process is not retried; the next process tries again
_failed: dict[Path, CustomOpUnavailable] = {}


def build_count() -> int:
    """How many times this process compiled the library (0 when the cache had it)."""
    return _builds


def _key() -> str:
    import paddle

    h = hashlib.sha256()
    for part in (paddle.__version__, SOURCE.read_text(), ABI_TYPES, launch_support_header(),
                 str(ABI_VERSION), str(MAX_OUTPUTS)):
        h.update(part.encode())
    return f"paddle{paddle.__version__}-{h.hexdigest()[:16]}"


def library_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where this Paddle's launch library lives (built or not)."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / "paddle_ops" / _key()


def _registrations() -> str:
    lines = []
    for n in range(1, MAX_OUTPUTS + 1):
        outs = ", ".join(f'"Out{i}"' for i in range(n))
        lines.append(f"DISC_LAUNCH_OP({n}, {outs})")
    return "\n".join(lines) + "\n"


def _build(target: Path) -> ctypes.CDLL:
    """Compile and publish the library; returns it, already registered: Paddle's builder
    registers the operators of the library it built, so this process keeps using that
    file (opened again by path, so ctypes sees the same globals) and never registers the
    published copy a second time (a second registration aborts)."""
    global _builds
    from paddle.utils import cpp_extension

    if shutil.which(os.environ.get("CXX") or "c++") is None and shutil.which("g++") is None:
        raise CustomOpUnavailable("no C++ compiler found (install g++ or set CXX): the "
                                  "disc_launch Paddle operators cannot be built")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        write_build_headers(tmp)
        (tmp / "disc_launch_ops.inc").write_text(_registrations())
        (tmp / "build").mkdir()
        name = "disc_paddle_ops_" + target.parent.name.replace(".", "_").replace("-", "_")
        try:
            cpp_extension.load(name=name, sources=[str(SOURCE)], extra_include_paths=[str(tmp)],
                               extra_cxx_cflags=["-O2", "-w"], build_directory=str(tmp / "build"),
                               verbose=False)
        except Exception as exc:  # the builder raises whatever its subprocess produced
            raise CustomOpUnavailable(f"building the disc_launch Paddle operators failed: "
                                      f"{exc}") from exc
        built = sorted((tmp / "build").rglob(f"{name}*.so"))
        if not built:
            raise CustomOpUnavailable("the Paddle extension builder produced no library")
        cdll = ctypes.CDLL(str(built[0]))  # mapped: removing the file below keeps it
        publish(built[0], target)
        _builds += 1
        return cdll
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _register(target: Path) -> None:
    """Register the operators of a published library with Paddle (once per process)."""
    from paddle.utils.cpp_extension.extension_utils import load_op_meta_info_and_register_op

    load_op_meta_info_and_register_op(str(target))


def load_library(cache_dir: str | os.PathLike[str] | None = None) -> OpLibrary:
    """The launch library with its operators registered, built first when the cache lacks
    it. Raises :class:`CustomOpUnavailable`."""
    target = library_dir(cache_dir) / LIB_NAME
    with _lock:
        lib = _loaded.get(target)
        if lib is not None:
            return lib
        if target.exists():
            _register(target)
            cdll = ctypes.CDLL(str(target))
        else:
            if target in _failed:
                raise _failed[target]
            with build_lock(target):  # the ranks of a job build it once (see docstring)
                if target.exists():  # another process published it while this one waited
                    _register(target)
                    cdll = ctypes.CDLL(str(target))
                else:
                    try:
                        cdll = _build(target)
                    except CustomOpUnavailable as exc:
                        _failed[target] = exc
                        raise
        launch = LaunchLibrary(cdll, "disc_paddle")
        lib = OpLibrary(target, launch)
        _loaded[target] = lib
        from .config import OPTIONS

        use_gemm(OPTIONS.value("blas"), lib)
        return lib


#: which GEMM library the launch ops give DISC's modules now (see :func:`use_gemm`)
_gemm: dict[str, str] = {}


def paddle_blas_library() -> Path | None:
    """Paddle's own GEMM library: the LP64 MKL its wheel bundles (``paddle/libs/
    libmklml_intel.so``, what its CPU matmul kernel calls), or None."""
    import paddle

    found = sorted((Path(paddle.__file__).parent / "libs").glob("libmklml_intel.so*"))
    return found[0] if found else None


def use_gemm(which: str, lib: OpLibrary | None = None) -> str:
    """Point DISC's f32 GEMMs at ``which`` library: ``"paddle"`` (Paddle's MKL, so a
    compiled GEMM runs the code an eager one does) or ``"disc"`` (disc-runtime's choice).
    Returns a description of the library now used (``gemm_library()``)."""
    if which not in ("paddle", "disc"):
        raise ValueError(f"DISC_PADDLE_BLAS must be 'paddle' or 'disc', not {which!r}")
    lib = lib or load_library()
    lib.launch.use_process_blas()
    described = None
    if which == "paddle":
        path = paddle_blas_library()
        if path is not None:
            try:
                described = "paddle: " + lib.launch.use_cblas(path)
            except OSError:
                described = None
    if described is None:
        from disc_runtime.native import blas_choice

        choice = blas_choice()
        described = "disc: " + str(choice.get("f32_gemm") or choice.get("library"))
    _gemm["now"] = described
    return described


def gemm_library() -> str | None:
    """The library DISC's f32 GEMMs run inside Paddle now (None before the launch ops
    are loaded)."""
    return _gemm.get("now")
