"""Lower an FX graph of ATen ops (one cluster) to a DISC core graph.

Each node runs its converter from :mod:`disc_torch.converters` in a
:class:`~disc_torch.context.Lowering` context (the bridge kit's wrapper,
:mod:`disc_core.bridge.convert`), and every result is checked against the fake tensor
torch recorded. Symbols no cluster input binds become zero-byte carrier inputs, with where
their values come from at run time.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from disc_core.bridge.convert import (
    Expected,
    as_results,
    check_count,
    check_result,
    run_converter,
)
from disc_core.dtypes import DType
from disc_core.ir import Graph, TensorType, Value
from disc_core.symbolic import Expr, solve_linear

from .context import TORCH_DTYPES, ConversionError, Lowering, core_dtype, is_sym_node, meta_of
from .converters import CONVERTERS
from .symbolic import to_expr

__all__ = ["ConversionError", "LoweredCluster", "Lowering", "TORCH_DTYPES", "core_dtype",
           "is_sym_node", "lower_graph", "meta_of"]


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
    out = run_converter(CONVERTERS, node.target, ctx, node, what=str(node.target))
    _check_result(node, out)
    return out


def _check_result(node: torch.fx.Node, out: Any) -> None:
    """A converter's result must match the fake tensor torch recorded: catch bugs early."""
    meta = meta_of(node)
    metas = meta if isinstance(meta, (list, tuple)) else [meta]
    outs = out if isinstance(out, tuple) else (out,)
    check_count(str(node.target), as_results(outs), len(metas))
    for v, m in zip(outs, metas):
        if m is None or v is None:
            continue
        check_result(str(node.target), v, Expected(
            core_dtype(m.dtype), tuple(to_expr(d) for d in m.shape)), "torch")
