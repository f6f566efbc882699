"""The one warning every bridge gives when part of a program runs in its framework instead.

A compile or runtime failure inside DISC must never break a user's program: the bridge runs
the framework's own ops, warns once per distinct reason, and records it in the report.
"""

from __future__ import annotations

import threading
import warnings

__all__ = ["DiscFallbackWarning", "warn_once"]

_warned: set[str] = set()
_lock = threading.Lock()


class DiscFallbackWarning(UserWarning):
    """Part of a program runs in its framework instead of DISC (results are unaffected).
    Each bridge subclasses it, so users can filter one framework's warnings."""


def warn_once(message: str, category: type[Warning] = DiscFallbackWarning,
              stacklevel: int = 2) -> None:
    """``warnings.warn`` the first time this process sees ``message``, never again (builds
    run in background threads, hence the lock)."""
    with _lock:
        if message in _warned:
            return
        _warned.add(message)
    warnings.warn(message, category, stacklevel=stacklevel + 1)
