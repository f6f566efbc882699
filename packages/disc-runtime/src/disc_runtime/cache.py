"""Persistent, process-safe compile cache of artifacts.

Compiling is expensive; a graph compiled once should be reused by every later call, process
and run. Artifacts are specialised on dtypes and ranks but not on concrete sizes (dims are
symbolic), so the *key* must never contain concrete dims: the compiler hashes the graph
fingerprint, the input dtypes and ranks, the DISC package versions and the target with
:func:`cache_key`. Then all shapes of one graph share ONE entry.

Layout: ``<directory>/v1/<key[:2]>/<key>/`` holds one artifact directory; ``v1`` versions the
layout so a future runtime can change it without misreading old entries. Alongside live
``.staging/`` (builds in progress) and ``.trash/`` (entries being deleted).

Publishing needs no lock: a build writes into a private temp directory inside the cache
root (same filesystem) and is published with one ``os.rename``. Readers therefore see either
no entry or a complete one. When two processes race, the loser's rename fails because the
winner's entry exists; the loser validates the winner's entry, uses it and deletes its own.

Building is serialized per key, though, so that the ranks of a distributed job (or any
processes) starting on one cache compile each cluster once: a process about to build takes
an exclusive ``flock`` on ``.locks/<key>.lock``; the others wait on it (at most
``DISC_CACHE_LOCK_TIMEOUT`` seconds; then they build too, and the rename race above keeps
that correct), find the entry published and load it as a disk hit. Within one process, a
per-key lock prevents two threads from building the same key.

Nothing on disk is trusted: every entry is loaded with full sha256 verification (of its
files, and of the manifest through its ``manifest.sha256`` seal) and its manifest key must
equal the requested key. A corrupt entry is moved aside, deleted,
reported with :class:`~disc_runtime.errors.CacheCorruptionWarning` and rebuilt.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .artifact import Artifact, _fsync_dir
from .errors import (
    ArtifactNotFoundError,
    CacheCorruptionWarning,
    CorruptArtifactError,
    DiscRuntimeError,
)
from .options import RUNTIME_OPTIONS

__all__ = [
    "CACHE_LAYOUT_VERSION",
    "CacheStats",
    "CompileCache",
    "cache_key",
    "default_cache",
    "default_cache_dir",
    "file_lock",
]

CACHE_LAYOUT_VERSION = "v1"
_STAGING = ".staging"
_TRASH = ".trash"
_LOCKS = ".locks"

try:  # POSIX: one builder per key across processes
    import fcntl
except ImportError:  # pragma: no cover - elsewhere processes race as before
    fcntl = None  # type: ignore[assignment]

#: keys whose build lock this process holds. flock conflicts between two opens of one file
#: even in one process, so a build that (through another CompileCache on the same
#: directory) builds its own key again would wait on itself: such a nested build goes
#: ahead unlocked (the publishing rename keeps it correct)
_held_keys: set[str] = set()
_held_lock = threading.Lock()
_STALE_STAGING_S = 3600.0
_KEY_RE = re.compile(r"[A-Za-z0-9_-]{3,128}")

Build = Callable[[Path], "Artifact | None"]


def default_cache_dir() -> Path:
    """``$DISC_CACHE_DIR``, else ``$XDG_CACHE_HOME/disc``, else ``~/.cache/disc``.

    This is the base directory; the cache itself lives in its ``v1`` subfolder.
    """
    env = RUNTIME_OPTIONS.value("cache_dir")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "disc"
    return Path.home() / ".cache" / "disc"


def cache_key(parts: Mapping[str, object]) -> str:
    """sha256 hex of the canonical JSON of ``parts`` (sorted keys, no whitespace).

    ``parts`` should hold everything that changes the compiled code - graph fingerprint,
    input dtypes and ranks, DISC versions, target - and NEVER concrete dims: artifacts are
    shape-polymorphic, and putting sizes in the key would compile once per shape. Values
    must be JSON-serializable (``TypeError`` otherwise), top-level keys strings.
    """
    if not isinstance(parts, Mapping):
        raise TypeError(f"cache_key expects a mapping, got {type(parts).__name__}")
    for k in parts:
        if not isinstance(k, str):
            raise TypeError(f"cache_key: keys must be strings, got {k!r}")
    text = json.dumps(
        dict(parts), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class CacheStats:
    """Counters of one :class:`CompileCache` instance (this process only)."""

    memory_hits: int = 0
    disk_hits: int = 0
    misses: int = 0  #: calls that ran ``build``
    rebuilt_corrupt: int = 0  #: misses caused by a corrupt entry that was discarded
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {
                "memory_hits": self.memory_hits,
                "disk_hits": self.disk_hits,
                "misses": self.misses,
                "rebuilt_corrupt": self.rebuilt_corrupt,
            }

    def _inc(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)


def _remove_tree(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except OSError:
            pass


def _tree_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


@contextlib.contextmanager
def file_lock(path: Path, timeout: float, poll: float = 0.02) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on ``path`` (created with its folder) while the block
    runs; yields whether it is held. Waits at most ``timeout`` seconds for another
    process's lock; yields False at once where locks are unavailable (no ``fcntl``, a
    read-only folder, a file system without locks) or ``timeout`` is 0. Callers use it to
    save work only (one builder of a cache entry or a launch library): what they publish
    must stay correct without it."""
    if fcntl is None or not timeout:
        yield False
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield False
        return
    held = False
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(poll)
            except OSError:  # the file system has no locks
                break
        yield held
    finally:
        if held:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


