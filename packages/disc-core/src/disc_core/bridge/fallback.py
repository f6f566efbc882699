"""The one warning every bridge gives when part of a program runs in its framework instead,
and the bookkeeping that goes with it.

A compile or runtime failure inside DISC must never break a user's program: the bridge runs
the framework's own ops, warns once per distinct reason, and records it in the report.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

from ..report.model import ReasonCode

__all__ = ["DiscFallbackWarning", "FallbackNotice", "warn_once"]

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


class FallbackNotice:
    """One bridge's fallback voice: its warning category and how it says where code runs
    instead (``"eagerly"``, ``"in TensorFlow"``).

    ``warn`` warns once per message; ``cluster_failed`` is the bookkeeping of a cluster
    that was formed and then failed (compile or run): the report entry with its reason
    code, and the warning ``DISC: <what> runs <where> (<code>): <detail>``.
    """

    def __init__(self, category: type[DiscFallbackWarning], where: str):
        self.category = category
        self.where = where

    def warn(self, message: str, stacklevel: int = 2) -> None:
        warn_once(message, self.category, stacklevel=stacklevel + 1)

    def cluster_failed(self, recorder: Any, cluster_id: int, what: str, code: ReasonCode,
                       detail: str, stacklevel: int = 2) -> None:
        """Record in ``recorder`` (a report ``GraphRecorder``) that ``cluster_id`` runs in
        the framework from now on, and say so once."""
        recorder.cluster_failed(cluster_id, code, detail)
        self.warn(f"DISC: {what} runs {self.where} ({code.value}): {detail}",
                  stacklevel=stacklevel + 1)
