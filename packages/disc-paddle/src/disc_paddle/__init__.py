"""DISC for PaddlePaddle: ``model = disc_paddle.compile(model)``, the
``@disc_paddle.to_static`` decorator, or ``disc_paddle.enable()`` for scripts that already
call ``paddle.jit.to_static``.

Importing the package checks the installed Paddle version (without importing paddle) and
raises UnsupportedFrameworkError, an ImportError, when Paddle is missing or unsupported.
Paddle itself is imported on first use of the bridge.
"""

from __future__ import annotations

from typing import Any

from disc_core import report as _report  # imported now so that DISC_REPORT=path takes effect
from disc_paddle._version_check import (
    BRIDGE_VERSION,
    SUPPORTED,
    UnsupportedFrameworkError,
    check_framework_version,
)

__version__ = BRIDGE_VERSION

#: The installed Paddle version, checked against SUPPORTED.
FRAMEWORK_VERSION = check_framework_version()

__all__ = [
    "FRAMEWORK_VERSION",
    "SUPPORTED",
    "DiscConfig",
    "DiscFallbackWarning",
    "UnsupportedFrameworkError",
    "__version__",
    "check_framework_version",
    "compile",
    "compile_count",
    "disable",
    "enable",
    "is_enabled",
    "report",
    "to_static",
]

_LAZY = {"DiscConfig": "config", "DiscFallbackWarning": "api", "compile": "api",
         "compile_count": "api", "disable": "api", "enable": "api", "is_enabled": "api",
         "to_static": "api"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"disc_paddle.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'disc_paddle' has no attribute {name!r}")


def report():
    """This process's coverage report of Paddle programs: what ran compiled, what fell back,
    why.

    A snapshot, as a ``disc_core.report.Report`` (docs/report-schema.md); later calls see
    later programs. ``DISC_REPORT=path`` writes the report of every bridge at exit.
    """
    return _report.current("paddle")
