"""Common-subexpression elimination: identical ops on identical operands compute once.

Only ops with the trait ``"pure"`` merge: two calls of an op with a side effect (or one
that draws random numbers) are two calls."""

from __future__ import annotations

from typing import Any

from ..ir import Graph, Op, Value
from .base import Pass


def _key(op: Op, canon: dict[int, Value]) -> tuple[Any, ...]:
    operands = [id(canon.get(id(v), v)) for v in op.operands]
    if op.opdef.has_trait("commutative"):
        operands.sort()
    return (op.name, tuple(operands), tuple(sorted(op.attrs.items(), key=lambda kv: kv[0])))


class CSE(Pass):
    name = "cse"

    def run(self, graph: Graph) -> bool:
        seen: dict[tuple[Any, ...], Op] = {}
        canon: dict[int, Value] = {}
        kept: list[Op] = []
        for op in graph.ops:
            op.operands = [canon.get(id(v), v) for v in op.operands]
            if not op.opdef.has_trait("pure"):
                kept.append(op)
                continue
            try:
                key = _key(op, canon)
                hash(key)
            except TypeError:
                kept.append(op)
                continue
            prior = seen.get(key)
            if prior is not None and [r.type for r in prior.results] == [
                    r.type for r in op.results]:
                for old, new in zip(op.results, prior.results):
                    canon[id(old)] = new
                continue
            seen[key] = op
            kept.append(op)
        graph.outputs = [canon.get(id(v), v) for v in graph.outputs]
        changed = len(kept) != len(graph.ops)
        graph.ops = kept
        return changed
