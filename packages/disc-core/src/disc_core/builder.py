"""Build graphs from Python: ``b.add(x, y)`` or ``b.op("reduce", x, kind="sum", axes=[1])``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .dtypes import DType, dtype_of
from .ir import Graph, SymbolInfo, TensorType, Value
from .opdef import VerifyError, get_op
from .symbolic import Expr, ExprLike


class GraphBuilder:
    """Appends ops in program order, so the graph is topologically sorted by construction."""

    def __init__(self, name: str = "main"):
        self.graph = Graph(name)

    def symbol(self, name: str, *, min: int | None = None, max: int | None = None,
               multiple_of: int | None = None) -> Expr:
        """Declare a named dimension, optionally with a range and a divisor hint."""
        info = self.graph.symbols.get(name) or SymbolInfo(name)
        info.min = min if min is not None else info.min
        info.max = max if max is not None else info.max
        info.multiple_of = multiple_of if multiple_of is not None else info.multiple_of
        if info.has_hints:
            self.graph.symbols[name] = info
        return Expr.sym(name)

    def input(self, name: str, dtype: DType | str, shape: Iterable[ExprLike]) -> Value:
        if any(v.name == name for v in self.graph.inputs):
            raise VerifyError(f"graph @{self.graph.name}: duplicate input name {name!r}")
        v = Value(TensorType.of(dtype, shape), name=name)
        self.graph.inputs.append(v)
        return v

    def op(self, name: str, *operands: Value, **attrs: Any) -> Value | tuple[Value, ...]:
        op = get_op(name).build(list(operands), attrs)
        self.graph.ops.append(op)
        return op.results[0] if len(op.results) == 1 else tuple(op.results)

    def constant(self, value: Any, dtype: DType | str | None = None) -> Value:
        arr = np.asarray(value, dtype=dtype_of(dtype).np if dtype is not None else None)
        if dtype is None and arr.dtype == np.float64 and not isinstance(value, np.ndarray):
            arr = arr.astype(np.float32)  # Python floats default to f32, as in frameworks
        if dtype is None and arr.dtype == np.int64 and not isinstance(value, np.ndarray):
            arr = arr.astype(np.int64)
        return self.op("constant", value=arr)  # type: ignore[return-value]

    def build(self, *outputs: Value | Sequence[Value]) -> Graph:
        outs: list[Value] = []
        for o in outputs:
            outs.extend(o if isinstance(o, (list, tuple)) else [o])
        self.graph.outputs = outs
        self.graph.verify()
        return self.graph

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*operands: Value, **attrs: Any) -> Value | tuple[Value, ...]:
            return self.op(name, *operands, **attrs)

        return call
