"""Lower an FX graph of ATen ops (one cluster) to a DISC core graph.

The converters in :mod:`disc_torch.converters` see a :class:`Lowering` context: it maps FX
nodes to core values and gives them the helpers every converter needs (shapes as symbolic
dims, dtype casts, numpy-style broadcasting, scalars). Shapes always come from the fake
tensors dynamo recorded in ``node.meta['val']``, never from the op's size arguments, so a
``view(x, [s0 * 4, -1])`` needs no arithmetic in the converter and symbolic sizes stay exact.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from disc_core.builder import GraphBuilder
from disc_core.dtypes import DType
from disc_core.ir import Graph, TensorType, Value
from disc_core.opdef import VerifyError
from disc_core.symbolic import Expr, solve_linear

from .symbolic import to_expr

__all__ = ["ConversionError", "LoweredCluster", "Lowering", "TORCH_DTYPES", "core_dtype",
           "lower_graph", "meta_of"]

TORCH_DTYPES: dict[torch.dtype, DType] = {
    torch.bool: DType.BOOL, torch.int8: DType.I8, torch.int16: DType.I16,
    torch.int32: DType.I32, torch.int64: DType.I64, torch.uint8: DType.U8,
    torch.float16: DType.F16, torch.bfloat16: DType.BF16, torch.float32: DType.F32,
    torch.float64: DType.F64,
}


class ConversionError(ValueError):
    """A converter met an argument value it cannot express; the node falls back."""


def core_dtype(dtype: torch.dtype) -> DType:
    try:
        return TORCH_DTYPES[dtype]
    except KeyError:
        raise ConversionError(f"dtype {dtype} has no DISC equivalent") from None


def is_sym_node(node: torch.fx.Node) -> bool:
    """A host computation of a size (SymInt arithmetic, sym_size): never lowered, its value
    is a symbolic dim already."""
    m = node.meta.get("val")
    return isinstance(m, (int, torch.SymInt, torch.SymFloat, torch.SymBool, float, bool))


def meta_of(node: Any) -> Any:
    """The fake tensor (or SymInt, or tuple) dynamo recorded for ``node``."""
    if not isinstance(node, torch.fx.Node):
        return node
    if "val" not in node.meta:
        raise ConversionError(f"node {node.name} has no recorded value (meta['val'])")
    return node.meta["val"]


class Lowering:
    """Builds one core graph; ``env`` maps FX nodes to core values (or tuples of them)."""

    def __init__(self, name: str):
        self.b = GraphBuilder(name)
        self.env: dict[torch.fx.Node, Any] = {}

    # -- values ---------------------------------------------------------------------------
    def add_input(self, node: torch.fx.Node, name: str) -> Value:
        t = meta_of(node)
        v = self.b.input(name, core_dtype(t.dtype), self.shape(node))
        self.env[node] = v
        return v

    def value(self, arg: Any) -> Value:
        """The core value of a tensor argument."""
        if isinstance(arg, torch.fx.Node):
            v = self.env.get(arg)
            if isinstance(v, Value):
                return v
            raise ConversionError(f"argument {arg.name} is not a tensor inside this cluster")
        raise ConversionError(f"expected a tensor argument, got {type(arg).__name__} {arg!r}")

    @staticmethod
    def is_tensor(arg: Any) -> bool:
        return isinstance(arg, torch.fx.Node) and isinstance(meta_of(arg), torch.Tensor)

    # -- metadata -------------------------------------------------------------------------
    def shape(self, node: Any) -> tuple[Expr, ...]:
        t = meta_of(node)
        if not isinstance(t, torch.Tensor):
            raise ConversionError(f"{getattr(node, 'name', node)} is not a tensor")
        return tuple(to_expr(d) for d in t.shape)

    def dtype(self, node: Any) -> DType:
        return core_dtype(meta_of(node).dtype)

    @staticmethod
    def expr(size: Any) -> Expr:
        """A size argument (int, SymInt, or an FX node computing one) as a core dim."""
        return to_expr(meta_of(size))

    # -- builders -------------------------------------------------------------------------
    def op(self, name: str, *operands: Value, **attrs: Any) -> Any:
        return self.b.op(name, *operands, **attrs)

    def scalar(self, value: Any, dtype: DType) -> Value:
        if isinstance(value, torch.fx.Node):
            raise ConversionError("a scalar computed at run time (SymFloat/SymInt) as an operand")
        return self.b.constant(value, dtype)

    def size_value(self, e: Expr, dtype: DType) -> Value:
        """A symbolic size as a rank-0 value (:meth:`GraphBuilder.size_value`); a symbol no
        cluster input carries gets a zero-byte carrier input, fed like any unbound one."""
        return self.b.size_value(e, dtype, unbound=self._carrier)

    def _carrier(self, name: str) -> tuple[Value, int]:
        return self.b.input(f"sym_{name}", DType.U8, [Expr.sym(name), 0]), 0

    def float_value(self, e: Any, dtype: DType) -> Value:
        """A SymFloat (sympy over the size symbols, e.g. batch norm's ``1 / (N*H*W)``) as a
        rank-0 value: true divisions and float arithmetic of sizes read at run time."""
        import sympy

        if not dtype.is_float:
            raise ConversionError(f"float size expression {e} used as a {dtype} operand")
        fn = type(e).__name__
        if isinstance(e, (sympy.Float, sympy.Rational)) and e.is_number:
            return self.scalar(float(e), dtype)
        if fn in ("FloatTrueDiv", "IntTrueDiv"):
            return self.op("div", self.float_value(e.args[0], dtype),
                           self.float_value(e.args[1], dtype))
        if fn == "ToFloat":
            return self.float_value(e.args[0], dtype)
        if isinstance(e, (sympy.Add, sympy.Mul)) and not e.is_integer:
            parts = [self.float_value(a, dtype) for a in e.args]
            out = parts[0]
            for p in parts[1:]:
                out = self.op("add" if isinstance(e, sympy.Add) else "mul", out, p)
            return out
        try:
            return self.size_value(to_expr(e), dtype)  # an integer-valued size
        except Exception as exc:
            raise ConversionError(f"float size expression {e} ({fn}): {exc}") from None

    # numpy-style helpers live in disc-core's GraphBuilder (every bridge needs them); a
    # shape they cannot prove is a ConversionError here, so the node falls back
    def cast(self, v: Value, dtype: DType) -> Value:
        return self.b.cast(v, dtype)

    def full(self, value: Any, dtype: DType, shape: Sequence[Expr]) -> Value:
        return self.broadcast_to(self.scalar(value, dtype), shape)

    def reshape(self, v: Value, shape: Sequence[Expr]) -> Value:
        return self.b.reshape_to(v, shape)

    def broadcast_to(self, v: Value, shape: Sequence[Expr]) -> Value:
        try:
            return self.b.broadcast_to(v, shape)
        except VerifyError as exc:
            raise ConversionError(str(exc)) from None

    def operand(self, arg: Any, dtype: DType, shape: Sequence[Expr] | None = None) -> Value:
        """A tensor or Python-number argument as a core value of ``dtype`` (and ``shape``)."""
        if isinstance(arg, torch.fx.Node):
            meta = meta_of(arg)
            if isinstance(meta, torch.SymFloat):
                v = self.float_value(meta.node.expr, dtype)
            elif not self.is_tensor(arg):
                v = self.size_value(self.expr(arg), dtype)
            else:
                v = self.cast(self.value(arg), dtype)
        elif isinstance(arg, (bool, int, float)):
            v = self.scalar(arg, dtype)
        else:
            raise ConversionError(f"unsupported operand {type(arg).__name__} {arg!r}")
        return v if shape is None else self.broadcast_to(v, shape)


@dataclass
class LoweredCluster:
    """A cluster as a core graph plus how to feed it from the cluster's FX arguments.

    ``tensor_args`` are the FX argument positions passed as graph inputs, in order. Each
    entry of ``symbol_sources`` binds a symbol no tensor input dim binds by itself (e.g. a
    sequence length only a ``view`` size mentions): it is passed as an extra zero-byte
    input of shape ``[symbol, 0]``, its value read from a SymInt argument (``("arg", i)``)
    or solved from an input dim that is a linear expression of it (``("dim", i, axis)``).
    """

    graph: Graph
    tensor_args: list[int]
    symbol_sources: list[tuple[str, tuple]] = field(default_factory=list)


Locate = Callable[[str], "tuple | None"]


def lower_graph(gm: torch.fx.GraphModule, name: str, locate: Locate | None = None
                ) -> LoweredCluster:
    """The core graph of a cluster's GraphModule (SymInt nodes are skipped: their values
    are symbolic dims already). Raises ConversionError or a core VerifyError.

    ``locate(symbol)`` says where a symbol no input of the cluster binds can be read at
    run time (an ``("extra", j, axis)`` source: argument ``j`` after the cluster's own, a
    SymInt when ``axis`` is None, else that dim of a tensor). Without it, such symbols get
    carrier inputs with no source: enough to verify a trial lowering, not to run it.
    """
    ctx = Lowering(name)
    tensor_args: list[int] = []
    sym_args: dict[Expr, int] = {}
    outputs: list[Value] = []
    position = 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            if Lowering.is_tensor(node):
                ctx.add_input(node, f"in{len(tensor_args)}")
                tensor_args.append(position)
            elif isinstance(meta_of(node), torch.SymInt):
                sym_args.setdefault(to_expr(meta_of(node)), position)
            position += 1
        elif node.op == "call_function":
            if is_sym_node(node):
                continue
            ctx.env[node] = convert_node(ctx, node)
        elif node.op == "output":
            results = node.args[0]
            results = results if isinstance(results, (list, tuple)) else [results]
            outputs = [ctx.value(r) for r in results]
        else:
            raise ConversionError(f"{node.op} node {node.name} inside a cluster")
    return finish_graph(ctx, outputs, tensor_args, sym_args, locate)


def finish_graph(ctx: Lowering, outputs: list[Value], tensor_args: list[int],
                 sym_args: dict[Expr, int], locate: Locate | None) -> LoweredCluster:
    graph = ctx.b.graph
    graph.outputs = outputs
    sources = _bind_symbols(graph, tensor_args, sym_args, locate)
    graph.verify()
    return LoweredCluster(graph, tensor_args, sources)


def _bind_symbols(graph: Graph, tensor_args: list[int], sym_args: dict[Expr, int],
                  locate: Locate | None) -> list[tuple[str, tuple]]:
    """Append one ``[symbol, 0]`` carrier input per symbol no tensor input binds (reusing
    those :meth:`Lowering.size_value` made) and say where each one's value comes from."""
    carriers = {v.name: v for v in graph.inputs if v.name and v.name.startswith("sym_")}
    graph.inputs[:] = [v for v in graph.inputs if v.name not in carriers]
    bound: set[str] = set()
    for v in graph.inputs:
        bound.update(d.symbol_name for d in v.shape if d.is_symbol)
    used: set[str] = {name[len("sym_"):] for name in carriers}
    for v in [*graph.inputs, *(r for op in graph.ops for r in op.results)]:
        for d in v.shape:
            used |= d.free_symbols()
    sources: list[tuple[str, tuple]] = []
    for name in sorted((used - bound) | {c[len("sym_"):] for c in carriers}):
        sym = Expr.sym(name)
        source: tuple | None = ("arg", sym_args[sym]) if sym in sym_args else None
        if source is None:
            source = _linear_dim(graph, tensor_args, name)
        if source is None and locate is not None:
            source = locate(name)
        if source is None and locate is not None:
            raise ConversionError(f"size symbol {name} is not known inside the cluster")
        graph.inputs.append(carriers.get(f"sym_{name}") or
                            Value(TensorType.of(DType.U8, [sym, 0]), name=f"sym_{name}"))
        sources.append((name, source or ()))
    return sources


