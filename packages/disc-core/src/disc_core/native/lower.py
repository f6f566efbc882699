"""Lowering before fusion: rewrite ops into the forms the native schedules cover."""

from __future__ import annotations

from ..ir import Graph, Op, Value
from ..opdef import get_op


def split_reductions(graph: Graph) -> None:
    """reduce over several axes -> a chain of single-axis reductions (innermost first).

    Kept as is: single-axis reductions (row schedule) and reductions over a strict prefix of
    the axes (column schedule). Reordering changes only floating-point summation order.
    """
    replace: dict[int, Value] = {}
    new_ops: list[Op] = []
    reduce = get_op("reduce")
    for op in graph.ops:
        op.operands = [replace.get(id(v), v) for v in op.operands]
        axes = sorted(op.attrs["axes"]) if op.name == "reduce" else []
        x = op.operands[0] if op.operands else None
        prefix = axes == list(range(len(axes))) and x is not None and len(axes) < x.rank
        if op.name != "reduce" or len(axes) <= 1 or prefix:
            new_ops.append(op)
            continue
        cur = x
        for a in reversed(axes):  # innermost first keeps the remaining axis numbers valid
            step = reduce.build([cur], {"kind": op.attrs["kind"], "axes": [a]})
            new_ops.append(step)
            cur = step.results[0]
        replace[id(op.results[0])] = cur
    graph.ops = new_ops
    graph.outputs = [replace.get(id(v), v) for v in graph.outputs]


def canonicalize_dots(graph: Graph) -> None:
    """Transpose dot_general operands into a layout BLAS takes directly.

    lhs becomes [batch..., free..., contract...] and rhs [batch..., contract..., free...]
    unless they already have a layout the GEMM call can express with its transpose flags;
    the result layout (batch, lhs free, rhs free) is unchanged, so no consumer changes.
    """
    from .emit import gemm_layout

    transpose = get_op("transpose")
    dot = get_op("dot_general")
    replace: dict[int, Value] = {}
    new_ops: list[Op] = []
    for op in graph.ops:
        op.operands = [replace.get(id(v), v) for v in op.operands]
        if op.name != "dot_general" or gemm_layout(op) is not None:
            new_ops.append(op)
            continue
        a = op.attrs
        lhs, rhs = op.operands
        lfree = [d for d in range(lhs.rank)
                 if d not in a["lhs_batch"] and d not in a["lhs_contract"]]
        rfree = [d for d in range(rhs.rank)
                 if d not in a["rhs_batch"] and d not in a["rhs_contract"]]
        lperm = list(a["lhs_batch"]) + lfree + list(a["lhs_contract"])
        rperm = list(a["rhs_batch"]) + list(a["rhs_contract"]) + rfree
        nb, nc = len(a["lhs_batch"]), len(a["lhs_contract"])
        operands = []
        for v, perm in ((lhs, lperm), (rhs, rperm)):
            if perm == list(range(v.rank)):
                operands.append(v)
                continue
            t = transpose.build([v], {"permutation": perm})
            new_ops.append(t)
            operands.append(t.results[0])
        new = dot.build(operands, {
            "lhs_batch": list(range(nb)), "rhs_batch": list(range(nb)),
            "lhs_contract": list(range(nb + len(lfree), nb + len(lfree) + nc)),
            "rhs_contract": list(range(nb, nb + nc))})
        new_ops.append(new)
        replace[id(op.results[0])] = new.results[0]
    graph.ops = new_ops
    graph.outputs = [replace.get(id(v), v) for v in graph.outputs]
