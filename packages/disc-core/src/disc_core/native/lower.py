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
