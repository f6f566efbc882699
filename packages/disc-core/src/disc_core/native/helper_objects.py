"""Prebuilt objects of the library helpers (``csrc/gemm.c``, ``csrc/attention.c``).

Every module with a GEMM holds the GEMM helper of its dtype, and every module with fused
attention its kernels: the same C, instantiated the same way, compiled again in every
module (0.23 s of gcc for the GEMM helper, 0.6 s for attention, of a GPT module's ~3 s).
Each helper is instead compiled once into an object of its own (its unit: the prelude and
the helper, entry points as hidden symbols, ``DISC_HELPERS_LINKED``) and linked into every
module that calls it; the module's unit sees only the helper's types and prototypes
(``DISC_HELPER_DECLARE_ONLY``).

Objects are kept in memory for the process and on disk under ``<cache dir>/objects-v1/``,
named by the compiler, its flags, the CPU and the unit's text (:func:`object_key`), so a
change to any of them builds afresh. A record on disk carries the object's sha256: one that
does not match (a torn write, a corrupted file) is built again, never linked.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from .toolchain import Toolchain

__all__ = ["HelperObjects", "LAYOUT", "object_key"]

LAYOUT = "objects-v1"
_MAGIC = b"DISCOBJ1"

#: objects built or read by this process, by key: a process whose cache directory changes
#: (tests give each its own) builds each helper once
_MEMORY: dict[str, bytes] = {}
_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def object_key(tc: Toolchain, unit: str) -> str:
    """What a helper object depends on: the compiler and the code it generates for this
    CPU (``tc.target`` covers version, flags and CPU features) and the unit's text."""
    return hashlib.sha256(f"{tc.target}\0{unit}".encode()).hexdigest()[:32]


class HelperObjects:
    """The objects of a module's helper units, written into its build directory.

    Each unit's object is found in memory or on disk (``cached``), or this build compiles
    it (``missing``: unit text and the path to compile it to, its lock held so that builds
    of this process starting meanwhile do not compile it too), or another build is
    compiling it now (``pending``). The compiler runs this build's own units and the
    missing ones in parallel, then calls :meth:`before_link`, which keeps what this build
    compiled (releasing its locks) and takes the pending objects their builders have kept
    by then; those still being built it returns, to compile now. It never waits for
    another build: builds hold a slot of the compiler pool (``toolchain._JOBS``) while
    they run, so a build waiting for a helper whose builder waits for a slot would never
    finish. :meth:`forget` drops every object this build read from a cache, for a link
    that failed on one of them. Use it as a context manager: locks still held at the end
    are released."""

    def __init__(self, tc: Toolchain, units: list[str], directory: Path) -> None:
        self.keys = [object_key(tc, unit) for unit in units]
        self.paths = [Path(directory) / f"helper{i}.o" for i in range(len(units))]
        self.units = list(units)
        self.missing: list[tuple[str, Path]] = []
        self.cached: list[str] = []
        self._pending: list[int] = []
        self._held: list[threading.Lock] = []
        for i, key in enumerate(self.keys):
            data = _MEMORY.get(key)
            if data is None:
                data = _read(_disk_path(key))
            if data is not None:
                self.paths[i].write_bytes(data)
                self.cached.append(key)
                continue
            lock = _unit_lock(key)
            if lock.acquire(blocking=False):
                self._held.append(lock)
                self.missing.append((units[i], self.paths[i]))
            else:
                self._pending.append(i)

    def before_link(self) -> list[tuple[str, Path]]:
        """Keep the objects compiled so far, then take the pending ones kept meanwhile;
        the units of the others (still being built, or their builder failed), to compile
        now."""
        self.keep()
        self.release()
        late: list[tuple[str, Path]] = []
        for i in self._pending:
            key = self.keys[i]
            data = _MEMORY.get(key)
            if data is None:
                late.append((self.units[i], self.paths[i]))
            else:
                self.paths[i].write_bytes(data)
                self.cached.append(key)
        self._pending = []
        return late

    def keep(self) -> None:
        """Store the objects this build compiled, in memory and on disk."""
        for i, key in enumerate(self.keys):
            if key not in self.cached and i not in self._pending and key not in _MEMORY:
                path = self.paths[i]
                if path.exists():
                    data = path.read_bytes()
                    _MEMORY[key] = data
                    _write(_disk_path(key), data)

    def forget(self) -> None:
        """Drop the objects this build read from memory or disk (a link failed)."""
        for key in self.cached:
            _MEMORY.pop(key, None)
            try:
                _disk_path(key).unlink()
            except OSError:
                pass

    def release(self) -> None:
        while self._held:
            self._held.pop().release()

    def __enter__(self) -> HelperObjects:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _unit_lock(key: str) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(key, threading.Lock())


def _disk_path(key: str) -> Path:
    from disc_runtime.cache import default_cache_dir

    return default_cache_dir() / LAYOUT / f"{key}.o"


def _read(path: Path) -> bytes | None:
    """The object in the record at ``path``, or None when it is missing or does not match
    its checksum."""
    try:
        record = path.read_bytes()
    except OSError:
        return None
    head = len(_MAGIC) + 32
    if len(record) <= head or record[:len(_MAGIC)] != _MAGIC:
        return None
    data = record[head:]
    if hashlib.sha256(data).digest() != record[len(_MAGIC):head]:
        return None
    _MEMORY[path.stem] = data
    return data


def _write(path: Path, data: bytes) -> None:
    """Keep ``data`` at ``path`` with its checksum; a cache that cannot be written only
    costs the next process a build."""
    from disc_runtime.facts import write_best_effort

    write_best_effort(path, _MAGIC + hashlib.sha256(data).digest() + data)
