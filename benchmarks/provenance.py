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


def machine(threads: int, versions: dict[str, str | None],
            gemm_library: dict[str, Any]) -> dict[str, Any]:
    """The record every result file carries: CPU model and flags, cores, the threads each
    contender ran with, commit, UTC date, Python and framework versions, and the GEMM
    library of each contender (``{"eager": "torch's MKL", "disc": ...}``)."""
    name, flags = cpu()
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {
        "cpu": name, "cpu_id": cpu_identity(), "cpu_flags": flags, "cpus": os.cpu_count(),
        "threads": threads,
        **commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(), "versions": dict(versions),
        "gemm_library": gemm_library, "load_avg_1m_start": load,
    }


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
