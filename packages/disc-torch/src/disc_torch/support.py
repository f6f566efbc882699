"""Per-node verdicts: can DISC compile this FX node, and if not, why (a report reason code).

A node is supported when a converter exists for its ATen overload, every tensor it reads or
writes has a dtype the converter states, its attribute check passes, and a trial lowering of
the node alone succeeds and verifies. The trial catches every converter limit in one place,
so a node that cannot be lowered is excluded precisely instead of failing its whole cluster.
"""

from __future__ import annotations

from typing import Any

import torch

from disc_core.bridge.verdict import precheck, trial
from disc_core.clustering import Support
from disc_core.report import ReasonCode

from .converters import CONVERTERS
from .lowering import Lowering, convert_node, finish_graph, is_sym_node, meta_of
from .symbolic import UnsupportedSize, to_expr

__all__ = ["is_sym_node", "is_tensor_node", "node_support", "op_type"]

aten = torch.ops.aten

DATA_DEPENDENT = {"nonzero", "unique", "_unique", "_unique2", "unique_consecutive",
                  "unique_dim", "masked_select", "_local_scalar_dense", "item",
                  "repeat_interleave", "argwhere", "masked_scatter", "nonzero_static"}
RANDOM = ("rand", "bernoulli", "dropout", "normal", "uniform", "multinomial", "randperm",
          "exponential", "poisson", "seed")


def op_type(node: torch.fx.Node) -> str:
    """``aten.add.Tensor``, ``getitem``... as the report shows it."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return f"aten.{target._schema.name.split('::')[-1]}.{target._overloadname}" \
            if target.namespace == "aten" else str(target)
    return getattr(target, "__name__", str(target))


def _metas(node: torch.fx.Node) -> list[Any]:
    # aot_autograd's graphs carry "val"; dynamo's own (reported when tracing one for DISC
    # fails as a whole) carry "example_value"
    m = node.meta.get("val", node.meta.get("example_value"))
    return list(m) if isinstance(m, (list, tuple)) else [m]


def is_tensor_node(node: torch.fx.Node) -> bool:
    """A call producing one tensor or a tuple of tensors (the nodes clustering considers)."""
    if node.op != "call_function":
        return False
    metas = _metas(node)
    return bool(metas) and all(m is None or isinstance(m, torch.Tensor) for m in metas) and \
        any(isinstance(m, torch.Tensor) for m in metas)


def _tensor_args(node: torch.fx.Node) -> list[torch.fx.Node]:
    out: list[torch.fx.Node] = []
    torch.fx.node.map_arg((node.args, node.kwargs),
                          lambda n: out.append(n) if Lowering.is_tensor(n) else None)
    return list(dict.fromkeys(out))


def node_support(node: torch.fx.Node) -> Support:
    """The verdict for one tensor-producing call_function node (not getitem)."""
    target = node.target
    name = getattr(target, "_schema", None)
    base = name.name.split("::")[-1] if name is not None else str(target)
    if base in DATA_DEPENDENT:
        return Support(False, f"{op_type(node)} has a data-dependent output shape",
                       code=ReasonCode.DATA_DEPENDENT_SHAPE)
    if any(r in base for r in RANDOM):
        return Support(False, f"{op_type(node)} draws random numbers (torch's RNG state "
                       "stays with torch)", code=ReasonCode.NO_CONVERTER)
    if name is not None and name.is_mutable:
        return Support(False, f"{op_type(node)} mutates its input in place",
                       code=ReasonCode.NO_CONVERTER)
    inputs = [meta_of(a) for a in _tensor_args(node)]
    # the dtypes a converter takes are its inputs' (its results' for creation ops)
    keyed = [m.dtype for m in (inputs or _metas(node)) if isinstance(m, torch.Tensor)]
    verdict = precheck(CONVERTERS, target, op_type(node), keyed)
    if verdict is not None:
        return verdict
    for m in inputs + _metas(node):
        if isinstance(m, torch.Tensor):
            if m.device.type != "cpu":
                return Support(False, f"tensor on {m.device} (disc-torch compiles CPU "
                               "tensors)", code=ReasonCode.UNSUPPORTED_ATTRIBUTE)
            try:
                for d in m.shape:
                    to_expr(d)
            except UnsupportedSize as exc:
                return Support(False, f"{op_type(node)}: {exc}",
                               code=ReasonCode.DATA_DEPENDENT_SHAPE)
    return precheck(CONVERTERS, target, op_type(node), node=node) or \
        trial(op_type(node), lambda: _lower_alone(node))


def _lower_alone(node: torch.fx.Node) -> None:
    ctx = Lowering(f"trial_{node.name}")
    for i, arg in enumerate(_tensor_args(node)):
        ctx.add_input(arg, f"in{i}")
    out = convert_node(ctx, node)
    outs = [v for v in (out if isinstance(out, tuple) else (out,)) if v is not None]
    finish_graph(ctx, outs, [], {}, None)


def getitem_support(node: torch.fx.Node, producer: Support | None) -> Support:
    if producer is not None and producer.supported:
        return Support.yes()
    return Support(False, "reads a result of a node that stays in torch",
                   code=(producer.code if producer is not None and producer.code
                         else ReasonCode.NO_CONVERTER))


