"""DISC for TensorFlow: ``disc_tf.enable()`` (every tf.function, Keras included) or the
``@disc_tf.function`` decorator.

Importing the package checks the installed TensorFlow version (without importing
tensorflow) and raises UnsupportedFrameworkError, an ImportError, when TensorFlow is missing
or unsupported. TensorFlow itself is imported on first use of the bridge.
"""

from __future__ import annotations

from typing import Any

from disc_core import report as _report  # imported now so that DISC_REPORT=path takes effect
from disc_tf._version_check import (
    BRIDGE_VERSION,
    SUPPORTED,
    UnsupportedFrameworkError,
    check_framework_version,
)

__version__ = BRIDGE_VERSION

#: The installed TensorFlow version, checked against SUPPORTED.
FRAMEWORK_VERSION = check_framework_version()

__all__ = [
    "FRAMEWORK_VERSION",
    "SUPPORTED",
    "DiscConfig",
    "DiscFallbackWarning",
    "UnsupportedFrameworkError",
    "__version__",
    "check_framework_version",
    "compile_count",
    "disable",
    "enable",
    "function",
    "is_enabled",
    "report",
]

_LAZY = {"DiscConfig": "config", "DiscFallbackWarning": "api", "compile_count": "api",
         "disable": "api", "enable": "api", "function": "api",
         "is_enabled": "api"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"disc_tf.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'disc_tf' has no attribute {name!r}")


def report():
    """This process's coverage report of TensorFlow graphs: what ran compiled, what fell back, why.

    A snapshot, as a ``disc_core.report.Report`` (docs/report-schema.md); later calls see later
    graphs. ``DISC_REPORT=path`` writes the report of every bridge at exit.
    """
    return _report.current("tensorflow")
