"""DISC for PyTorch: ``torch.compile(model, backend="disc")`` or ``disc_torch.optimize(model)``.

Importing the package checks the installed torch version (from metadata, without importing
torch) and raises UnsupportedFrameworkError, an ImportError, when torch is missing or
unsupported. The backend itself is imported lazily: torch finds it through the
``torch_dynamo_backends`` entry point without importing this package first.
"""

from __future__ import annotations

import sys
from typing import Any

from disc_core import report as _report  # imported now so that DISC_REPORT=path takes effect
from disc_torch._version_check import (
    BRIDGE_VERSION,
    SUPPORTED,
    UnsupportedFrameworkError,
    check_framework_version,
)

__version__ = BRIDGE_VERSION

#: The installed torch version, checked against SUPPORTED.
FRAMEWORK_VERSION = check_framework_version()

__all__ = [
    "FRAMEWORK_VERSION",
    "SUPPORTED",
    "AotCompiled",
    "AotInputError",
    "AotLoadError",
    "DiscConfig",
    "UnsupportedFrameworkError",
    "__version__",
    "aot_compile",
    "aot_load",
    "check_framework_version",
    "compile_count",
    "disc_backend",
    "freeze_weights",
    "optimize",
    "refresh_weights",
    "report",
    "unfreeze_weights",
]

_LAZY = {"DiscConfig": "config", "disc_backend": "backend", "optimize": "backend",
         "aot_compile": "aot", "aot_load": "aot", "AotCompiled": "aot",
         "AotInputError": "aot", "AotLoadError": "aot",
         "freeze_weights": "frozen_weights", "unfreeze_weights": "frozen_weights",
         "refresh_weights": "frozen_weights"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"disc_torch.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'disc_torch' has no attribute {name!r}")


def report():
    """This process's coverage report of torch graphs: what ran compiled, what fell back, why.

    A snapshot, as a ``disc_core.report.Report`` (docs/report-schema.md); later calls see later
    graphs. ``DISC_REPORT=path`` (or the ``report_path`` option) writes it at exit.
    Clusters still compiling in the background are waited for, so the snapshot is complete.
    """
    _wait_for_builds()
    return _report.current("torch")


def _wait_for_builds() -> None:
    partition = sys.modules.get("disc_torch.partition")  # never imported: nothing to wait for
    if partition is not None:
        partition.wait_for_builds()


def compile_count(target: str = "auto") -> int:
    """How many DISC compilations (cache misses) this process has done for torch graphs."""
    from disc_torch.compilers import get_compiler

    _wait_for_builds()
    return get_compiler(target).stats.compiles
