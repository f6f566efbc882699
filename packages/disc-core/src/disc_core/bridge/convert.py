"""The lowering wrapper: run one node's converter and check what it returned.

Every bridge lowers a node the same way: look its converter up in the table, call it with
the bridge's lowering context, and check each result against the type the framework
recorded for that output (torch's fake tensors, TF's static shapes, Paddle's PIR types).
A converter bug then fails this node's conversion (and the node falls back) instead of
producing a graph that computes something else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..dtypes import DType
from ..ir import Value
from ..report.model import ReasonCode
from ..symbolic import Expr
from .errors import ConversionError
from .table import ConverterTable

__all__ = ["Expected", "as_results", "check_count", "check_result", "run_converter"]


@dataclass(frozen=True)
class Expected:
    """What the framework recorded for one output: its dtype and dims, as far as known.

    ``dims`` is None for an unknown rank; an entry is None for an unknown dim. ``exact``:
    every given dim must equal the result's dim (torch records symbolic sizes exactly);
    otherwise only two static dims that differ are a mismatch (TF records static sizes
    only, where DISC may know a dim as a symbol)."""

    dtype: DType
    dims: tuple[Expr | None, ...] | None = None
    exact: bool = True


def run_converter(table: ConverterTable, key: Any, *args: Any, what: str | None = None
                  ) -> Any:
    """Call ``key``'s converter with ``args`` (the lowering context, the node); a missing
    one is a ``no_converter`` ConversionError."""
    conv = table.lookup(key)
    if conv is None:
        raise ConversionError(f"no converter for {what or key}", code=ReasonCode.NO_CONVERTER)
    return conv.fn(*args)


def as_results(out: Any) -> list[Any]:
    """A converter's return value as a list, one entry per output."""
    return list(out) if isinstance(out, (list, tuple)) else [out]


def check_count(what: str, results: Sequence[Any], expected: int) -> None:
    """One converter result per output the framework recorded."""
    if len(results) != expected:
        raise ConversionError(f"{what}: converter returned {len(results)} values for "
                              f"{expected} results")


def _dims(dims: Sequence[Any]) -> list[str]:
    return ["?" if d is None else str(d) for d in dims]


def check_result(what: str, v: Value, expected: Expected, framework: str) -> None:
    """``v`` must have the dtype and dims the framework recorded."""
    want = expected.dims
    ok = v.dtype == expected.dtype
    if ok and want is not None:
        ok = len(want) == v.rank and all(
            w is None or d == w or (not expected.exact and not (d.is_const and w.is_const))
            for d, w in zip(v.shape, want))
    if not ok:
        shown = "" if want is None else f" {_dims(want)}"
        raise ConversionError(f"{what}: converter produced {v.dtype} {_dims(v.shape)}, "
                              f"{framework} says {expected.dtype}{shown}")
