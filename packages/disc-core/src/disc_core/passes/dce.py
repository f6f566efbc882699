"""Dead-code elimination: drop ops none of whose results reach an output.

Every op of the closed set is free of side effects, so liveness is the only criterion.
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
            if any(id(r) in live for r in op.results):
                kept.append(op)
                live.update(id(v) for v in op.operands)
        changed = len(kept) != len(graph.ops)
        graph.ops = kept[::-1]
        return changed
