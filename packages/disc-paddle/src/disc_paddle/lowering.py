"""Lower Paddle PIR ops to DISC core primitives.

A :class:`Lowering` maps PIR values (by their ``id``) to core values and hands the
converters (:mod:`disc_paddle.converters`) what they need: operand values, attributes and
the *known value* of small integer tensors. PIR records a dynamic dim as -1 with no
identity, and programs compute shapes at run time (``shape64 -> slice -> stack ->
reshape``); DISC needs them as symbolic dims at compile time. So ops on shapes are folded
as they are lowered: ``shape64(x)`` is known to be ``[s0, s1, 32]``, a ``slice`` of it
``s1``, a ``stack`` ``[s0, s1, 3, 4, 8]``. A converter that needs a shape asks for the
known value; a known value that is read as data is materialized when read (sizes from
the dims of the graph's inputs).

Two PIR constructs are not ops of their own here: ``builtin.combine`` (a vector of values,
the operand of ``concat``, ``stack``, ``add_n``) is read through :meth:`Lowering.vector`,
and ``builtin.split`` (the elements of an op's vector result) gives the values a vector
converter returned (:mod:`disc_paddle.program`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from disc_core.bridge.context import LoweringContext
from disc_core.bridge.errors import ConversionError
from disc_core.dtypes import DType
from disc_core.ir import Value
from disc_core.symbolic import Expr, as_expr

__all__ = ["PADDLE_DTYPES", "ConversionError", "Known", "Lowering", "core_dtype",
           "dtype_code", "vid"]

#: Paddle DataType codes (``int(value.dtype)``) of the dtypes DISC takes
PADDLE_DTYPES: dict[int, DType] = {}


def _init_dtypes() -> None:
    import paddle

    for pd, core in ((paddle.bool, DType.BOOL), (paddle.int8, DType.I8),
                     (paddle.int16, DType.I16), (paddle.int32, DType.I32),
                     (paddle.int64, DType.I64), (paddle.uint8, DType.U8),
                     (paddle.float16, DType.F16), (paddle.bfloat16, DType.BF16),
                     (paddle.float32, DType.F32), (paddle.float64, DType.F64)):
        PADDLE_DTYPES[int(pd)] = core


_init_dtypes()
_BACK = {v: k for k, v in PADDLE_DTYPES.items()}


def vid(v: Any) -> str:
    """The identity of a PIR value (Python wrappers of one value differ, and ``==`` builds
    an op)."""
    return v.id


def dtype_code(dtype: DType) -> int:
    """The Paddle DataType code of a core dtype."""
    return _BACK[dtype]


def dtype_name(code: Any) -> str:
    import paddle

    for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16",
                 "float32", "float64", "complex64", "complex128"):
        if int(getattr(paddle, name)) == int(code):
            return name
    return str(code)


def core_dtype(dtype: Any) -> DType:
    """The core dtype of a Paddle dtype (a ``paddle.dtype`` or its code)."""
    try:
        return PADDLE_DTYPES[int(dtype)]
    except (KeyError, TypeError):
        raise ConversionError(f"dtype {dtype_name(dtype)} has no DISC equivalent",
                              code="unsupported_dtype") from None


@dataclass(frozen=True)
class Known:
    """An output whose value is known at compile time (numbers, or ``Expr`` sizes in an
    object array): a shape, a folded constant. It becomes a core value only if something
    reads it as data."""

    value: np.ndarray


@dataclass(frozen=True)
class Vector:
    """The result of an op whose output is a vector of tensors (``split``, ``unbind``):
    its elements, each a core value (read through ``builtin.split``)."""

    items: tuple[Value, ...]


def _is_int_like(x: Any) -> bool:
    return isinstance(x, (int, np.integer, Expr))


class Lowering(LoweringContext):
    """One core graph under construction; values and known values keyed by PIR value id."""

    def __init__(self, name: str, fresh_symbol: Callable[[], Expr] | None = None):
        super().__init__(name)
        self.values: dict[str, Value] = {}
        self.known_values: dict[str, np.ndarray] = {}
        self.vectors: dict[str, tuple[Value, ...]] = {}
        self._fresh = fresh_symbol or self._default_fresh
        self._counter = 0

    def _default_fresh(self) -> Expr:
        self._counter += 1
        return Expr.sym(f"d{self._counter}")

    # -- inputs ---------------------------------------------------------------------------
    def add_input(self, v: Any, dtype: DType, shape: Sequence[Expr | int],
                  known: np.ndarray | None = None) -> Value:
        value = self.b.input(f"in{len(self.b.graph.inputs)}", dtype, shape)
        self.values[vid(v)] = value
        if known is not None:
            self.known_values[vid(v)] = known
        return value

    def add_pir_input(self, v: Any, dims: Sequence[Expr] | None = None) -> Value:
        """A value produced outside: its PIR type, a fresh symbol per -1 dim (or ``dims``,
        what an earlier analysis knows of it)."""
        if not v.is_dense_tensor_type():
            raise ConversionError(f"a {v.type()} operand is not a dense tensor",
                                  code="no_converter")
        shape = list(v.shape)
        if any(d < -1 for d in shape):
            raise ConversionError(f"a value of unknown rank ({v.type()})", code="dynamic_rank")
        if dims is None:
            dims = [Expr.const(d) if d >= 0 else self._fresh() for d in shape]
        return self.add_input(v, core_dtype(v.dtype), dims)

    # -- reading operands -----------------------------------------------------------------
    def has(self, v: Any) -> bool:
        i = vid(v)
        return i in self.values or i in self.known_values or i in self.vectors

    def value(self, v: Any) -> Value:
        """The core value of PIR value ``v`` (a known value is materialized here)."""
        i = vid(v)
        out = self.values.get(i)
        if out is not None:
            return out
        k = self.known_values.get(i)
        if k is None:
            raise ConversionError(f"{v.type()} value is not available inside the cluster")
        out = self.materialize(k, core_dtype(v.dtype))
        self.values[i] = out
        return out

    def operand(self, op: Any, index: int) -> Any:
        """The PIR value feeding operand ``index`` of ``op``, or None (an optional operand
        that is not set)."""
        v = op.operand_source(index)
        return v if v.initialized() else None

    def input(self, op: Any, index: int) -> Value:
        """The core value of ``op``'s operand ``index``."""
        v = self.operand(op, index)
        if v is None:
            raise ConversionError(f"{op.name()}: operand {index} is not set")
        return self.value(v)

    def optional(self, op: Any, index: int) -> Value | None:
        """The core value of an optional operand (None when unset)."""
        if index >= op.num_operands():
            return None
        v = self.operand(op, index)
        return None if v is None else self.value(v)

    def vector(self, v: Any) -> list[Any]:
        """The PIR values a vector operand combines (``builtin.combine``'s operands)."""
        op = v.get_defining_op()
        if op is None or op.name() != "builtin.combine":
            raise ConversionError(f"a vector operand that is not built by builtin.combine "
                                  f"({op.name() if op is not None else 'a block argument'})")
        return [op.operand_source(i) for i in range(op.num_operands())]

    def attr(self, op: Any, name: str, default: Any = ...) -> Any:
        attrs = op.attrs()
        if name in attrs:
            return attrs[name]
        if default is ...:
            raise ConversionError(f"{op.name()} has no attribute {name!r}")
        return default

    def known(self, v: Any) -> np.ndarray | None:
        """The value of ``v`` when known at compile time: numbers, or ``Expr`` sizes in an
        object array (``shape64`` of a dynamic tensor)."""
        return None if v is None else self.known_values.get(vid(v))

    def known_ints(self, v: Any, what: str) -> list[Any]:
        """A 1-D (or scalar) integer value's known value as a list of int/Expr."""
        k = self.known(v)
        if k is None:
            raise ConversionError(f"{what} is computed at run time from tensor data",
                                  code="data_dependent_shape")
        flat = [e.value if isinstance(e, Expr) and e.is_const else e for e in k.reshape(-1)]
        if any(isinstance(e, (float, np.floating)) and float(e) != int(e) for e in flat):
            raise ConversionError(f"{what} must be integers, got {k!r}")
        flat = [int(e) if isinstance(e, (float, np.floating, bool, np.bool_)) else e
                for e in flat]
        if not all(_is_int_like(e) for e in flat):
            raise ConversionError(f"{what} must be integers, got {k!r}")
        return [int(e) if not isinstance(e, Expr) else e for e in flat]

    def static_ints(self, v: Any, what: str) -> list[int]:
        """Like :meth:`known_ints`, but every element must be a plain integer."""
        out = self.known_ints(v, what)
        if any(isinstance(e, Expr) for e in out):
            raise ConversionError(f"{what} depends on dynamic sizes: {out}",
                                  code="data_dependent_shape")
        return out

    def known_scalar(self, v: Any, what: str) -> Any:
        """A one-element known value (a number or an Expr size)."""
        k = self.known(v)
        if k is None or k.size != 1:
            raise ConversionError(f"{what} is computed at run time from tensor data",
                                  code="data_dependent_shape")
        e = k.reshape(-1)[0]
        return e.value if isinstance(e, Expr) and e.is_const else e

    def int_list(self, op: Any, index: int, attr: str, what: str) -> list[Any]:
        """An IntArray argument: PIR passes it either as an attribute or as an operand
        (``full_int_array``, or sizes computed at run time)."""
        v = self.operand(op, index) if index < op.num_operands() else None
        if v is None:
            if attr in op.attrs():
                return [int(x) for x in op.attrs()[attr]]
            raise ConversionError(f"{op.name()}: {what} is not set")
        if v.get_defining_op() is not None and \
                v.get_defining_op().name() == "builtin.combine":
            out: list[Any] = []
            for item in self.vector(v):
                out.extend(self.known_ints(item, what))
            return out
        return self.known_ints(v, what)

    # -- building: const, size_value and materialize are the kit's (LoweringContext)

    @staticmethod
    def as_dims(values: Sequence[Any]) -> list[Expr]:
        return [as_expr(e) for e in values]
