"""Lower TensorFlow ops to DISC core primitives.

A :class:`Lowering` maps TF tensors (by name, ``"op:0"``) to core values and hands the
converters (:mod:`disc_tf.converters`) what they need: operand values, attributes, and the
*known value* of small integer tensors. TensorFlow graphs compute shapes at run time
(``Shape -> StridedSlice -> Pack -> Reshape``); DISC needs them as symbolic dims at compile
time. So ops on shapes are folded as they are lowered: ``Shape(x)`` is known to be
``[s0, 16]``, a ``StridedSlice`` of it ``s0``, a ``Pack`` ``[s0, -1]``. A converter that
needs a shape asks for the known value; a tensor whose value is only needed as data is
materialized (``get_dimension_size`` of the input that binds each symbol) when read.

The same class serves two purposes: the whole-graph pass that gives every op its verdict
(every op in context, with known values flowing through unsupported neighbours' outputs
as fresh inputs) and the lowering of one cluster to the core graph that gets compiled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from disc_core.bridge.context import LoweringContext
from disc_core.bridge.errors import ConversionError
from disc_core.dtypes import DType
from disc_core.ir import Value
from disc_core.symbolic import Expr, as_expr

__all__ = ["ConversionError", "Lowering", "TF_DTYPES", "core_dtype", "tf_dtype"]

TF_DTYPES: dict[tf.DType, DType] = {
    tf.bool: DType.BOOL, tf.int8: DType.I8, tf.int16: DType.I16, tf.int32: DType.I32,
    tf.int64: DType.I64, tf.uint8: DType.U8, tf.float32: DType.F32, tf.float64: DType.F64,
}
_BACK = {v: k for k, v in TF_DTYPES.items()}


def core_dtype(dtype: tf.DType) -> DType:
    try:
        return TF_DTYPES[tf.as_dtype(dtype)]
    except KeyError:
        raise ConversionError(f"dtype {tf.as_dtype(dtype).name} has no DISC equivalent",
                              code="unsupported_dtype") from None


def tf_dtype(dtype: DType) -> tf.DType:
    return _BACK[dtype]


def _is_int_like(x: Any) -> bool:
    return isinstance(x, (int, np.integer, Expr))


class Lowering(LoweringContext):
    """One core graph under construction; values and known values keyed by tensor name."""

    def __init__(self, name: str, fresh_symbol: Callable[[str, int], Expr] | None = None):
        super().__init__(name)
        self.values: dict[str, Value] = {}
        self.known_values: dict[str, np.ndarray] = {}
        self._fresh = fresh_symbol or self._default_fresh
        self._counter = 0
        #: the analysis's hook to assume two argument dims equal (partition.analyze);
        #: whether it took the assumption. None in a cluster's own lowering
        self.assume_equal: Callable[[Expr, Expr], bool] | None = None

    def _default_fresh(self, tensor: str, axis: int) -> Expr:
        self._counter += 1
        return Expr.sym(f"d{self._counter}")

    # -- inputs ---------------------------------------------------------------------------
    def add_input(self, name: str, dtype: DType, shape: Sequence[Expr | int],
                  known: np.ndarray | None = None) -> Value:
        v = self.b.input(f"in{len(self.b.graph.inputs)}", dtype, shape)
        self.values[name] = v
        if known is not None:
            self.known_values[name] = known
        return v

    def add_tf_input(self, t: tf.Tensor) -> Value:
        """A tensor produced outside: its static TF shape, a fresh symbol per unknown dim."""
        if t.shape.rank is None:
            raise ConversionError(f"{t.name} has an unknown rank", code="dynamic_rank")
        dims = [Expr.const(d) if d is not None else self._fresh(t.name, i)
                for i, d in enumerate(t.shape.as_list())]
        return self.add_input(t.name, core_dtype(t.dtype), dims)

    # -- reading operands -----------------------------------------------------------------
    def has(self, t: tf.Tensor) -> bool:
        return t.name in self.values or t.name in self.known_values

    def value(self, t: tf.Tensor | str) -> Value:
        name = t if isinstance(t, str) else t.name
        v = self.values.get(name)
        if v is not None:
            return v
        k = self.known_values.get(name)
        if k is None:
            raise ConversionError(f"{name} is not available inside the cluster")
        dtype = core_dtype(t.dtype) if not isinstance(t, str) else None
        v = self.materialize(k, dtype or DType.I64)
        self.values[name] = v
        return v

    def known(self, t: tf.Tensor) -> np.ndarray | None:
        """The value of ``t`` when known at compile time: numbers, or ``Expr`` sizes in an
        object array (``Shape`` of a dynamic tensor)."""
        return self.known_values.get(t.name)

    def known_ints(self, t: tf.Tensor, what: str) -> list[Any]:
        """A 1-D (or scalar) integer tensor's known value as a list of int/Expr."""
        k = self.known(t)
        if k is None:
            raise ConversionError(f"{what} ({t.name}) is computed at run time from tensor "
                                  "data", code="data_dependent_shape")
        flat = [e.value if isinstance(e, Expr) and e.is_const else e for e in k.reshape(-1)]
        if not all(_is_int_like(e) for e in flat):
            raise ConversionError(f"{what} must be integers, got {k!r}")
        return [int(e) if not isinstance(e, Expr) else e for e in flat]

    def static_ints(self, t: tf.Tensor, what: str) -> list[int]:
        """Like :meth:`known_ints`, but every element must be a plain integer."""
        out = self.known_ints(t, what)
        if any(isinstance(e, Expr) for e in out):
            raise ConversionError(f"{what} ({t.name}) depends on dynamic sizes: {out}",
                                  code="data_dependent_shape")
        return out

    def dims(self, t: tf.Tensor, what: str = "a shape") -> list[Expr]:
        """A known shape vector as dims (``-1`` entries stay -1, as plain Exprs)."""
        return [as_expr(e) for e in self.known_ints(t, what)]

    # building (op, scalar, const, cast, reshape, full, numpy broadcasting by the bridges'
    # one rule, size_value, materialize): LoweringContext's, see disc_core.bridge.context
