"""The system C compiler: found once, invoked with the flags every module is built with."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..options import CORE_OPTIONS

# -fno-math-errno and -fno-trapping-math let math calls and float/int conversions vectorize;
# DISC never reads errno or floating-point exception flags. NaN/infinity semantics are kept
# (no -ffast-math).
#
# -O2 plus the two -O3 passes generated kernels need: vectorization with the dynamic cost
# model (the 'omp simd' row loops are vectorized either way; this covers the rest) and
# loop unswitching (im2col's padding tests hoisted out of the inner loop: 10-35% on a
# conv's gather without it). Kernels ran as fast as with -O3 (same-process A/B over the
# memory-bound benchmark cases and conv, within +-5%), and GPT modules compiled in 23-32%
# less CPU time: the C compiler is most of a cold first compilation.
OPT_FLAGS = ("-O2", "-ftree-vectorize", "-fvect-cost-model=dynamic", "-funswitch-loops")
FLAGS = (*OPT_FLAGS, "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=gnu11",
         "-fwrapv", "-fno-math-errno", "-fno-trapping-math")


class LinkFailed(RuntimeError):
    """Every unit compiled and the link of the objects failed (a prebuilt object that
    does not fit, say): the caller may rebuild the objects it brought."""


class CompilerNotFound(RuntimeError):
    """No C compiler: the native engine is unavailable (DISC falls back to the interpreter)."""


@dataclass(frozen=True)
class Toolchain:
    cc: str
    version: str

    @property
    def flags(self) -> tuple[str, ...]:
        llc = last_level_cache_bytes()
        return (FLAGS + (("-DDISC_LIBMVEC",) if _has_libmvec(self.cc) else ())
                + ((f"-DDISC_LLC_BYTES={llc}",) if llc else ()))

    @property
    def libs(self) -> tuple[str, ...]:
        return (("-lmvec",) if _has_libmvec(self.cc) else ()) + ("-lm",)

    @property
    def target(self) -> str:
        """Identifies the code a module holds: changes when the compiler or CPU does."""
        ident = f"{self.version}|{' '.join(self.flags)}|{_cpu_flags()}"
        return f"native-{platform.machine()}-{hashlib.sha256(ident.encode()).hexdigest()[:12]}"

    def compile(self, sources: str | Sequence[str], out: Path, *,
                vector_report: bool = False, objects: Sequence[Path] = (),
                object_units: Sequence[tuple[str, Path]] = (),
                before_link: Callable[[], list[tuple[str, Path]]] | None = None
                ) -> tuple[float, str]:
        """Build the translation unit(s) ``sources`` into the shared object ``out``, linked
        with the objects ``objects``; returns (seconds, report). ``object_units`` (unit
        text, object path) are compiled to their paths along with the sources, for the
        caller to keep; ``before_link()``, called when those are compiled, returns more of
        them to compile before the link (all must be among ``objects``). Units compile in
        parallel, one compiler process each, and are linked together."""
        units = [sources] if isinstance(sources, str) else list(sources)
        out.parent.mkdir(parents=True, exist_ok=True)
        with _JOBS, _counting(len(units) + len(object_units)):
            return self._compile(units, out, vector_report, list(objects),
                                 list(object_units), before_link)

    def _compile(self, units: list[str], out: Path, vector_report: bool,
                 objects: list[Path], object_units: list[tuple[str, Path]],
                 before_link: Callable[[], list[tuple[str, Path]]] | None = None
                 ) -> tuple[float, str]:
        report = ["-fopt-info-vec-optimized"] if vector_report else []
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="disc-cc-") as tmp:
            paths = [Path(tmp) / f"module{i}.c" for i in range(len(units))]
            for path, text in zip(paths, units):
                path.write_text(text)
            if len(units) == 1 and not object_units and before_link is None:
                stderr = _run([self.cc, *report, *self.flags, str(paths[0]), *map(str, objects),
                               "-o", str(out), *self.libs], self.cc)
                return time.perf_counter() - t0, stderr
            jobs = [([*report, str(src)], src.with_suffix(".o")) for src in paths]
            errs = self._objects(jobs, object_units, Path(tmp))
            late = before_link() if before_link is not None else []
            if late:
                self._objects([], late, Path(tmp) / "late")
            module_objs = [obj for _, obj in jobs]
            try:
                linked = _run([self.cc, *self.flags, *map(str, module_objs),
                               *map(str, objects), "-o", str(out), *self.libs], self.cc)
            except RuntimeError as exc:
                raise LinkFailed(str(exc)) from None
            stderr = "".join(errs[:len(units)]) + linked
        return time.perf_counter() - t0, stderr

    def _objects(self, jobs: list[tuple[list[str], Path]],
                 object_units: list[tuple[str, Path]], tmp: Path) -> list[str]:
        """Compile ``jobs`` (compiler arguments, object path) and ``object_units`` (unit
        text, object path) to objects in parallel; their diagnostics, in order."""
        tmp.mkdir(parents=True, exist_ok=True)
        jobs = list(jobs)
        for i, (text, obj) in enumerate(object_units):
            src = tmp / f"object{i}.c"
            src.write_text(text)
            jobs.append(([str(src)], obj))
        procs = [subprocess.Popen([self.cc, *self.flags, *args, "-c", "-o", str(obj)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for args, obj in jobs]
        errs = [p.communicate()[1] for p in procs]
        for p, err in zip(procs, errs):
            if p.returncode != 0:
                raise RuntimeError(f"C compiler failed ({self.cc}):\n{err[-4000:]}")
        return errs


#: builds compiling at once in this process (each runs one compiler per unit): a bridge
#: starts every cluster's build in the background, and a model with dozens of clusters
#: would otherwise run dozens of compilers at once, each with its own few hundred MB
def usable_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


_JOBS = threading.BoundedSemaphore(max(2, usable_cpus()))
_running = 0
_running_lock = threading.Lock()


def running_compilers() -> int:
    """C compiler processes this process is running now (builds in other threads)."""
    return _running


@contextlib.contextmanager
def _counting(n: int) -> Iterator[None]:
    global _running
    with _running_lock:
        _running += n
    try:
        yield
    finally:
        with _running_lock:
            _running -= n


def _run(cmd: list[str], cc: str) -> str:
    """Run a compiler command; its diagnostics, or raise with them when it fails."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"C compiler failed ({cc}):\n{proc.stderr[-4000:]}")
    return proc.stderr


