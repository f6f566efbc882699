"""disc-torch's process-wide DISC compilers (one per target) and their compile counts.

Its own module so that the backend, the traced-graph cache (which thaws graphs with the
process's compiler) and ``disc_torch.compile_count`` share it without importing each other.
"""

from __future__ import annotations

from disc_core.bridge.compilers import CompilerRegistry
from disc_core.compiler import Compiler

from .blas import use_torch_blas

__all__ = ["COMPILERS", "get_compiler"]

#: before any module loads, clusters' GEMMs are handed torch's own BLAS
COMPILERS = CompilerRegistry(prepare=use_torch_blas)


def get_compiler(target: str = "auto") -> Compiler:
    """The process-wide DISC compiler of a target (its stats count compilations)."""
    return COMPILERS.get(target)
