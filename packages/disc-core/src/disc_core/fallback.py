"""The fallback warning; it lives in the bridge kit (:mod:`disc_core.bridge.fallback`), and
this module keeps its old import path."""

from .bridge.fallback import DiscFallbackWarning, warn_once

__all__ = ["DiscFallbackWarning", "warn_once"]
