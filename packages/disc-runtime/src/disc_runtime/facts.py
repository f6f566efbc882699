"""Facts measured once per machine and kept on disk, so that a new process does not
measure them again: which BLAS is faster here, whether the C compiler links glibc's vector
math. Each is a small JSON value under ``<cache dir>/facts-v1/``, named by what it depends
on (library files, compiler version, CPU), so any change measures afresh.

They cost a process start 50-110 ms each when measured (a GEMM timing, a probe compile):
most of a warm start's own time once traced graphs come from the cache too.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .cache import default_cache_dir

__all__ = ["cpu_identity", "file_identity", "remembered", "write_best_effort"]

LAYOUT = "facts-v1"


def remembered(name: str, depends_on: dict[str, Any], measure: Callable[[], Any]) -> Any:
    """``measure()``'s JSON value, from disk when an earlier process measured it with the
    same ``depends_on``; else measured now and kept. An unreadable record is measured
    again; one that cannot be written only costs the next process a measurement."""
    text = json.dumps(depends_on, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    path = default_cache_dir() / LAYOUT / f"{name}-{digest}.json"
    try:
        record = json.loads(path.read_text())
        if record.get("depends_on") == json.loads(text):
            return record["value"]
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    value = measure()
    _write(path, {"depends_on": depends_on, "value": value})
    return value


def _write(path: Path, record: dict[str, Any]) -> None:
    write_best_effort(path, json.dumps(record).encode())


def write_best_effort(path: Path, data: bytes) -> None:
    """Publish ``data`` at ``path`` atomically (a temporary file renamed over it), or not
    at all: something kept only to save later processes work, which a read-only or full
    cache directory must not turn into an error."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        tmp = None
    except OSError:
        pass
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def file_identity(path: str | None) -> list[Any] | None:
    """A file as a fact depends on it: real path, size and modification time."""
    if path is None:
        return None
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return [real, None, None]
    return [real, st.st_size, st.st_mtime_ns]


@functools.lru_cache(maxsize=1)
def cpu_identity() -> str:
    """The CPU model and feature flags, hashed (a measurement is only valid on the CPU
    that made it)."""
    parts = []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags", "cpu family", "model\t")):
                parts.append(line)
                if len(parts) >= 4:
                    break
    except OSError:
        import platform

        parts.append(platform.processor() or platform.machine())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
