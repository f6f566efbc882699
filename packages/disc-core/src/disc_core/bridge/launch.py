"""The Python side of a framework's launch op (a custom op that runs a DISC module inside the
framework's executor: disc-tf's ``DiscLaunch``, disc-paddle's ``disc_launch_<N>``).

Each launch op's C++ source includes disc-runtime's ``disc_launch_support.h`` (module
loading, the call with the process's BLAS, failure and stats bookkeeping) and exports its
entry points under a prefix of its own; :class:`LaunchLibrary` wraps them.
:func:`write_build_headers` puts the headers a build needs in its directory, and
:func:`publish` moves a built library into the cache atomically, so concurrent processes
never load a half-written one. :func:`build_lock` makes the processes that start on one
cache at once (the ranks of a distributed job) build a library once: the first builds,
the others wait and load what it published.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from disc_runtime.abi import ABI_TYPES
from disc_runtime.cache import file_lock
from disc_runtime.native import blas_functions, launch_support_header
from disc_runtime.options import RUNTIME_OPTIONS

__all__ = ["LaunchLibrary", "build_lock", "flush_cluster_calls", "lock_path", "publish",
           "write_build_headers"]


def write_build_headers(directory: str | os.PathLike[str]) -> None:
    """``disc_abi.h`` (the module ABI) and ``disc_launch_support.h`` into ``directory``."""
    d = Path(directory)
    (d / "disc_abi.h").write_text("#pragma once\n#include <stdint.h>\n" + ABI_TYPES)
    (d / "disc_launch_support.h").write_text(launch_support_header())


def publish(built: str | os.PathLike[str], target: Path) -> None:
    """Copy ``built`` to ``target`` atomically (readers see no file or the whole file)."""
    tmp = target.parent / f".{target.name}.{os.getpid()}"
    shutil.copyfile(built, tmp)
    os.replace(tmp, target)


def lock_path(target: Path) -> Path:
    """The file :func:`build_lock` locks for ``target``: ``.<name>.lock`` beside it."""
    return target.parent / f".{target.name}.lock"


@contextlib.contextmanager
def build_lock(target: Path, timeout: float | None = None) -> Iterator[bool]:
    """Hold the cross-process lock for building ``target`` (an exclusive ``flock`` on
    ``<target>.lock`` beside it); yields whether it is held. A launch library takes a
    C++ build of tens of seconds: without the lock every rank of a job starting on a cold
    cache builds its own copy at once (N times the work on shared cores). The caller
    checks ``target`` again once it holds the lock: another process may have published
    it meanwhile. After ``timeout`` seconds of waiting (default: ``DISC_CACHE_LOCK_TIMEOUT``,
    as for compile-cache entries), or where the file system has no locks, it goes ahead
    without the lock: the atomic :func:`publish` keeps concurrent builds correct."""
    if timeout is None:
        timeout = RUNTIME_OPTIONS.value("cache_lock_timeout")
    with file_lock(lock_path(target), timeout, poll=0.05) as held:
        yield held


class LaunchLibrary:
    """A loaded launch-op library's bookkeeping entry points, ``<prefix>_take_failures`` and
    the rest (see ``disc_launch_support.h``)."""

    def __init__(self, cdll: ctypes.CDLL, prefix: str):
        self.cdll = cdll
        self._fn = {name: getattr(cdll, f"{prefix}_{name}") for name in
                    ("set_blas", "use_cblas", "take_failures", "stats", "totals",
                     "inject_failures", "inject_wrong_results")}
        self._fn["take_failures"].restype = ctypes.c_int64
        self._fn["stats"].restype = ctypes.c_int64
        self._cblas: dict[str, tuple[int, int | None, str]] = {}
        self._failures = ctypes.c_int64()
        self._nanos = ctypes.c_int64()

    def use_process_blas(self) -> None:
        """Hand the library the GEMMs modules call (``disc_runtime.native.blas_functions``)."""
        fns = blas_functions()
        self._fn["set_blas"](*(ctypes.c_void_p(f or None) for f in (
            fns.sgemm, fns.dgemm, fns.set_num_threads_local, fns.sgemm_rowmajor)))

    def use_cblas(self, path: str | os.PathLike[str]) -> str:
        """Run f32 GEMMs through the LP64 ``cblas_sgemm`` of the shared library ``path``
        (a framework's own BLAS, such as Paddle's bundled MKL), one thread per call
        (MKL's ``MKL_Set_Num_Threads_Local`` when it has it); :meth:`use_process_blas` undoes
        it. Returns what it found; raises OSError when ``path`` has no ``cblas_sgemm``."""
        key = os.fspath(path)
        if key in self._cblas:
            sgemm, local, described = self._cblas[key]
            self._fn["use_cblas"](ctypes.c_void_p(sgemm), ctypes.c_void_p(local))
            return described
        lib = ctypes.CDLL(key)
        try:
            sgemm = ctypes.cast(lib.cblas_sgemm, ctypes.c_void_p).value
        except AttributeError:
            raise OSError(f"{path} exports no cblas_sgemm") from None
        # the C interface (int by value); in libmklml_intel.so the lower-case
        # mkl_set_num_threads_local is the Fortran one, which takes a pointer
        try:
            local = ctypes.cast(lib.MKL_Set_Num_Threads_Local, ctypes.c_void_p).value
        except AttributeError:
            local = None
        described = f"{os.path.basename(key)} (cblas_sgemm, LP64, row-major)"
        self._cblas[key] = (sgemm, local, described)
        self._fn["use_cblas"](ctypes.c_void_p(sgemm), ctypes.c_void_p(local))
        return described

    def totals(self) -> tuple[int, float]:
        """(failures recorded so far, seconds spent in DISC modules so far), over every
        cluster: one C call, cheap enough for every eager call."""
        self._fn["totals"](ctypes.byref(self._failures), ctypes.byref(self._nanos))
        return self._failures.value, 1e-9 * self._nanos.value

    def take_failures(self) -> list[tuple[str, str]]:
        """The (cluster key, message) launch failures recorded since the last call."""
        size = 4096
        while True:
            buf = ctypes.create_string_buffer(size)
            need = self._fn["take_failures"](buf, ctypes.c_int64(size))
            if need < size:
                text = buf.value.decode(errors="replace")
                return [tuple(line.split("\t", 1)) for line in text.splitlines() if line]
            size = need + 1

    def stats(self, key: str) -> tuple[int, int, float]:
        """(calls run by DISC, calls run by a fallback, seconds in DISC) of one cluster."""
        calls, fallback, secs = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_double()
        self._fn["stats"](key.encode(), ctypes.byref(calls), ctypes.byref(fallback),
                          ctypes.byref(secs))
        return calls.value, fallback.value, secs.value

    def inject_failures(self, n: int) -> None:
        """Test hook: the next ``n`` module runs fail as if the module reported an error."""
        self._fn["inject_failures"](ctypes.c_int64(n))

    def inject_wrong_results(self, n: int) -> None:
        """Test hook: the next ``n`` module runs return their first float output with 1
        added to its first element (what the accuracy guard must catch)."""
        self._fn["inject_wrong_results"](ctypes.c_int64(n))


def flush_cluster_calls(libs: Sequence[LaunchLibrary | Any],
                        owners: Iterable[tuple[str, Any, int]],
                        seen: dict[str, tuple[int, float]]) -> None:
    """Bring the calls and time in DISC the launch ops counted for each cluster key into
    the report: ``owners`` gives (key, its report recorder, its cluster id); ``seen`` is the
    bridge's memory of what was brought in already. Runs before a report is read, never
    per call (the launch ops count natively, so a call costs no Python)."""
    for key, recorder, cluster_id in owners:
        calls, secs = 0, 0.0
        for lib in libs:
            calls, _fallback, secs = lib.stats(key)
            if calls:
                break
        seen_calls, seen_secs = seen.get(key, (0, 0.0))
        if calls <= seen_calls:
            continue
        seen[key] = (calls, secs)
        recorder.cluster_calls(cluster_id, calls - seen_calls, secs - seen_secs)