def _linear_dim(graph: Graph, tensor_args: list[int], name: str) -> tuple | None:
    """An input dim that is a linear expression of ``name`` alone (``2*s0 + 1``)."""
    for i, v in enumerate(graph.inputs[:len(tensor_args)]):
        for axis, d in enumerate(v.shape):
            if d.free_symbols() == {name} and \
                    solve_linear(d, d.evaluate({name: 7}), {}) == (name, 7):
                return ("dim", tensor_args[i], axis, str(d))
    return None


def convert_node(ctx: Lowering, node: torch.fx.Node) -> Any:
    if node.target is operator.getitem:
        src, index = node.args
        produced = ctx.env.get(src)
        if not isinstance(produced, tuple):
            raise ConversionError(f"getitem of {src} which is not a tuple inside the cluster")
        return produced[index]
    from .converters import lookup  # the table imports this module: look it up late

    conv = lookup(node.target)
    if conv is None:
        raise ConversionError(f"no converter for {node.target}")
    out = conv.fn(ctx, node)
    _check_result(node, out)
    return out


def _check_result(node: torch.fx.Node, out: Any) -> None:
    """A converter's result must match the fake tensor torch recorded: catch bugs early."""
    meta = meta_of(node)
    metas = meta if isinstance(meta, (list, tuple)) else [meta]
    outs = out if isinstance(out, tuple) else (out,)
    if len(outs) != len(metas):
        raise ConversionError(f"{node.target}: converter returned {len(outs)} values for "
                              f"{len(metas)} results")
    for v, m in zip(outs, metas):
        if m is None or v is None:
            continue
        want = (core_dtype(m.dtype), tuple(to_expr(d) for d in m.shape))
        if (v.dtype, tuple(v.shape)) != want:
            raise ConversionError(
                f"{node.target}: converter produced {v.dtype} {list(map(str, v.shape))}, torch "
                f"says {want[0]} {list(map(str, want[1]))}")
