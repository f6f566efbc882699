"""The compiler fingerprint in every cache key: a hash of disc-core's own source.

Its own module because both the compile stages (``pipeline``, which computes cache keys)
and the ``Compiler`` (which hashes it once on the caller's thread) need it.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

__all__ = ["compiler_fingerprint", "source_fingerprint"]


#: what a package's source is: Python, and the C/C++ its generated code includes (disc-core's
#: ``native/csrc``: a changed attention kernel or prelude must not load modules built with
#: the old one)
SOURCE_SUFFIXES = (".py", ".c", ".h", ".cc")


def source_fingerprint(root: Path) -> str:
    """A hash of every source file under ``root`` (names and contents; ``SOURCE_SUFFIXES``)."""
    h = hashlib.sha256()
    files = (p for p in root.rglob("*") if p.suffix in SOURCE_SUFFIXES and p.is_file())
    for path in sorted(files):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """A hash of disc-core's own source: part of every cache key, so a changed compiler
    (an upgrade, or a development checkout) never loads artifacts an older one built."""
    return source_fingerprint(Path(__file__).parent)
