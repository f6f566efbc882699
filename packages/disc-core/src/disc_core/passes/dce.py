"""Dead-code elimination: drop ops none of whose results reach an output.

Only ops with the trait ``"pure"`` (no side effects) are dropped; every op of today's
closed set has it, so liveness is the criterion, but an op with an effect would be kept.
"""

from __future__ import annotations

from ..ir import Graph
from .base import Pass


class DCE(Pass):
    name = "dce"

    def run(self, graph: Graph) -> bool:
        live: set[int] = {id(v) for v in graph.outputs}
        kept = []
        for op in reversed(graph.ops):
            if any(id(r) in live for r in op.results) or not op.opdef.has_trait("pure"):
                kept.append(op)
                live.update(id(v) for v in op.operands)
        changed = len(kept) != len(graph.ops)
        graph.ops = kept[::-1]
        return changed
