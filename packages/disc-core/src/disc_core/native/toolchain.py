"""The system C compiler: found once, invoked with the flags every module is built with."""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# -fno-math-errno and -fno-trapping-math let math calls and float/int conversions vectorize;
# DISC never reads errno or floating-point exception flags. NaN/infinity semantics are kept
# (no -ffast-math).
FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=gnu11", "-fwrapv",
         "-fno-math-errno", "-fno-trapping-math")


class CompilerNotFound(RuntimeError):
    """No C compiler: the native engine is unavailable (DISC falls back to the interpreter)."""


@dataclass(frozen=True)
class Toolchain:
    cc: str
    version: str

    @property
    def flags(self) -> tuple[str, ...]:
        return FLAGS + (("-DDISC_LIBMVEC",) if _has_libmvec(self.cc) else ())

    @property
    def libs(self) -> tuple[str, ...]:
        return (("-lmvec",) if _has_libmvec(self.cc) else ()) + ("-lm",)

    @property
    def target(self) -> str:
        """Identifies the code a module holds: changes when the compiler or CPU does."""
        ident = f"{self.version}|{' '.join(self.flags)}|{_cpu_flags()}"
        return f"native-{platform.machine()}-{hashlib.sha256(ident.encode()).hexdigest()[:12]}"

    def compile(self, source: str, out: Path, *, vector_report: bool = False
                ) -> tuple[float, str]:
        """Build ``source`` into the shared object ``out``; returns (seconds, report)."""
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="disc-cc-") as tmp:
            src = Path(tmp) / "module.c"
            src.write_text(source)
            cmd = [self.cc, *self.flags, str(src), "-o", str(out), *self.libs]
            if vector_report:
                cmd.insert(1, "-fopt-info-vec-optimized")
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True)
            seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"C compiler failed ({self.cc}):\n{proc.stderr[-4000:]}")
        return seconds, proc.stderr


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
    """Can modules call glibc's vector math (libmvec) and load? (erff needs glibc 2.35)."""
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
def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return hashlib.sha256(line.encode()).hexdigest()[:12]
    except OSError:
        pass
    return platform.processor()


@functools.lru_cache(maxsize=4)
def find_toolchain(cc: str | None = None) -> Toolchain:
    """The compiler from DISC_CC or CC, else cc/gcc/clang on PATH."""
    for cand in [cc, os.environ.get("DISC_CC"), os.environ.get("CC"), "cc", "gcc", "clang"]:
        if not cand:
            continue
        path = shutil.which(cand)
        if path:
            proc = subprocess.run([path, "--version"], capture_output=True, text=True)
            if proc.returncode == 0:
                return Toolchain(path, proc.stdout.splitlines()[0] if proc.stdout else path)
    raise CompilerNotFound("no C compiler found (set CC or install gcc); DISC runs graphs "
                           "with the reference interpreter instead")
