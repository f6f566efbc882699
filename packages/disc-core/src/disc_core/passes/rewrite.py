"""The one op-by-op rewrite driver every local rewrite uses (canonicalization, lowering).

``rewrite(op, rw)`` returns a value replacing the op's single result, or None to keep the
op; new ops come from ``rw.op(...)`` and are inserted in front of the rewritten op, so the
graph stays topologically ordered without a re-sort.
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir import Graph, Op, Value
from ..opdef import Rewriter

RewriteFn = Callable[[Op, Rewriter], Value | None]


def rewrite_ops(graph: Graph, rewrite: RewriteFn) -> bool:
    """Apply ``rewrite`` to every op in order; True when anything was replaced."""
    replace: dict[int, Value] = {}
    new_ops: list[Op] = []
    for op in graph.ops:
        op.operands = [replace.get(id(v), v) for v in op.operands]
        rw = Rewriter()
        repl = rewrite(op, rw) if len(op.results) == 1 else None
        if repl is None or repl is op.results[0]:
            new_ops.append(op)
            continue
        if repl.type != op.results[0].type:
            raise AssertionError(f"rewriting {op.name} changed its type from "
                                 f"{op.results[0].type} to {repl.type}")
        new_ops.extend(rw.created)
        replace[id(op.results[0])] = repl
    changed = len(replace) > 0
    graph.ops = new_ops
    graph.outputs = [replace.get(id(v), v) for v in graph.outputs]
    return changed