_MVEC_PROBE = r"""
#include <math.h>
#include <stdint.h>
__attribute__((simd("notinbranch"))) float erff(float);
__attribute__((simd("notinbranch"))) double tanh(double);
void probe(const float *restrict a, float *restrict b, const double *restrict c,
           double *restrict d, int64_t n) {
  #pragma omp simd
  for (int64_t i = 0; i < n; ++i) b[i] = erff(a[i]);
  #pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = tanh(c[i]);
}
"""


@functools.lru_cache(maxsize=4)
def _has_libmvec(cc: str) -> bool:
    """Can modules call glibc's vector math (libmvec) and load? (erff needs glibc 2.35).
    A probe compile (~45 ms), so its answer is kept per compiler binary and C library
    (:func:`disc_runtime.facts.remembered`)."""
    from disc_runtime.facts import file_identity, remembered

    return bool(remembered("libmvec", {
        "cc": file_identity(shutil.which(cc) or cc), "libc": list(platform.libc_ver()),
        "flags": list(FLAGS)}, lambda: _probe_libmvec(cc)))


def _probe_libmvec(cc: str) -> bool:
    import ctypes

    with tempfile.TemporaryDirectory(prefix="disc-probe-") as tmp:
        src, so = Path(tmp) / "probe.c", Path(tmp) / "probe.so"
        src.write_text(_MVEC_PROBE)
        proc = subprocess.run([cc, *FLAGS, str(src), "-o", str(so), "-lmvec", "-lm"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            return False
        try:
            ctypes.CDLL(str(so))
        except OSError:
            return False
    return True


@functools.lru_cache(maxsize=1)
def last_level_cache_bytes(root: str = "/sys/devices/system/cpu/cpu0/cache") -> int | None:
    """Size of the largest data cache CPU 0 sees (Linux sysfs), or None where unknown.
    Kernels stream their outputs past the cache when a call moves more than this (prelude
    ``disc_streams``). sysfs rather than sysconf: in a VM on AMD EPYC, sysconf reported
    the host's 64 MB L3 where the guest's CCX has 8 MB."""
    best = None
    for index in sorted(Path(root).glob("index*")):
        try:
            if (index / "type").read_text().strip() not in ("Data", "Unified"):
                continue
            level = int((index / "level").read_text())
            size = _cache_size((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
        if size and (best is None or level > best[0]):
            best = (level, size)
    return best[1] if best else None


def _cache_size(text: str) -> int | None:
    """sysfs cache sizes read like 32K, 8192K or 1M."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text) if text.isdigit() else None


@functools.lru_cache(maxsize=1)
def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return hashlib.sha256(line.encode()).hexdigest()[:12]
    except OSError:
        pass
    return platform.processor()


@functools.lru_cache(maxsize=4)
def _runs(cand: str) -> Toolchain | None:
    path = shutil.which(cand)
    if path:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True)
        if proc.returncode == 0:
            return Toolchain(path, proc.stdout.splitlines()[0] if proc.stdout else path)
    return None


def find_toolchain(cc: str | None = None) -> Toolchain:
    """The compiler named by ``cc`` or DISC_CC, else CC, else cc/gcc/clang on PATH.

    A compiler named by ``cc`` or DISC_CC is never silently replaced by another: when it
    does not run, the error says so (a typo in DISC_CC would otherwise build with
    whatever cc is on PATH, or, with none there, blame the machine)."""
    named = cc or CORE_OPTIONS.value("cc")
    if named:
        found = _runs(named)
        if found is None:
            what = "the compiler asked for" if cc else "DISC_CC"
            raise CompilerNotFound(f"no C compiler: {what} ({named}) is not an executable C "
                                   "compiler; DISC runs graphs with the reference "
                                   "interpreter instead")
        return found
    for cand in [os.environ.get("CC"), "cc", "gcc", "clang"]:
        found = _runs(cand) if cand else None
        if found is not None:
            return found
    raise CompilerNotFound("no C compiler found (set CC or install gcc); DISC runs graphs "
                           "with the reference interpreter instead")
