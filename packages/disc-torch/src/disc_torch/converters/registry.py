"""The table from ATen ops to DISC core primitives.

A converter is one function ``fn(ctx, node) -> Value | tuple[Value, ...]`` registered for
one or more ATen overloads, together with what it supports: the tensor dtypes it takes
and an optional ``check(node) -> reason | None`` for attribute values. Everything a
converter does not state it supports falls back to eager torch with that reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["ALL_DTYPES", "CONVERTERS", "FLOAT_DTYPES", "Converter", "converter", "lookup"]

FLOAT_DTYPES = frozenset({torch.float32, torch.float64})
INT_DTYPES = frozenset({torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8})
ALL_DTYPES = FLOAT_DTYPES | INT_DTYPES | {torch.bool}
NUMERIC_DTYPES = FLOAT_DTYPES | INT_DTYPES


@dataclass(frozen=True)
class Converter:
    """How one ATen op becomes core primitives, and the limits of that translation."""

    fn: Callable[..., Any]
    dtypes: frozenset[torch.dtype]
    check: Callable[[torch.fx.Node], str | None] | None

    def unsupported_attribute(self, node: torch.fx.Node) -> str | None:
        return self.check(node) if self.check is not None else None


CONVERTERS: dict[Any, Converter] = {}


def converter(*targets: Any, dtypes: Iterable[torch.dtype] = ALL_DTYPES,
              check: Callable[[torch.fx.Node], str | None] | None = None
              ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn`` for ``targets`` (OpOverloads, or packets: every overload)."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for target in targets:
            overloads = ([getattr(target, o) for o in target.overloads()]
                         if isinstance(target, torch._ops.OpOverloadPacket) else [target])
            for ov in overloads:
                if ov in CONVERTERS:
                    raise ValueError(f"two converters for {ov}")
                CONVERTERS[ov] = Converter(fn, frozenset(dtypes), check)
        return fn

    return register


def lookup(target: Any) -> Converter | None:
    return CONVERTERS.get(target)
