"""Op attributes: their kinds (how each is normalized, compared and printed) and the
declaration ``Attr``, plus the errors every layer of the IR raises.

Kept apart from :mod:`disc_core.opdef` so that the printer and verifier, which the IR
itself calls, need not import the op machinery (which imports the IR).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np

from .dtypes import DType, dtype_of
from .symbolic import Expr, as_expr

__all__ = ["ARRAY", "BOOL", "DIM", "DIMS", "DTYPE", "FLOAT", "INT", "INTS", "INT_PAIRS",
           "REQUIRED", "STR", "Attr", "AttrKind", "DenseArray", "InterpretError",
           "VerifyError"]


class VerifyError(ValueError):
    """An op or graph is malformed. The message names the op, the operand and the rule."""


class InterpretError(RuntimeError):
    """Running a graph on concrete inputs failed (inconsistent shapes, bad index values)."""


# -- attributes -----------------------------------------------------------------------

REQUIRED = object()


class AttrKind:
    """How one kind of attribute is normalized, compared and printed."""

    name = "any"

    def normalize(self, value: Any) -> Any:
        return value

    def format(self, value: Any) -> str:
        raise NotImplementedError


class _Int(AttrKind):
    name = "int"

    def normalize(self, value: Any) -> int:
        if isinstance(value, Expr) and value.is_const:
            value = value.value
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"expected an integer, got {value!r}")
        return int(value)

    def format(self, value: int) -> str:
        return str(value)


class _Bool(AttrKind):
    name = "bool"

    def normalize(self, value: Any) -> bool:
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"expected true or false, got {value!r}")
        return bool(value)

    def format(self, value: bool) -> str:
        return "true" if value else "false"


class _Float(AttrKind):
    name = "float"

    def normalize(self, value: Any) -> float:
        if isinstance(value, Expr) and value.is_const:
            value = value.value
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
            raise TypeError(f"expected a number, got {value!r}")
        return float(value)

    def format(self, value: float) -> str:
        return _format_float(value)


class _Str(AttrKind):
    name = "str"

    def normalize(self, value: Any) -> str:
        if not isinstance(value, str):
            raise TypeError(f"expected a string, got {value!r}")
        return value

    def format(self, value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class _DType(AttrKind):
    name = "dtype"

    def normalize(self, value: Any) -> DType:
        return dtype_of(value)

    def format(self, value: DType) -> str:
        return f'"{value.short}"'


class _Ints(AttrKind):
    name = "ints"

    def normalize(self, value: Any) -> tuple[int, ...]:
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"expected a list of integers, got {value!r}")
        return tuple(INT.normalize(v) for v in value)

    def format(self, value: tuple[int, ...]) -> str:
        return "[" + ", ".join(str(v) for v in value) + "]"


class _Dim(AttrKind):
    name = "dim"

    def normalize(self, value: Any) -> Expr:
        if isinstance(value, (bool, np.bool_)):
            raise TypeError(f"expected a dimension, got {value!r}")
        return as_expr(value)

    def format(self, value: Expr) -> str:
        return str(value)


class _Dims(AttrKind):
    name = "dims"

    def normalize(self, value: Any) -> tuple[Expr, ...]:
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"expected a list of dimensions, got {value!r}")
        return tuple(DIM.normalize(v) for v in value)

    def format(self, value: tuple[Expr, ...]) -> str:
        return "[" + ", ".join(str(v) for v in value) + "]"


class _IntPairs(AttrKind):
    name = "int_pairs"

    def normalize(self, value: Any) -> tuple[tuple[int, int], ...]:
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"expected a list of [low, high] pairs, got {value!r}")
        out = []
        for v in value:
            if not isinstance(v, (list, tuple)) or len(v) != 2:
                raise TypeError(f"expected a [low, high] pair, got {v!r}")
            out.append((INT.normalize(v[0]), INT.normalize(v[1])))
        return tuple(out)

    def format(self, value: tuple[tuple[int, int], ...]) -> str:
        return "[" + ", ".join(f"[{a}, {b}]" for a, b in value) + "]"


class DenseArray:
    """An immutable, hashable wrapper of a constant's numpy value."""

    __slots__ = ("array", "_hash")

    def __init__(self, array: np.ndarray):
        arr = np.array(array, copy=True)
        arr.setflags(write=False)
        self.array = arr
        self._hash = hash((arr.dtype.name, arr.shape, arr.tobytes()))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, DenseArray) and self.array.dtype == other.array.dtype
                and self.array.shape == other.array.shape
                and self.array.tobytes() == other.array.tobytes())

    def __hash__(self) -> int:
        return self._hash


class _Array(AttrKind):
    name = "array"
    INLINE_LIMIT = 16

    def normalize(self, value: Any) -> DenseArray:
        if isinstance(value, DenseArray):
            return value
        if not isinstance(value, np.ndarray):
            raise TypeError(f"expected a numpy array, got {type(value).__name__}")
        dtype_of(value.dtype)  # reject dtypes the IR has no name for
        return DenseArray(value)

    def format(self, value: DenseArray) -> str:
        arr = value.array
        dt = dtype_of(arr.dtype)
        shape = "[" + ", ".join(str(d) for d in arr.shape) + "]"
        if arr.size <= self.INLINE_LIMIT:
            flat = arr.reshape(-1)
            if dt.is_bool:
                items = ["true" if x else "false" for x in flat]
            elif dt.is_float:
                items = [_format_float(x) for x in flat]
            else:
                items = [str(int(x)) for x in flat]
            body = "[" + ", ".join(items) + "]"
        else:
            body = '"' + base64.b64encode(np.ascontiguousarray(arr).tobytes()).decode() + '"'
        return f"dense<{dt.short}, {shape}, {body}>"


def _format_float(x: float | np.floating) -> str:
    """Shortest text that reads back to the same value in the value's own precision."""
    f = float(x)
    if f != f:
        return "nan"
    if f in (float("inf"), float("-inf")):
        return "inf" if f > 0 else "-inf"
    text = str(x) if isinstance(x, np.generic) else repr(f)
    if not any(c in text for c in ".en"):
        text += ".0"
    return text


INT, BOOL, FLOAT, STR, DTYPE = _Int(), _Bool(), _Float(), _Str(), _DType()
INTS, DIM, DIMS, INT_PAIRS, ARRAY = _Ints(), _Dim(), _Dims(), _IntPairs(), _Array()


@dataclass(frozen=True)
class Attr:
    """Declaration of one attribute of an op."""

    kind: AttrKind
    default: Any = REQUIRED
    choices: tuple[Any, ...] | None = None
    doc: str = ""
    #: (other attribute, value): when omitted, ``value`` once per entry of the other
    #: attribute (slice strides default to ones, one per start index)
    fill_like: tuple[str, Any] | None = None
