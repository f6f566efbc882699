"""Common-subexpression elimination of aot_autograd's joint graph, before min-cut.

The min-cut partitioner decides which forward values the backward keeps; duplicates in the
joint graph (a decomposition that recomputes ``t(weight)`` or a mean twice) would be saved
twice. torch's own pass for this (``fx_graph_cse``, ``torch._functorch.config.cse``)
imports ``torch._inductor.pattern_matcher`` and with it most of Inductor: about 0.4-0.8 s
of a fresh process's first compile that a DISC user never needs. This pass does the same
job on what a joint graph holds (functional ATen ops, ``getitem`` of their tuples, SymInt
arithmetic) without it:

* a node merges into an earlier one with the same target and the same arguments (nodes
  by identity after merging, scalars by type and value: ``add(x, 1)`` is not
  ``add(x, 1.0)``);
* random ops (tagged ``nondeterministic_seeded``, or in torch's own list), ``empty``,
  mutating ops and anything unknown never merge, and a mutating or unknown op ends the
  region in which values may merge (what torch's mutation regions do);
* a value whose storage the graph returns (the output itself or what it views) is never
  merged: outputs that eager returns as separate tensors must not come to alias;
* a value carrying an unbacked symbol (a data-dependent size) is never merged, as in
  torch's pass: its users' metadata names that symbol.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch import fx
from torch._functorch.compile_utils import get_aten_target, rand_ops
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.multiprocessing.reductions import StorageWeakRef

__all__ = ["cse_joint_graph"]

#: Python-level functions a joint graph calls on SymInts and tuples: pure
_PURE_FUNCTIONS = {operator.getitem, operator.add, operator.sub, operator.mul,
                   operator.floordiv, operator.truediv, operator.mod, operator.neg,
                   operator.pow, operator.eq, operator.ne, operator.lt, operator.le,
                   operator.gt, operator.ge, torch.sym_sum, torch.sym_max, torch.sym_min,
                   torch.sym_float, torch.sym_int, torch.sym_not}


#: ops that never merge although they mutate nothing: random ones and ``empty``
_NEVER_MERGE = {*rand_ops, torch.ops.aten.empty}


class _Unhashable(Exception):
    pass


def _key(value: Any) -> Any:
    """A hashable stand-in for an argument: nodes by identity (a merged node's users
    already point at the node it merged into), containers element-wise, scalars with
    their type."""
    if isinstance(value, fx.Node):
        return ("node", id(value))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(map(_key, value)))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _key(v)) for k, v in value.items())))
    if isinstance(value, slice):
        return ("slice", _key(value.start), _key(value.stop), _key(value.step))
    if isinstance(value, float) and value != value:
        raise _Unhashable  # NaN equals nothing, not even itself
    try:
        hash(value)
    except TypeError:
        raise _Unhashable from None
    return (type(value), value)


def _storage(node: fx.Node) -> StorageWeakRef | None:
    """The storage of the tensor a node computes (its fake value's), None for anything
    else."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    try:
        return StorageWeakRef(val.untyped_storage())
    except (NotImplementedError, RuntimeError):
        return None


def _unbacked(node: fx.Node) -> bool:
    """A symbolic scalar holding a data-dependent size (what torch's pass leaves alone)."""
    val = node.meta.get("val")
    return (isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool))
            and bool(free_unbacked_symbols(val)))


def _kind(node: fx.Node) -> str:
    """'pure' (may merge), 'barrier' (mutates or unknown: ends a region) or 'other' (a
    placeholder, the output, a random op: neither)."""
    if node.op != "call_function":
        return "other"
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        if target._schema.is_mutable:
            return "barrier"
        if (torch.Tag.nondeterministic_seeded in target.tags
                or get_aten_target(node) in _NEVER_MERGE):
            return "other"
        return "pure"
    if target in _PURE_FUNCTIONS:
        return "pure"
    return "barrier"


def cse_joint_graph(graph: fx.Graph) -> int:
    """Merge duplicate pure nodes of ``graph`` in place; returns how many were removed."""
    output = next((n for n in reversed(graph.nodes) if n.op == "output"), None)
    returned = set(output.all_input_nodes) if output is not None else set()
    returned_storages = {st for st in map(_storage, returned) if st is not None}
    seen: dict[Any, fx.Node] = {}
    removed = 0
    for node in list(graph.nodes):
        kind = _kind(node)
        if kind == "barrier":
            seen.clear()
            continue
        if kind != "pure" or node in returned or _unbacked(node):
            continue
        storage = _storage(node)
        if storage is not None and storage in returned_storages:
            continue
        try:
            key = (node.target, _key(node.args), _key(node.kwargs))
        except _Unhashable:
            continue
        first = seen.get(key)
        if first is None:
            seen[key] = node
        else:
            node.replace_all_uses_with(first)
            graph.erase_node(node)
            removed += 1
    return removed
