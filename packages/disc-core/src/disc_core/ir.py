"""The DISC graph IR: SSA values typed by dtype and symbolic shape, ops, and graphs.

A :class:`Graph` is a function: typed inputs (the ``parameter``s), a topologically ordered
list of :class:`Op`, and the values it returns. Result types are never stored
independently of their rule: every op's result types are exactly what its definition
infers from the operand types and attributes, which :meth:`Graph.verify` re-checks. That
keeps passes honest and lets the text form be re-verified on parse.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .dtypes import DType, dtype_of
from .symbolic import Expr, ExprLike, as_expr, product

if TYPE_CHECKING:
    from .opdef import OpDef


@dataclass(frozen=True)
class TensorType:
    """dtype plus a shape of symbolic or static dims."""

    dtype: DType
    shape: tuple[Expr, ...]

    @staticmethod
    def of(dtype: DType | str, shape: Iterable[ExprLike]) -> TensorType:
        return TensorType(dtype_of(dtype), tuple(as_expr(d) for d in shape))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(d.is_const for d in self.shape)

    def num_elements(self) -> Expr:
        return product(self.shape)

    def free_symbols(self) -> set[str]:
        out: set[str] = set()
        for d in self.shape:
            out |= d.free_symbols()
        return out

    def with_shape(self, shape: Iterable[ExprLike]) -> TensorType:
        return TensorType(self.dtype, tuple(as_expr(d) for d in shape))

    def with_dtype(self, dtype: DType | str) -> TensorType:
        return TensorType(dtype_of(dtype), self.shape)

    def subs(self, mapping: Mapping[str, Expr]) -> TensorType:
        return TensorType(self.dtype, tuple(d.subs(mapping) for d in self.shape))

    def __str__(self) -> str:
        return f"{self.dtype.short}[{', '.join(str(d) for d in self.shape)}]"


class Value:
    """An SSA value: a graph input or one result of an op."""

    __slots__ = ("type", "producer", "index", "name")

    def __init__(self, type: TensorType, producer: Op | None = None, index: int = 0,
                 name: str | None = None):
        self.type = type
        self.producer = producer
        self.index = index
        self.name = name

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def shape(self) -> tuple[Expr, ...]:
        return self.type.shape

    @property
    def rank(self) -> int:
        return self.type.rank

    def __repr__(self) -> str:
        who = self.producer.name if self.producer else "input"
        return f"<Value {self.name or ''}:{self.type} from {who}>"


class Op:
    """One operation: an op definition applied to operands with attributes."""

    __slots__ = ("opdef", "operands", "attrs", "results")

    def __init__(self, opdef: type[OpDef], operands: Sequence[Value], attrs: Mapping[str, Any],
                 result_types: Sequence[TensorType]):
        self.opdef = opdef
        self.operands: list[Value] = list(operands)
        self.attrs: dict[str, Any] = dict(attrs)
        self.results: list[Value] = [Value(t, self, i) for i, t in enumerate(result_types)]

    @property
    def name(self) -> str:
        return self.opdef.name

    @property
    def result(self) -> Value:
        if len(self.results) != 1:
            raise ValueError(f"{self.name} has {len(self.results)} results, not 1")
        return self.results[0]

    def __repr__(self) -> str:
        return f"<Op {self.name}>"


@dataclass
class SymbolInfo:
    """What the user told DISC about a dimension symbol: a range and a divisor."""

    name: str
    min: int | None = None
    max: int | None = None
    multiple_of: int | None = None

    def check(self, value: int) -> str | None:
        """Return why ``value`` violates the hints, or None."""
        if value < 0:
            return f"{self.name} = {value} is negative"
        if self.min is not None and value < self.min:
            return f"{self.name} = {value} is below its declared minimum {self.min}"
        if self.max is not None and value > self.max:
            return f"{self.name} = {value} is above its declared maximum {self.max}"
        if self.multiple_of and value % self.multiple_of:
            return f"{self.name} = {value} is not a multiple of {self.multiple_of}"
        return None

    @property
    def has_hints(self) -> bool:
        return self.min is not None or self.max is not None or bool(self.multiple_of)


@dataclass
class Graph:
    """A function over tensors. ``ops`` is kept in a topological order."""

    name: str
    inputs: list[Value] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    symbols: dict[str, SymbolInfo] = field(default_factory=dict)

    def verify(self) -> None:
        from .verifier import verify_graph

        verify_graph(self)

    def clone(self) -> Graph:
        """A copy that passes can mutate without touching this graph: new values and ops,
        shared immutable types and attribute values (passes replace attributes, never
        mutate them in place). Much cheaper than printing and re-parsing the graph, which
        re-infers every type: that cost sat on the critical path of every first
        compilation."""
        env: dict[Value, Value] = {}
        inputs = []
        for v in self.inputs:
            env[v] = Value(v.type, name=v.name)
            inputs.append(env[v])
        ops = []
        for op in self.ops:
            new = Op.__new__(Op)
            new.opdef = op.opdef
            new.operands = [env[v] for v in op.operands]
            new.attrs = dict(op.attrs)
            new.results = [Value(r.type, new, r.index, r.name) for r in op.results]
            env.update(zip(op.results, new.results))
            ops.append(new)
        return Graph(self.name, inputs, ops, [env[v] for v in self.outputs],
                     {k: dataclasses.replace(s) for k, s in self.symbols.items()})

    def users(self) -> dict[Value, list[Op]]:
        out: dict[Value, list[Op]] = {}
        for op in self.ops:
            for v in op.operands:
                out.setdefault(v, []).append(op)
        return out

    def free_symbols(self) -> set[str]:
        out: set[str] = set()
        for v in self.inputs:
            out |= v.type.free_symbols()
        for op in self.ops:
            for r in op.results:
                out |= r.type.free_symbols()
        return out

    def __str__(self) -> str:
        from .printer import print_graph

        return print_graph(self)
