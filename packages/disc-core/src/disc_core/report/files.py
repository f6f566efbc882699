"""Reading and writing report files.

Writes are atomic (a temp file in the same directory, then one rename) because reports are
written at interpreter exit, possibly by several processes at once, and read by CI jobs:
a reader must see the old file or the new one, never half of one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .model import Report

__all__ = ["load", "write_report"]


def load(path: str | os.PathLike[str]) -> Report:
    """Read and validate a report file.

    Raises OSError when the file cannot be read and ReportFormatError (a ValueError whose
    message names the field) when it is not a valid report of a supported schema version.
    """
    return Report.from_json(Path(path).read_bytes())


def write_report(report: Report, path: str | os.PathLike[str]) -> Path:
    """Write ``report`` as JSON at ``path`` atomically; errors propagate (callers decide)."""
    target = Path(path).expanduser()
    text = report.to_json()
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.write("\n")
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return target
