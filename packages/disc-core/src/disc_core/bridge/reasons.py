"""The reason codes of fallbacks: one vocabulary for every bridge.

The shared vocabulary is the coverage report's closed :class:`ReasonCode` list (its
values are the report's JSON form, docs/report-schema.md):

* ``no_converter``: the table has no converter for the op (or the op is not computation a
  converter may take: control flow, random numbers, in-place mutation, resources);
* ``unsupported_dtype``: a tensor's dtype is not one the converter states;
* ``unsupported_attribute``: the converter refused an attribute or argument value (its
  ``check``, or any limit met while converting: the default for a ``ConversionError``);
* ``dynamic_rank``: a tensor of unknown rank;
* ``data_dependent_shape``: a size computed from tensor data;
* ``would_create_cycle``, ``cluster_too_small``, ``excluded_by_user``: clustering's;
* ``compile_error``, ``runtime_error``: a cluster that was formed, then failed.

A bridge may name finer causes of its own (``register_reason("ragged_tensor",
ReasonCode.NO_CONVERTER)``): a ``ConversionError`` may carry such a code, and the report
shows the shared code it maps to, so reports of all bridges aggregate alike.
"""

from __future__ import annotations

import threading

from ..report.model import ReasonCode
from .errors import ConversionError

__all__ = ["ReasonCode", "reason_of", "register_reason", "report_code"]

_extra: dict[str, ReasonCode] = {}
_lock = threading.Lock()


def register_reason(code: str, maps_to: ReasonCode) -> None:
    """Declare a bridge-specific reason code and the shared code it is reported as."""
    if code in {c.value for c in ReasonCode}:
        raise ValueError(f"{code!r} is a shared reason code already")
    with _lock:
        if _extra.get(code, maps_to) is not maps_to:
            raise ValueError(f"reason code {code!r} is registered as {_extra[code].value}")
        _extra[code] = ReasonCode(maps_to)


def report_code(code: ReasonCode | str | None,
                default: ReasonCode = ReasonCode.UNSUPPORTED_ATTRIBUTE) -> ReasonCode:
    """The shared code of ``code`` (a shared code, a registered bridge code, or None for
    ``default``)."""
    if code is None:
        return default
    if isinstance(code, ReasonCode):
        return code
    if code in _extra:
        return _extra[code]
    try:
        return ReasonCode(code)
    except ValueError:
        raise ValueError(f"unknown reason code {code!r} (register_reason declares one)"
                         ) from None


def reason_of(exc: BaseException,
              default: ReasonCode = ReasonCode.UNSUPPORTED_ATTRIBUTE) -> ReasonCode:
    """The shared code for a failed conversion: a ``ConversionError``'s ``code`` when it
    has one, else ``default`` (any other converter limit is an unsupported attribute
    value)."""
    code = exc.code if isinstance(exc, ConversionError) else None
    return report_code(code, default)
