"""Canonicalization: each op's own ``canonicalize`` hook plus the algebraic rule table."""

from __future__ import annotations

from ..ir import Graph, Op, Value
from ..opdef import Rewriter, registry
from .algebraic import RULES, Rule, swap_operands_rules
from .manager import Pass


class Canonicalize(Pass):
    name = "canonicalize"

    def __init__(self, rules: list[Rule] | None = None):
        commutative = [n for n, d in registry().items() if d.has_trait("commutative")]
        self.rules: dict[str, list[Rule]] = {}
        for r in (RULES if rules is None else rules) + swap_operands_rules(commutative):
            self.rules.setdefault(r.op, []).append(r)

    def run(self, graph: Graph) -> bool:
        replace: dict[int, Value] = {}
        new_ops: list[Op] = []
        changed = False
        for op in graph.ops:
            op.operands = [replace.get(id(v), v) for v in op.operands]
            repl = None
            if len(op.results) == 1:
                rw = Rewriter()
                repl = op.opdef.canonicalize(op, rw)
                if repl is None:
                    for rule in self.rules.get(op.name, ()):
                        if rule.applies(op):
                            rw = Rewriter()
                            repl = rule.rewrite(op, rw)
                            break
            if repl is None or repl is op.results[0]:
                new_ops.append(op)
                continue
            if repl.type != op.results[0].type:
                raise AssertionError(f"canonicalizing {op.name} changed its type from "
                                     f"{op.results[0].type} to {repl.type}")
            new_ops.extend(rw.created)
            replace[id(op.results[0])] = repl
            changed = True
        graph.ops = new_ops
        graph.outputs = [replace.get(id(v), v) for v in graph.outputs]
        return changed
