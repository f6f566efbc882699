"""Build graphs from Python: ``b.add(x, y)`` or ``b.op("reduce", x, kind="sum", axes=[1])``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .dtypes import DType, dtype_of
from .ir import Graph, SymbolInfo, TensorType, Value
from .opdef import VerifyError, get_op
from .symbolic import Expr, ExprLike, as_expr


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

    # -- framework conveniences: what every bridge needs on top of the closed op set --------
    def full(self, value: Any, dtype: DType | str, shape: Iterable[ExprLike]) -> Value:
        """``value`` everywhere in ``shape``: a rank-0 constant broadcast (fused, never
        materialized)."""
        return self.broadcast_to(self.constant(value, dtype), shape)

    def cast(self, v: Value, dtype: DType | str) -> Value:
        dt = dtype_of(dtype)
        return v if v.dtype == dt else self.op("convert", v, dtype=dt)  # type: ignore[return-value]

    def reshape_to(self, v: Value, shape: Iterable[ExprLike]) -> Value:
        """A reshape, or ``v`` itself when it already has ``shape``."""
        dims = tuple(as_expr(d) for d in shape)
        if tuple(v.shape) == dims:
            return v
        return self.op("reshape", v, shape=list(dims))  # type: ignore[return-value]

    def broadcast_to(self, v: Value, shape: Iterable[ExprLike]) -> Value:
        """numpy/torch/TF implicit broadcasting: trailing dims aligned, size-1 dims stretch.

        A dim that is neither equal to the target nor statically 1 is an error: DISC
        compiles one graph for all shapes, so "this symbol is 1 at run time" is never
        assumed.
        """
        dims = tuple(as_expr(d) for d in shape)
        if tuple(v.shape) == dims:
            return v
        offset = len(dims) - v.rank
        if offset < 0:
            raise VerifyError(f"cannot broadcast rank {v.rank} to rank {len(dims)}")
        kept: list[int] = []
        kept_dims: list[Expr] = []
        for i, d in enumerate(v.shape):
            target = dims[offset + i]
            if d == target:
                kept.append(offset + i)
                kept_dims.append(d)
            elif not (d.is_const and d.value == 1):
                raise VerifyError(f"cannot broadcast dim {d} to {target}: not provably equal "
                                  "and not statically 1")
        v = self.reshape_to(v, kept_dims)
        return self.op("broadcast_in_dim", v, shape=list(dims),  # type: ignore[return-value]
                       broadcast_dimensions=kept)

    def dim_size(self, v: Value, axis: int, dtype: DType | str = "i64") -> Value:
        """``v.shape[axis]`` as a rank-0 value (a constant when static)."""
        d = v.shape[axis]
        if d.is_const:
            return self.constant(d.value, dtype)
        return self.cast(self.op("get_dimension_size", v, dimension=axis),  # type: ignore[arg-type]
                         dtype)

    def element_count(self, v: Value, axes: Iterable[int], dtype: DType | str) -> Value:
        """How many elements of ``v`` a reduction over ``axes`` combines (rank 0)."""
        count: Value | None = None
        static = 1
        for a in axes:
            if v.shape[a].is_const:
                static *= v.shape[a].value
                continue
            size = self.dim_size(v, a, dtype)
            count = size if count is None else self.op("mul", count, size)  # type: ignore
        if count is None:
            return self.constant(static, dtype)
        return count if static == 1 else self.op(  # type: ignore[return-value]
            "mul", count, self.constant(static, dtype))

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
