"""The installed disc-core version (kept apart so reading it imports nothing else)."""

from importlib import metadata

try:
    __version__ = metadata.version("disc-core")
except metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.1.0"
