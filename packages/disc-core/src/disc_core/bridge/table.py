"""The converter table type every bridge instantiates once.

A converter is one function registered for one or more framework ops (ATen overloads, TF
op type names, ...) together with what it supports: the dtypes it takes and an optional
``check(node) -> reason | None`` for attribute values. Whatever a converter does not state
it supports stays in the framework, with that reason in the coverage report.

The table is framework-neutral: keys and dtypes are whatever the bridge uses, and a bridge
whose keys come in families (torch's ``OpOverloadPacket``: every overload) passes
``expand`` to register each member.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Check", "Converter", "ConverterTable"]

#: ``check(node)``: a reason string for an attribute value the converter refuses, or None
Check = Callable[[Any], "str | None"]


@dataclass(frozen=True)
class Converter:
    """How one framework op becomes core primitives, and the limits of that translation."""

    fn: Callable[..., Any]
    dtypes: frozenset[Any]
    check: Check | None = None

    def unsupported_attribute(self, node: Any) -> str | None:
        """The converter's reason to refuse ``node``'s attribute values, if any."""
        return self.check(node) if self.check is not None else None

    def takes(self, dtype: Any) -> bool:
        return dtype in self.dtypes

    def dtype_reason(self, op: str, dtype: Any, name: Callable[[Any], str] = str) -> str:
        """The report's wording for a dtype the converter does not take."""
        return (f"{op} on {name(dtype)} (the converter takes "
                f"{', '.join(sorted(name(d) for d in self.dtypes))})")


class ConverterTable(Mapping[Any, Converter]):
    """One bridge's table from framework op to :class:`Converter` (a read-only mapping;
    :meth:`converter` is the decorator that fills it)."""

    def __init__(self, framework: str, default_dtypes: Iterable[Any],
                 expand: Callable[[Any], Iterable[Any]] | None = None):
        self.framework = framework
        self.default_dtypes = frozenset(default_dtypes)
        self._expand = expand
        self._entries: dict[Any, Converter] = {}

    def converter(self, *targets: Any, dtypes: Iterable[Any] | None = None,
                  check: Check | None = None
                  ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register the decorated function for ``targets`` (each expanded by the table's
        ``expand`` hook); two converters for one op is an error."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            entry = Converter(fn, frozenset(self.default_dtypes if dtypes is None
                                            else dtypes), check)
            for target in targets:
                for key in (self._expand(target) if self._expand else (target,)):
                    if key in self._entries:
                        raise ValueError(f"two converters for {key}")
                    self._entries[key] = entry
            return fn

        return register

    def lookup(self, key: Any) -> Converter | None:
        return self._entries.get(key)

    def __getitem__(self, key: Any) -> Converter:
        return self._entries[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"ConverterTable({self.framework!r}, {len(self)} ops)"
