"""Constant folding: run an op's reference semantics at compile time when its operands are
constants and its result is static and small (large folded constants would bloat artifacts)."""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Op
from ..opdef import Env, InterpretError, get_op
from .base import Pass

MAX_FOLDED_ELEMENTS = 1 << 14


class ConstantFold(Pass):
    name = "constant-fold"

    def __init__(self, max_elements: int = MAX_FOLDED_ELEMENTS):
        self.max_elements = max_elements

    def run(self, graph: Graph) -> bool:
        consts: dict[int, np.ndarray] = {}
        replace: dict[int, object] = {}
        new_ops: list[Op] = []
        changed = False
        constant = get_op("constant")
        for op in graph.ops:
            op.operands = [replace.get(id(v), v) for v in op.operands]  # type: ignore[misc]
            if op.name == "constant":
                consts[id(op.results[0])] = op.attrs["value"].array
                new_ops.append(op)
                continue
            foldable = (op.operands and all(id(v) in consts for v in op.operands)
                        and all(r.type.is_static for r in op.results)
                        and sum(int(np.prod([d.value for d in r.shape])) for r in op.results)
                        <= self.max_elements)
            if not foldable:
                new_ops.append(op)
                continue
            try:
                outs = op.opdef.run([consts[id(v)] for v in op.operands], op.attrs, Env())
            except (InterpretError, ArithmeticError, ValueError):
                new_ops.append(op)  # leave the error to run time, where it is reported
                continue
            for r, out in zip(op.results, outs):
                c = constant.build([], {"value": np.asarray(out, dtype=r.dtype.np)})
                new_ops.append(c)
                consts[id(c.results[0])] = c.attrs["value"].array
                replace[id(r)] = c.results[0]
            changed = True
        graph.ops = new_ops
        graph.outputs = [replace.get(id(v), v) for v in graph.outputs]  # type: ignore[misc]
        return changed
