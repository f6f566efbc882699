"""Canonicalization: each op's own ``canonicalize`` hook plus the algebraic rule table."""

from __future__ import annotations

from ..ir import Graph, Op, Value
from ..opdef import Rewriter, registry
from .algebraic import RULES, Rule, swap_operands_rules
from .base import Pass
from .rewrite import rewrite_ops


class Canonicalize(Pass):
    name = "canonicalize"

    def __init__(self, rules: list[Rule] | None = None):
        commutative = [n for n, d in registry().items() if d.has_trait("commutative")]
        self.rules: dict[str, list[Rule]] = {}
        for r in (RULES if rules is None else rules) + swap_operands_rules(commutative):
            self.rules.setdefault(r.op, []).append(r)

    def run(self, graph: Graph) -> bool:
        return rewrite_ops(graph, self.rewrite)

    def rewrite(self, op: Op, rw: Rewriter) -> Value | None:
        repl = op.opdef.canonicalize(op, rw)
        if repl is not None:
            return repl
        for rule in self.rules.get(op.name, ()):
            if rule.applies(op):
                return rule.rewrite(op, rw)
        return None
