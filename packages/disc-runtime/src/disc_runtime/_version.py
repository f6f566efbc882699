"""The installed disc-runtime version (kept apart from ``__init__`` to avoid import cycles)."""

from __future__ import annotations

from importlib import metadata

__all__ = ["__version__"]

try:
    __version__: str = metadata.version("disc-runtime")
except metadata.PackageNotFoundError:  # running from a source tree (PYTHONPATH=src)
    __version__ = "0.1.0"
