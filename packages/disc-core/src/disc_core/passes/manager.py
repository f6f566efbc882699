"""A minimal pass manager: run passes in order, to a fixpoint, verifying as it goes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..ir import Graph
from ..opdef import VerifyError
from .base import Pass

__all__ = ["Pass", "PassManager", "PassStats"]


@dataclass
class PassStats:
    runs: int = 0
    changes: int = 0
    seconds: float = 0.0


@dataclass
class PassManager:
    """Runs ``passes`` repeatedly until none changes the graph (or ``max_iterations``).

    With ``verify_each`` the graph is verified after every pass that changed it, so a
    broken rewrite is reported by name instead of surfacing later as wrong numbers.
    """

    passes: list[Pass]
    max_iterations: int = 8
    verify_each: bool = True
    stats: dict[str, PassStats] = field(default_factory=dict)

    def run(self, graph: Graph) -> Graph:
        for _ in range(self.max_iterations):
            changed_any = False
            for p in self.passes:
                st = self.stats.setdefault(p.name, PassStats())
                t0 = time.perf_counter()
                changed = p.run(graph)
                st.seconds += time.perf_counter() - t0
                st.runs += 1
                if changed:
                    st.changes += 1
                    changed_any = True
                    if self.verify_each:
                        try:
                            graph.verify()
                        except VerifyError as exc:
                            raise VerifyError(f"after pass {p.name}: {exc}") from None
            if not changed_any:
                break
        return graph
