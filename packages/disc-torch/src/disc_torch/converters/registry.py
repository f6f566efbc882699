"""The table from ATen ops to DISC core primitives (a bridge kit
:class:`~disc_core.bridge.table.ConverterTable`).

A converter is one function ``fn(ctx, node) -> Value | tuple[Value, ...]`` registered for
one or more ATen overloads, together with what it supports: the tensor dtypes it takes
and an optional ``check(node) -> reason | None`` for attribute values. Everything a
converter does not state it supports falls back to eager torch with that reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from disc_core.bridge.table import Converter, ConverterTable

__all__ = ["ALL_DTYPES", "CONVERTERS", "FLOAT_DTYPES", "Converter", "converter", "lookup"]

FLOAT_DTYPES = frozenset({torch.float32, torch.float64})
INT_DTYPES = frozenset({torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8})
ALL_DTYPES = FLOAT_DTYPES | INT_DTYPES | {torch.bool}
NUMERIC_DTYPES = FLOAT_DTYPES | INT_DTYPES


def _overloads(target: Any) -> Iterable[Any]:
    """An OpOverloadPacket stands for every overload; an OpOverload for itself."""
    if isinstance(target, torch._ops.OpOverloadPacket):
        return [getattr(target, o) for o in target.overloads()]
    return [target]


CONVERTERS = ConverterTable("torch", ALL_DTYPES, expand=_overloads)
#: ``@converter(aten.op.overload, dtypes=..., check=...)``: register ``fn`` for ATen ops
converter = CONVERTERS.converter
lookup = CONVERTERS.lookup
