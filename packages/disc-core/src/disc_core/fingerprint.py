"""The compiler fingerprint in every cache key: a hash of disc-core's own source.

Its own module because both the compile stages (``pipeline``, which computes cache keys)
and the ``Compiler`` (which hashes it once on the caller's thread) need it.

Hashing a package's source reads every file of it (disc-core's: 116 files, 1.1 MB, 4 ms;
the torch bridge's: 1.3 ms), on every process's first compile or cache lookup, a warm
start included. So a hash is kept beside the cache with the listing it was made from
(every file's name, modification time in nanoseconds and size), and a later process whose
listing is the same takes it from there (about 1 ms: a directory walk and the stats). That
is the check CPython makes of a .pyc against its source, with a finer clock.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

__all__ = ["compiler_fingerprint", "source_fingerprint"]


#: what a package's source is: Python, and the C/C++ its generated code includes (disc-core's
#: ``native/csrc``: a changed attention kernel or prelude must not load modules built with
#: the old one)
SOURCE_SUFFIXES = (".py", ".c", ".h", ".cc")

Listing = list[tuple[str, int, int]]


def _listing(root: Path) -> Listing:
    """(path relative to ``root``, mtime in ns, size) of every source file, sorted."""
    out: Listing = []
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        stack.append(entry.path)
                elif entry.name.endswith(SOURCE_SUFFIXES) and entry.is_file():
                    st = entry.stat()
                    rel = os.path.relpath(entry.path, root).replace(os.sep, "/")
                    out.append((rel, st.st_mtime_ns, st.st_size))
    return sorted(out)


def _digest(root: Path, listing: Listing) -> str:
    h = hashlib.sha256()
    for rel, _, _ in listing:
        h.update(rel.encode())
        h.update((root / rel).read_bytes())
    return h.hexdigest()[:16]


def _memo_file(root: Path) -> Path:
    from disc_runtime.cache import default_cache_dir

    name = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:24]
    return default_cache_dir() / "source-fingerprints" / f"{name}.json"


def source_fingerprint(root: Path) -> str:
    """A hash of every source file under ``root`` (names and contents; ``SOURCE_SUFFIXES``),
    taken from the memo beside the cache when no file's name, mtime or size changed."""
    listing = _listing(root)
    memo = _memo_file(root)
    try:
        kept = json.loads(memo.read_text())
        if [tuple(f) for f in kept["files"]] == listing and isinstance(kept["hash"], str):
            return kept["hash"]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # none yet, unreadable or from another layout: hash and write it
    digest = _digest(root, listing)
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f"{memo.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"root": str(root), "hash": digest, "files": listing}))
        os.replace(tmp, memo)  # readers see the old memo or the new one, never half
    except OSError:
        pass  # a read-only cache: the next process hashes again
    return digest


@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """A hash of disc-core's own source: part of every cache key, so a changed compiler
    (an upgrade, or a development checkout) never loads artifacts an older one built."""
    return source_fingerprint(Path(__file__).parent)
