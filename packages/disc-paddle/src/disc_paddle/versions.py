"""The installed Paddle's version, for converters whose semantics follow it.

Paddle releases differ in a few gradient rules (e.g. how max/min gradients treat ties);
a converter must give what the INSTALLED Paddle gives, so it asks ``paddle_version()``.
The version is read once, from ``paddle.__version__`` (Paddle is imported by then: only
its programs are converted).
"""

from __future__ import annotations

import functools
import re


def parse_version(text: str) -> tuple[int, int, int]:
    """``"3.1.1"`` -> ``(3, 1, 1)``; suffixes (``rc0``, ``.post1``) are ignored. Paddle's
    develop builds report ``0.0.0``: they are newer than any release, so they read as
    ``(999, 0, 0)``."""
    parts = [int(m) for m in re.findall(r"\d+", text)[:3]]
    parts += [0] * (3 - len(parts))
    version = (parts[0], parts[1], parts[2])
    return (999, 0, 0) if version == (0, 0, 0) else version


@functools.cache
def paddle_version() -> tuple[int, int, int]:
    """The installed Paddle's version as ``(major, minor, patch)``."""
    import paddle

    return parse_version(paddle.__version__)
