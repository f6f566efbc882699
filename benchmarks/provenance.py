"""Where a benchmark's numbers come from: the machine, the code and the libraries.

A ratio means nothing without them: the CPU differs between runs of this project (an Intel
Xeon with AVX-512 on some, an AMD EPYC with AVX2 on others), one GEMM library beats another
by 2x on one of them and loses on the other, and the commit says which compiler produced
the figure. Every result file (``benchmarks/results/*.json``) carries :func:`machine`'s
record, and every printed table starts with :func:`headline`.

Imports no framework: a script passes the versions and GEMM libraries of its contenders.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import allocator  # benchmarks/, this module's own directory

ROOT = Path(__file__).resolve().parents[1]

#: CPU flags that decide which kernels and GEMM paths run (the rest of /proc/cpuinfo's
#: list is kept out of the record: it is long and says nothing about these results).
FLAG_PREFIXES = ("avx", "fma", "amx", "sse4", "f16c", "bmi2")


def cpu() -> tuple[str, str]:
    """(model name, the relevant flags) from /proc/cpuinfo; the platform's processor
    string and no flags elsewhere."""
    name, flags = platform.processor() or "unknown", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = " ".join(sorted(f for f in line.split(":", 1)[1].split()
                                        if f.startswith(FLAG_PREFIXES)))
                break
    except OSError:
        pass
    return name, flags


#: AMD's CPU families by core generation: a VM's model name may say only "AMD EPYC", and
#: the generations differ in vector width per cycle and cache size
AMD_FAMILIES = {23: "Zen/Zen+/Zen 2", 25: "Zen 3/Zen 4", 26: "Zen 5"}


def cpu_identity() -> dict[str, Any]:
    """Vendor, family, model and stepping from /proc/cpuinfo (with AMD's generation when
    the family says it), and the last-level cache from sysfs: the model name alone did not
    tell a 2-core EPYC VM with 8 MB of L3 (Zen 1) from one with 32 MB (Zen 3)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    except OSError:
        pass
    ident: dict[str, Any] = {}
    for key, name in (("vendor_id", "vendor"), ("cpu family", "family"), ("model", "model"),
                      ("stepping", "stepping")):
        if key in fields:
            value = fields[key]
            ident[name] = int(value) if value.isdigit() else value
    if ident.get("vendor") == "AuthenticAMD" and ident.get("family") in AMD_FAMILIES:
        ident["generation"] = AMD_FAMILIES[ident["family"]]
    ident["llc_bytes"] = last_level_cache()
    return ident


def last_level_cache(root: str = "/sys/devices/system/cpu/cpu0/cache") -> int | None:
    """Bytes of the highest-level data cache CPU 0 sees, or None where sysfs does not say."""
    best: tuple[int, int] | None = None
    for index in sorted(Path(root).glob("index*")):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
        digits = text.rstrip("KM")
        if digits.isdigit() and (best is None or level > best[0]):
            best = (level, int(digits) * scale)
    return best[1] if best else None


