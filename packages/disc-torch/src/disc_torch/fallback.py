"""disc-torch's fallback warning: the bridge kit's (:mod:`disc_core.bridge.fallback`),
worded for torch (code that DISC does not run runs eagerly)."""

from __future__ import annotations

from disc_core.bridge import fallback

__all__ = ["NOTICE", "DiscFallbackWarning", "warn_once"]


class DiscFallbackWarning(fallback.DiscFallbackWarning):
    """A DISC cluster runs eagerly instead (the program's results are unaffected)."""


NOTICE = fallback.FallbackNotice(DiscFallbackWarning, "eagerly")
#: warn once per distinct message (a bound method: the warning points at the caller's caller)
warn_once = NOTICE.warn