class CompileCache:
    """Artifacts by key, in memory (optional) and on disk; see the module docstring.

    ``directory`` defaults to :func:`default_cache_dir`; entries live under
    ``directory/v1`` (:attr:`root`). ``memory=False`` disables the in-process layer, so every
    lookup re-verifies the disk entry.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None, *, memory: bool = True):
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.root = self.directory / CACHE_LAYOUT_VERSION
        self.memory = memory
        self.stats = CacheStats()
        self._mem: dict[str, Artifact] = {}
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}

    # counters, also reachable as attributes of the cache itself
    @property
    def memory_hits(self) -> int:
        return self.stats.memory_hits

    @property
    def disk_hits(self) -> int:
        return self.stats.disk_hits

    @property
    def misses(self) -> int:
        return self.stats.misses

    @property
    def rebuilt_corrupt(self) -> int:
        return self.stats.rebuilt_corrupt

    def entry_path(self, key: str) -> Path:
        """Where the entry for ``key`` lives (whether or not it exists)."""
        _check_key(key)
        return self.root / key[:2] / key

    def get_or_build(self, key: str, build: Build) -> tuple[Artifact, str]:
        """Return ``(artifact, source)`` with source ``"memory"``, ``"disk"`` or ``"miss"``.

        On a miss, ``build(path)`` must write a complete artifact at ``path`` (which does not
        exist yet) with ``Artifact.write(path, ..., key=key)`` - the manifest key must equal
        ``key``. ``build``'s exceptions propagate and leave nothing behind. The returned
        artifact lives at :meth:`entry_path` (``build``'s temporary path is gone).
        """
        _check_key(key)
        hit = self._memory_get(key)
        if hit is not None:
            return hit, "memory"
        with self._key_lock(key):
            hit = self._memory_get(key)  # another thread may have built it meanwhile
            if hit is not None:
                return hit, "memory"
            artifact, corrupt = self._load_entry(key)
            if artifact is not None:
                self.stats._inc("disk_hits")
                self._remember(key, artifact)
                return artifact, "disk"
            with self._build_lock(key):
                # another process may have published it while this one waited
                artifact, again = self._load_entry(key)
                if artifact is not None:
                    self.stats._inc("disk_hits")
                    self._remember(key, artifact)
                    return artifact, "disk"
                artifact = self._build_and_publish(key, build)
            corrupt = corrupt or again
            self.stats._inc("misses")
            if corrupt:
                self.stats._inc("rebuilt_corrupt")
            self._remember(key, artifact)
            return artifact, "miss"

    def info(self) -> dict[str, Any]:
        """``{"root", "entries", "total_bytes", "memory_entries"}`` of the on-disk cache."""
        entries = 0
        total = 0
        for entry in self._entries():
            entries += 1
            total += _tree_bytes(entry)
        with self._lock:
            in_memory = len(self._mem)
        return {
            "root": str(self.root),
            "entries": entries,
            "total_bytes": total,
            "memory_entries": in_memory,
        }

    def clear(self) -> int:
        """Delete every entry (and stale temp dirs); return the number of entries removed.

        Entries are renamed into ``.trash`` before deletion, so concurrent readers never see
        a half-deleted entry. The memory layer is emptied too.
        """
        with self._lock:
            self._mem.clear()
        removed = 0
        for entry in self._entries():
            if self._move_to_trash(entry) is not None:
                removed += 1
        _remove_tree(self.root / _TRASH)
        staging = self.root / _STAGING
        if staging.is_dir():
            cutoff = time.time() - _STALE_STAGING_S
            for tmp in staging.iterdir():
                try:
                    if tmp.stat().st_mtime < cutoff:
                        _remove_tree(tmp)
                except OSError:
                    pass
        return removed

    def __repr__(self) -> str:
        return f"CompileCache(root={str(self.root)!r}, memory={self.memory})"

    # -- internals -----------------------------------------------------------------------

    def _memory_get(self, key: str) -> Artifact | None:
        if not self.memory:
            return None
        with self._lock:
            artifact = self._mem.get(key)
        if artifact is not None:
            self.stats._inc("memory_hits")
        return artifact

    def _remember(self, key: str, artifact: Artifact) -> None:
        if self.memory:
            with self._lock:
                self._mem[key] = artifact

    def _key_lock(self, key: str) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    def _entries(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        found = []
        for shard in sorted(self.root.iterdir()):
            if shard.name.startswith(".") or not shard.is_dir():
                continue
            found.extend(e for e in sorted(shard.iterdir()) if e.is_dir())
        return found

    def _load_entry(self, key: str) -> tuple[Artifact | None, bool]:
        """(verified artifact or None, whether a corrupt entry was found and discarded)."""
        final = self.entry_path(key)
        try:
            seen = os.stat(final)
        except FileNotFoundError:
            return None, False
        try:
            artifact = Artifact.load(final, verify=True)
            if artifact.key != key:
                raise CorruptArtifactError(
                    f"manifest key is {artifact.key!r}, expected the entry's key {key}"
                )
            if not artifact.manifest_sealed:  # every entry is written sealed: the seal is lost
                raise CorruptArtifactError(f"{final} has no manifest.sha256")
        except ArtifactNotFoundError:
            return None, False  # removed concurrently (clear() or another discard)
        except (DiscRuntimeError, OSError) as exc:
            warnings.warn(
                f"DISC compile cache: entry {final} is corrupt and will be rebuilt: {exc}",
                CacheCorruptionWarning,
                stacklevel=3,
            )
            self._discard(final, seen)
            return None, True
        return artifact, False

    def _discard(self, final: Path, seen: os.stat_result) -> None:
        """Remove the corrupt entry we inspected - but never a fresh one published since."""
        trash = self._move_to_trash(final)
        if trash is None:
            return
        moved = os.lstat(trash)
        if (moved.st_ino, moved.st_dev) != (seen.st_ino, seen.st_dev):
            try:  # another process replaced the entry meanwhile: put theirs back
                os.rename(trash, final)
                return
            except OSError:
                pass
        _remove_tree(trash)

    def _move_to_trash(self, path: Path) -> Path | None:
        trash = self.root / _TRASH / f"{path.name}.{uuid.uuid4().hex}"
        trash.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(path, trash)
        except FileNotFoundError:
            return None
        except OSError:
            _remove_tree(path)
            return None
        return trash

    @contextlib.contextmanager
    def _build_lock(self, key: str) -> Iterator[bool]:
        """Hold the cross-process build lock of ``key`` (yields whether it is held: after
        ``DISC_CACHE_LOCK_TIMEOUT`` seconds of waiting, or where locks are unavailable, the
        build goes ahead without it)."""
        timeout = RUNTIME_OPTIONS.value("cache_lock_timeout")
        with _held_lock:
            nested = key in _held_keys
        if fcntl is None or not timeout or nested:
            yield False
            return
        with file_lock(self.root / _LOCKS / f"{key}.lock", timeout) as held:
            if held:
                with _held_lock:
                    _held_keys.add(key)
            try:
                yield held
            finally:
                if held:
                    with _held_lock:
                        _held_keys.discard(key)

    def _build_and_publish(self, key: str, build: Build) -> Artifact:
        staging = self.root / _STAGING
        staging.mkdir(parents=True, exist_ok=True)
        tmpdir = Path(tempfile.mkdtemp(prefix=f"{key[:16]}.", dir=staging))
        target = tmpdir / "artifact"
        try:
            result = build(target)
            if not target.is_dir():
                raise DiscRuntimeError(
                    f"cache build for key {key} did not write an artifact at {target} "
                    "(build(path) must call Artifact.write(path, ..., key=key))"
                )
            if isinstance(result, Artifact) and result.directory.resolve() != target.resolve():
                raise DiscRuntimeError(
                    f"cache build for key {key} returned an artifact at {result.directory}, "
                    f"but must write it at the path it was given ({target})"
                )
            built = Artifact.load(target, verify=True)
            if built.key != key:
                raise DiscRuntimeError(
                    f"cache build wrote an artifact with key {built.key!r}, expected {key!r} "
                    "(pass key=key to Artifact.write)"
                )
            final = self.entry_path(key)
            final.parent.mkdir(parents=True, exist_ok=True)
            for _attempt in range(5):
                try:
                    os.rename(target, final)
                except OSError:
                    if not os.path.lexists(final):
                        raise
                    # Another process published first: use theirs if it is sound.
                    theirs, _corrupt = self._load_entry(key)
                    if theirs is not None:
                        return theirs
                    continue  # theirs was corrupt and is gone: retry publishing ours
                _fsync_dir(final.parent)
                return Artifact.load(final, verify=False)
            raise DiscRuntimeError(f"could not publish cache entry {final}: it keeps changing")
        finally:
            _remove_tree(tmpdir)


def _check_key(key: object) -> None:
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise ValueError(
            f"invalid cache key {key!r}: expected 3-128 characters [A-Za-z0-9_-] "
            "(use cache_key(...))"
        )


_defaults: dict[Path, CompileCache] = {}
_defaults_lock = threading.Lock()


def default_cache() -> CompileCache:
    """The process-wide cache at :func:`default_cache_dir` (one instance per directory)."""
    directory = default_cache_dir()
    with _defaults_lock:
        cache = _defaults.get(directory)
        if cache is None:
            cache = _defaults[directory] = CompileCache(directory)
        return cache