def commit() -> dict[str, Any]:
    """The checkout's commit and whether it had uncommitted changes (None outside git)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"),
                "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}


def machine(threads: int, versions: dict[str, str | None], gemm_library: dict[str, Any],
            speed_start: dict[str, float] | None = None) -> dict[str, Any]:
    """The record every result file carries: CPU model and flags, cores, the threads each
    contender ran with, commit, UTC date, Python and framework versions, the GEMM
    library of each contender (``{"eager": "torch's MKL", "disc": ...}``), the heap set-up
    every contender shared (benchmarks/allocator.py) and what the
    host delivered when the run started (``speed_start``, a :func:`host_speed` taken then
    by a script that makes the record at its end; measured now when not given.
    :func:`finish` adds the same at the end)."""
    name, flags = cpu()
    return {
        "cpu": name, "cpu_id": cpu_identity(), "cpu_flags": flags, "cpus": os.cpu_count(),
        "threads": threads,
        **commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(), "versions": dict(versions),
        "gemm_library": gemm_library, "heap": allocator.record(), "load_avg_1m_start": _load(),
        "host_speed_start": speed_start or host_speed(),
    }


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


#: a run whose host speed moved by more than this factor between start and end is flagged
SPEED_DRIFT = 1.25


def host_speed(repeats: int = 5, min_seconds: float = 0.06) -> dict[str, float]:
    """What this machine delivers right now, in about a quarter of a second: a 64 MiB
    array copy (past a 32 MB last-level cache; GB/s read + written), a 512^3 f32 numpy
    matmul (GFLOP/s, numpy's BLAS and thread count) and a pure-Python loop (million
    iterations/s: tracing and dispatch are interpreter-bound). Best of at least
    ``repeats`` calls and ``min_seconds`` each (a 2-thread matmul's wake-ups vary).

    The load average misses what matters on a shared VM: the same idle-looking 2-core
    guest ran one eager GPT training step in 87 to 122 ms within an hour and this Python
    loop at 12 and then 22 M iterations/s seconds apart. Ratios measured side by side in
    one run survive that; absolute milliseconds and comparisons between runs do not, and
    these three figures (start and end) say which runs to compare."""
    import numpy as np

    def best(fn: Any) -> float:
        fn()
        times: list[float] = []
        while len(times) < repeats or sum(times) < min_seconds:
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    src = np.ones(16 << 20, np.float32)
    dst = np.zeros_like(src)  # written once: no page faults in the timed copies
    copy_s = best(lambda: np.copyto(dst, src))
    a = np.ones((512, 512), np.float32)
    out = np.empty_like(a)
    mm_s = best(lambda: np.matmul(a, a, out=out))
    loop_s = best(lambda: sum(i & 7 for i in range(200_000)))
    return {"copy_64mib_gbps": round(2 * src.nbytes / copy_s / 1e9, 2),
            "numpy_sgemm_512_gflops": round(2 * 512**3 / mm_s / 1e9, 1),
            "python_loop_mips": round(0.2 / loop_s, 2)}


def speed_drift(start: dict[str, float], end: dict[str, float]) -> dict[str, Any]:
    """end / start per figure of :func:`host_speed`, and whether any moved by more than
    :data:`SPEED_DRIFT` either way (the run's absolute times are then suspect)."""
    ratios = {k: round(end[k] / start[k], 3) for k in start if start.get(k) and k in end}
    moved = [k for k, r in ratios.items() if not 1 / SPEED_DRIFT <= r <= SPEED_DRIFT]
    return {"end_over_start": ratios, "moved": moved}


def speed_line(speed: dict[str, float]) -> str:
    return (f"copy {speed['copy_64mib_gbps']} GB/s, numpy sgemm "
            f"{speed['numpy_sgemm_512_gflops']} GFLOP/s, python "
            f"{speed['python_loop_mips']} M iterations/s")


def finish(record: dict[str, Any]) -> str:
    """Completes ``record`` at the end of a run (load average and host speed again, and
    their drift) and returns the line to print about it."""
    record["load_avg_1m_end"] = _load()
    end = host_speed()
    record["host_speed_end"] = end
    start = record.get("host_speed_start") or {}
    drift = record["host_speed_drift"] = speed_drift(start, end)
    line = "host speed " + (f"at start: {speed_line(start)}; " if start else "") + (
        f"at end: {speed_line(end)}")
    if drift["moved"]:
        line += (f"\nWARNING: the host's speed moved during the run ({', '.join(drift['moved'])}"
                 f": end/start {drift['end_over_start']}); the ratios were measured side by "
                 "side, but absolute times are not comparable with other runs")
    return line


def headline(record: dict[str, Any]) -> str:
    """One line saying where the numbers below were measured."""
    head = str(record.get("commit") or "unknown")[:10] + ("+dirty" if record.get("dirty")
                                                          else "")
    versions = ", ".join(f"{k} {v}" for k, v in record.get("versions", {}).items() if v)
    ident = record.get("cpu_id") or {}
    detail = ", ".join(x for x in (
        ident.get("generation") or (f"family {ident['family']} model {ident.get('model')}"
                                    if "family" in ident else None),
        f"LLC {ident['llc_bytes'] >> 20} MB" if ident.get("llc_bytes") else None) if x)
    name = f"{record['cpu']} [{detail}]" if detail else record["cpu"]
    return (f"machine: {name} ({record['cpu_flags']}), {record['cpus']} cores, "
            f"{record['threads']} threads; commit {head}; {record['date']}; {versions}")


def library_name(path: str | None) -> str | None:
    """A library's file name (the directory only says where pip put it)."""
    return os.path.basename(path) if path else None


class OtherLoad:
    """CPU time that other processes used while this one ran: busy time of the whole machine
    (/proc/stat) minus this process's own and its children's, as a share of wall time x
    cores. The benchmark's figures are only as good as this is small."""

    def __init__(self) -> None:
        self.start = self._sample()

    @staticmethod
    def _sample() -> tuple[float, float, float] | None:
        try:
            fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        except OSError:
            return None
        ticks = os.sysconf("SC_CLK_TCK")
        user, nice, system, _idle, _iowait, irq, softirq, steal = (
            int(v) for v in fields[:8])
        busy = (user + nice + system + irq + softirq + steal) / ticks
        t = os.times()
        return busy, t.user + t.system + t.children_user + t.children_system, time.monotonic()

    def pct(self) -> float | None:
        end = self._sample()
        if self.start is None or end is None:
            return None
        busy, own, wall = (e - s for e, s in zip(end, self.start))
        if wall <= 0:
            return None
        # /proc/stat and os.times() count in clock ticks (10 ms): ignore 3 ticks of slack
        others = max(0.0, busy - own - 3 / os.sysconf("SC_CLK_TCK"))
        return 100 * others / (wall * (os.cpu_count() or 1))


def import_torch_same_library(threads: int | None) -> tuple[Any, int]:
    """(torch, the thread count) for a torch benchmark that holds the GEMM library fixed:
    before torch (and any DISC module) loads, the count (``threads``, else every core up to
    64) goes to ``OMP_NUM_THREADS`` so that DISC's OpenMP team matches torch's, and
    ``DISC_BLAS_TUNE=0`` keeps DISC's GEMMs on torch's own MKL (see
    :func:`torch_same_library`, the record it leads to). Call it before importing torch."""
    n = threads or min(os.cpu_count() or 1, 64)
    os.environ["OMP_NUM_THREADS"] = str(n)
    os.environ["DISC_BLAS_TUNE"] = "0"
    import torch

    torch.set_num_threads(n)
    return torch, n


def torch_same_library() -> dict[str, Any]:
    """The ``gemm_library`` record of a torch benchmark that runs DISC's GEMMs on torch's
    own MKL (``DISC_BLAS_TUNE=0``) against eager and Inductor."""
    from disc_runtime.native import blas_choice

    choice = blas_choice()
    return {"disc": library_name(choice.get("f32_gemm") or choice.get("library")),
            "reason": choice.get("reason"), "eager": "torch's own (MKL / oneDNN)",
            "inductor": "torch's own (extern mm) and its generated code"}
