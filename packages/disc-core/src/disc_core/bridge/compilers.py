"""Each bridge's process-wide compilers, one per target, and their compile counts."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..compiler import Compiler

__all__ = ["CompilerRegistry"]


class CompilerRegistry:
    """The compilers of one bridge, created on first use (a bridge's own registry, so its
    ``compile_count`` counts only its own graphs' compilations).

    ``prepare`` runs before every lookup, outside the lock: a bridge's process-wide setup
    that must precede any module load (disc-torch hands its framework's BLAS over)."""

    def __init__(self, prepare: Callable[[], None] | None = None):
        self._prepare = prepare
        self._compilers: dict[str, Compiler] = {}
        self._lock = threading.Lock()

    def get(self, target: str = "auto") -> Compiler:
        """The process-wide compiler of ``target``."""
        if self._prepare is not None:
            self._prepare()
        with self._lock:
            if target not in self._compilers:
                self._compilers[target] = Compiler(target=target)
            return self._compilers[target]

    def clear(self) -> None:
        """Forget every compiler (tests start each case with fresh counts)."""
        with self._lock:
            self._compilers.clear()

    def compile_count(self, target: str = "auto") -> int:
        """How many compilations (cache misses) ``target``'s compiler has done."""
        return self.get(target).stats.compiles
