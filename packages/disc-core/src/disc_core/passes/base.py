"""The pass interface, in a module of its own: every pass imports it, and the pass manager
(which also builds the default pipeline out of those passes) re-exports it, so neither side
imports the other."""

from __future__ import annotations

from ..ir import Graph


class Pass:
    """A graph transformation. ``run`` mutates the graph and says whether it changed it."""

    name = "pass"

    def run(self, graph: Graph) -> bool:
        raise NotImplementedError
