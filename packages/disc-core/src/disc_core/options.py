"""Bridge options: one frozen dataclass per bridge, resolved the same way everywhere.

Precedence (lowest to highest): the dataclass defaults, ``DISC_*`` environment variables
(so a deployed script can be tuned without editing it), and keyword options from code. An
environment value is parsed by the type of the field's default: bool, int, a set of names
(comma-separated), or text.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = ["resolve_options", "split_names"]

T = TypeVar("T")

_TRUE, _FALSE = ("1", "true", "yes"), ("0", "false", "no")


def split_names(text: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]`` (excluded-op lists in options and env vars)."""
    return [s.strip() for s in text.split(",") if s.strip()]


def resolve_options(cls: type[T], options: Mapping[str, Any] | None,
                    environ: Mapping[str, str] | None, env_vars: Mapping[str, str],
                    package: str) -> T:
    """An instance of the dataclass ``cls``: defaults, then the non-empty variables of
    ``env_vars`` (option name -> variable) found in ``environ`` (default ``os.environ``),
    then ``options``; an unknown option is a TypeError naming ``package``'s options."""
    environ = os.environ if environ is None else environ
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    for name, var in env_vars.items():
        raw = environ.get(var)
        if raw:
            values[name] = _parse(fields[name], var, raw)
    for name, value in (options or {}).items():
        if name not in fields:
            raise TypeError(f"unknown {package} option {name!r}; options are "
                            f"{', '.join(sorted(fields))}")
        values[name] = value
    return cls(**values)


def _parse(f: dataclasses.Field, var: str, raw: str) -> Any:
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    if isinstance(default, bool):
        if raw.lower() not in _TRUE + _FALSE:
            raise ValueError(f"{var}={raw!r}: expected 0/1/true/false")
        return raw.lower() in _TRUE
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"{var}={raw!r}: expected an integer") from None
    if isinstance(default, frozenset):
        return frozenset(split_names(raw))
    return raw
