"""The one error a converter raises when it cannot express a node."""

from __future__ import annotations

from ..report.model import ReasonCode

__all__ = ["ConversionError"]


class ConversionError(ValueError):
    """A converter met something it cannot express; the node stays in its framework.

    ``code`` is a reason code (:mod:`disc_core.bridge.reasons`) when the cause is more
    precise than "an unsupported attribute value" (the default when it is None).
    """

    def __init__(self, message: str, code: ReasonCode | str | None = None):
        super().__init__(message)
        self.code = code
