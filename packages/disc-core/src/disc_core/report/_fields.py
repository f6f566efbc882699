"""Typed reads from decoded JSON whose errors name the offending field.

A report file can come from another machine, another DISC version or a hand edit; when it is
wrong, the useful message is ``graphs[2].nodes[17].status: expected one of ...``, not a
``KeyError`` from deep inside a renderer. Every reader here takes the path of the object it
reads from and puts ``path.key`` at the start of its error.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = ["Fields", "ReportFormatError"]

E = TypeVar("E", bound=enum.Enum)
_MISSING = object()


class ReportFormatError(ValueError):
    """A report does not follow the schema; the message starts with the field's path."""


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


class Fields:
    """One JSON object at ``path``; each getter validates and returns one of its fields.

    Absent and ``null`` optional fields read as None (writers omit them). Unknown keys are
    ignored, so a reader accepts files from a newer writer of the same schema version.
    """

    def __init__(self, data: object, path: str) -> None:
        if not isinstance(data, Mapping):
            raise ReportFormatError(f"{path or 'report'}: expected an object, got {_kind(data)}")
        self.data = data
        self.path = path

    def where(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def _get(self, key: str, optional: bool) -> Any:
        value = self.data.get(key, _MISSING)
        if value is _MISSING or value is None:
            if optional:
                return None
            raise ReportFormatError(f"{self.where(key)}: required field is missing")
        return value

    def _fail(self, key: str, expected: str, value: object) -> ReportFormatError:
        return ReportFormatError(f"{self.where(key)}: expected {expected}, got {_kind(value)}")

    def text(self, key: str, *, optional: bool = False) -> Any:
        value = self._get(key, optional)
        if value is not None and not isinstance(value, str):
            raise self._fail(key, "a string", value)
        return value

    def count(self, key: str, *, optional: bool = False, default: int | None = None) -> Any:
        value = self._get(key, optional or default is not None)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._fail(key, "an integer", value)
        if value < 0:
            raise ReportFormatError(f"{self.where(key)}: expected an integer >= 0, got {value}")
        return value

    def number(self, key: str, *, optional: bool = False) -> Any:
        value = self._get(key, optional)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._fail(key, "a number", value)
        if not math.isfinite(value) or value < 0:
            raise ReportFormatError(
                f"{self.where(key)}: expected a finite number >= 0, got {value}"
            )
        return float(value)

    def choice(self, key: str, kind: type[E], *, optional: bool = False) -> E | None:
        value = self._get(key, optional)
        if value is None:
            return None
        try:
            return kind(value)
        except ValueError:
            choices = ", ".join(repr(m.value) for m in kind)
            raise ReportFormatError(
                f"{self.where(key)}: expected one of {choices}, got {value!r}"
            ) from None

    def array(self, key: str, *, optional: bool = False) -> list[Any]:
        value = self._get(key, optional)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self._fail(key, "an array", value)
        return value

    def text_map(self, key: str, *, optional: bool = False) -> dict[str, str]:
        value = self._get(key, optional)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self._fail(key, "an object", value)
        for name, item in value.items():
            if not isinstance(item, str):
                raise self._fail(f"{key}.{name}", "a string", item)
        return dict(value)
