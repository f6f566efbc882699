"""The base of every bridge's lowering context: a graph under construction and the helpers
every converter uses, whatever its framework.

A bridge's context subclasses :class:`LoweringContext` and adds how it reads its
framework's nodes (torch: FX nodes and their fake tensors; TF: tensors by name and their
known values). Converters then build with the same vocabulary in every bridge:
``ctx.op``, ``ctx.scalar``, ``ctx.cast``, ``ctx.reshape``, ``ctx.full`` and numpy-style
broadcasting by the bridges' one rule (:mod:`.broadcast`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..builder import GraphBuilder
from ..dtypes import DType
from ..ir import Value
from ..opdef import VerifyError
from ..symbolic import Expr, ExprLike
from . import broadcast
from .errors import ConversionError

__all__ = ["LoweringContext"]


class LoweringContext:
    """One core graph under construction (``b``, a :class:`GraphBuilder`). A shape the
    helpers refuse is a :class:`ConversionError`, so the node falls back."""

    def __init__(self, name: str):
        self.b = GraphBuilder(name)

    def op(self, name: str, *operands: Value, **attrs: Any) -> Any:
        return self.b.op(name, *operands, **attrs)

    def scalar(self, value: Any, dtype: DType) -> Value:
        """A rank-0 constant of ``dtype``."""
        return self.b.constant(value, dtype)

    def cast(self, v: Value, dtype: DType) -> Value:
        return self.b.cast(v, dtype)

    def reshape(self, v: Value, shape: Sequence[ExprLike]) -> Value:
        return self.b.reshape_to(v, shape)

    def full(self, value: Any, dtype: DType, shape: Sequence[ExprLike]) -> Value:
        """``value`` everywhere in ``shape`` (a broadcast scalar, never materialized)."""
        return self.broadcast_to(self.scalar(value, dtype), shape)

    def broadcast_to(self, v: Value, shape: Sequence[ExprLike]) -> Value:
        """numpy broadcasting by the bridges' one rule (:mod:`disc_core.bridge.broadcast`):
        a symbolic dim that is not provably equal is left to the module's run-time check."""
        try:
            return broadcast.broadcast_to(self.b, v, shape)
        except VerifyError as exc:
            raise ConversionError(str(exc)) from None

    @staticmethod
    def broadcast_shape(*shapes: Sequence[ExprLike]) -> tuple[Expr, ...]:
        """numpy's result shape (:func:`disc_core.bridge.broadcast.broadcast_shape`)."""
        return broadcast.broadcast_shape(*shapes)

    def broadcast_all(self, *vs: Value) -> list[Value]:
        """Every value broadcast to their common shape."""
        shape = self.broadcast_shape(*[v.shape for v in vs])
        return [self.broadcast_to(v, shape) for v in vs]

    # -- values known at compile time (shapes, small constants) --------------------------
    def const(self, value: Any, dtype: DType) -> Value:
        """A constant of ``dtype`` (any shape: a number, a list, an array)."""
        return self.b.constant(np.asarray(value, dtype=dtype.np), dtype)

    def size_value(self, e: Expr | int, dtype: DType) -> Value:
        """A (symbolic) size as a rank-0 value, read from the dims of the graph's inputs
        (:meth:`GraphBuilder.size_value`)."""
        try:
            return self.b.size_value(e, dtype)
        except VerifyError as exc:
            raise ConversionError(str(exc)) from None

    def materialize(self, known: np.ndarray, dtype: DType) -> Value:
        """A known value (numbers, or ``Expr`` sizes in an object array: what a bridge
        folds shape computations into) as a core value of ``dtype``."""
        if known.dtype != object:
            return self.const(known, dtype)
        flat = known.reshape(-1)
        if all(not isinstance(e, Expr) or e.is_const for e in flat):
            nums = np.array([e.value if isinstance(e, Expr) else e for e in flat])
            return self.const(nums.reshape(known.shape), dtype)
        parts = [self.reshape(self.size_value(e, dtype), [1]) for e in flat]
        v = parts[0] if len(parts) == 1 else self.op("concatenate", *parts, dimension=0)
        return self.reshape(v, list(known.shape))
