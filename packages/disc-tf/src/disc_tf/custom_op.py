"""Build, cache and load the DiscLaunch TensorFlow custom op (``native/disc_launch.cc``).

The op library is compiled once per (TensorFlow version, source, runtime ABI) with the
system C++ compiler and TensorFlow's own ``tf.sysconfig`` compile and link flags, then kept
under the DISC cache directory (``$DISC_CACHE_DIR/tf_ops/<key>/``). Publication is atomic
(build in a private temporary directory, then rename), so concurrent processes never load a
half-written library; clearing the cache makes the next process rebuild it. Processes that
find no library at once (the workers of a distributed job starting on a cold cache) build
it one at a time under the kit's file lock (:func:`disc_core.bridge.launch.build_lock`), so
one builds and the others load its result.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensorflow as tf

from disc_core.bridge.launch import LaunchLibrary, build_lock, publish, write_build_headers
from disc_runtime.abi import ABI_TYPES, ABI_VERSION
from disc_runtime.cache import default_cache_dir
from disc_runtime.native import launch_support_header

__all__ = ["CustomOpUnavailable", "OpLibrary", "build_count", "library_dir", "load_library"]

SOURCE = Path(__file__).parent / "native" / "disc_launch.cc"
LIB_NAME = "disc_tf_ops.so"


class CustomOpUnavailable(RuntimeError):
    """The custom op cannot be built or loaded here (no C++ compiler, build error)."""


@dataclass
class OpLibrary:
    """The loaded op library: the op wrapper module and the library's C bookkeeping
    (failures, stats, test hook: :class:`disc_core.bridge.launch.LaunchLibrary`)."""

    path: Path
    module: Any  # what tf.load_op_library returned
    cdll: ctypes.CDLL
    launch: LaunchLibrary

    def totals(self) -> tuple[int, float]:
        """(runtime failures recorded so far, seconds spent in DISC modules so far), over
        every cluster: one C call, cheap enough for every eager call."""
        return self.launch.totals()

    def take_failures(self) -> list[tuple[str, str]]:
        """The (cluster key, message) runtime failures recorded since the last call."""
        return self.launch.take_failures()

    def stats(self, key: str) -> tuple[int, int, float]:
        """(calls run by DISC, calls run by the fallback subgraph, seconds in DISC)."""
        return self.launch.stats(key)

    def set_profile(self, key: str, address: int) -> None:
        """Launch ops of cluster ``key`` made from now on time their module's steps into
        the profile slots at ``address`` (an executable's ``profile_address``; 0: off)."""
        fn = self.cdll.disc_tf_set_profile
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        fn.restype = None
        fn(key.encode(), address or None)

    def inject_failures(self, n: int) -> None:
        """Test hook: the next ``n`` module runs fail as if the module reported an error."""
        self.launch.inject_failures(n)

    def inject_wrong_results(self, n: int) -> None:
        """Test hook: the next ``n`` module runs return a skewed first float output."""
        self.launch.inject_wrong_results(n)


_lock = threading.Lock()
_loaded: dict[Path, OpLibrary] = {}
_builds = 0
#: a build that failed in this process is not retried (each DISC function would otherwise
#: spend a compiler run on it); the next process tries again
_failed: dict[Path, CustomOpUnavailable] = {}


def build_count() -> int:
    """How many times this process compiled the op library (0 when the cache had it)."""
    return _builds


def _key() -> str:
    h = hashlib.sha256()
    h.update(tf.__version__.encode())
    h.update(SOURCE.read_bytes())
    h.update(ABI_TYPES.encode())
    h.update(launch_support_header().encode())
    h.update(str(ABI_VERSION).encode())
    h.update(" ".join(tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags()).encode())
    return f"tf{tf.__version__}-{h.hexdigest()[:16]}"


def library_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where this TensorFlow's op library lives (built or not)."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / "tf_ops" / _key()


def _compiler() -> str:
    """``DISC_CXX`` when set (it must exist: a named compiler is never silently replaced),
    else ``CXX``, ``c++``, ``g++``, ``clang++``."""
    from .config import OPTIONS  # the one table of disc-tf's settings

    chosen = OPTIONS.value("cxx")
    if chosen:
        if shutil.which(chosen):
            return shutil.which(chosen)  # type: ignore[return-value]
        raise CustomOpUnavailable(f"DISC_CXX={chosen} is not an executable: the DiscLaunch "
                                  "custom op cannot be built")
    for cand in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if cand and shutil.which(cand):
            return shutil.which(cand)  # type: ignore[return-value]
    raise CustomOpUnavailable("no C++ compiler found (install g++, or set CXX/DISC_CXX): the "
                              "DiscLaunch custom op cannot be built")


def _build(target: Path) -> None:
    global _builds
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        write_build_headers(tmp)
        out = tmp / LIB_NAME
        cmd = [_compiler(), "-std=c++17", "-shared", "-fPIC", "-O2", "-w", str(SOURCE),
               f"-I{tmp}", "-o", str(out), *tf.sysconfig.get_compile_flags(),
               *tf.sysconfig.get_link_flags()]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CustomOpUnavailable("building the DiscLaunch op failed:\n" +
                                      proc.stderr[-4000:])
        publish(out, target)
        _builds += 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_library(cache_dir: str | os.PathLike[str] | None = None) -> OpLibrary:
    """The op library, built first when the cache lacks it. Raises CustomOpUnavailable."""
    target = library_dir(cache_dir) / LIB_NAME
    with _lock:
        lib = _loaded.get(target)
        if lib is not None and target.exists():
            return lib
        if not target.exists():
            if target in _failed:
                raise _failed[target]
            with build_lock(target):  # the workers of a job build it once
                if not target.exists():  # another process may have built it meanwhile
                    try:
                        _build(target)
                    except CustomOpUnavailable as exc:
                        _failed[target] = exc
                        raise
        module = tf.load_op_library(str(target))
        cdll = ctypes.CDLL(str(target))
        launch = LaunchLibrary(cdll, "disc_tf")
        launch.use_process_blas()
        lib = OpLibrary(target, module, cdll, launch)
        _loaded[target] = lib
        return lib
