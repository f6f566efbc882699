"""Memory layouts at the boundary between DISC clusters and torch.

A DISC cluster returns every tensor row-major (contiguous), while the graph was traced
with torch's layouts: ``x.permute(0, 2, 1) * 2`` is, in torch, a tensor whose memory is
ordered like ``x``'s. Values are the same either way, but a torch op after the cluster
can depend on the layout: ``.permute(0, 2, 1).view(n, -1)`` is a valid view of torch's
tensor and raises on DISC's. ``as_strided`` and the layout an elementwise op gives its
result (it follows its inputs) carry the difference further.

So wherever a tensor reaches torch from somewhere DISC may have produced it (a cluster
output, or a graph input, which in a backward graph is a tensor the forward saved) and
was traced with a permuted dense layout, :func:`match_layout` gives it that layout: a
stride check when it has it already, one copy when not. Results the user receives from a
cluster get the traced layout too, as eager would give them. Nothing is inserted for
row-major traced layouts (the common case), nor where the consumer is a cluster (DISC
reads any layout).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import optimization_hint

__all__ = ["match_layout", "memory_order", "restore_layouts"]


def memory_order(val: Any) -> tuple[int, ...] | None:
    """The dims of a traced tensor from outermost to innermost in memory, when its layout
    is a dense permutation that is not row-major; None otherwise (row-major, a gap or an
    overlap such as an expanded dim, for which row-major serves every view just as well).
    Read from the traced example's sizes and strides (no guards are added)."""
    if not isinstance(val, torch.Tensor) or val.dim() < 2:
        return None
    try:
        sizes = [optimization_hint(s, fallback=2) for s in val.shape]
        strides = [optimization_hint(s, fallback=1) for s in val.stride()]
    except Exception:  # a size with no hint: leave the tensor as it comes
        return None
    dims = [d for d in range(len(sizes)) if sizes[d] != 1]
    order = sorted(dims, key=lambda d: -strides[d])  # stable: ties keep logical order
    expected = 1
    for d in reversed(order):  # dense and non-overlapping
        if strides[d] != expected:
            return None
        expected *= sizes[d]
    if order == dims:
        return None  # row-major already
    ones = [d for d in range(len(sizes)) if sizes[d] == 1]
    return tuple(ones + order)  # size-1 dims anywhere: outermost is as good as any


def match_layout(x: torch.Tensor, order: tuple[int, ...]) -> torch.Tensor:
    """``x`` with its dims laid out in memory in ``order`` (outermost first): ``x`` itself
    when it is already, else a copy."""
    if x.permute(order).is_contiguous():
        return x
    inverse = [0] * len(order)
    for position, dim in enumerate(order):
        inverse[dim] = position
    out = torch.empty([x.shape[d] for d in order], dtype=x.dtype, device=x.device)
    out = out.permute(inverse)
    out.copy_(x)
    return out


def _is_size(node: torch.fx.Node) -> bool:
    """A size computation (``sym_size``, arithmetic on sizes): reads no memory layout."""
    return isinstance(node.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool,
                                             int, float, bool))


def _mutates(node: torch.fx.Node) -> bool:
    """An in-place op (``copy_`` of a mutated input): it must write into the tensor it was
    given, never into a re-laid-out copy of it."""
    schema = getattr(node.target, "_schema", None)
    return bool(schema is not None and schema.is_mutable)


def restore_layouts(gm: torch.fx.GraphModule, is_cluster_output: Any,
                    visible: int | None) -> int:
    """Insert :func:`match_layout` where a tensor DISC may have produced meets torch:
    before every non-cluster node reading a cluster output or a graph input, and on the
    first ``visible`` graph results (None: all) that come from a cluster. Returns how many
    were inserted. ``is_cluster_output(node)``: is it a result of a DISC cluster?"""
    graph = gm.graph
    matched: dict[torch.fx.Node, torch.fx.Node | None] = {}

    def matching(src: torch.fx.Node, before: torch.fx.Node) -> torch.fx.Node | None:
        if src not in matched:
            order = memory_order(src.meta.get("val"))
            if order is None:
                matched[src] = None
            else:
                with graph.inserting_before(before):
                    node = graph.call_function(match_layout, (src, order))
                node.meta = dict(src.meta)
                matched[src] = node
        return matched[src]

    for node in list(graph.nodes):
        if (node.op == "call_function" and node.target is not match_layout
                and not is_cluster_output(node) and not _is_size(node)
                and not _mutates(node)):
            for src in node.all_input_nodes:
                if src.op == "placeholder" or is_cluster_output(src):
                    new = matching(src, node)
                    if new is not None:
                        node.replace_input_with(src, new)
        elif node.op == "output":
            results = node.args[0]
            if not isinstance(results, (list, tuple)):
                continue
            shown = results if visible is None else results[:visible]
            for r in shown:
                if isinstance(r, torch.fx.Node) and is_cluster_output(r):
                    new = matching(r, node)
                    if new is not None:
                        node.replace_input_with(r, new)
    return sum(1 for n in matched.values() if n is not None)
