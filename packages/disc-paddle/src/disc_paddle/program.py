"""A PIR program's global block seen as DISC clusters it: computation nodes and their values.

A PIR block is a list of operations in a valid order. Most are computation (``pd_op.*``),
some are plumbing that clustering must see through:

* ``pd_op.data``, ``builtin.parameter`` (and a backward program's block arguments) bring
  values in; ``builtin.shadow_output`` names values the program hands out. They are never
  clustered nor reported.
* ``builtin.combine`` builds a vector operand (``concat``'s, ``stack``'s): its reader reads
  the combined values, so those are the reader's inputs here.
* ``builtin.split`` takes a vector result apart (``split``'s): its results are the
  producing node's outputs here, and it goes with that node when a cluster replaces it.

Data flow alone does not order a PIR block: an op that works in place (``all_reduce_``,
``assign_out_``, ``relu_``: Paddle's in-place info maps a result to the operand whose
buffer it reuses) changes a value that ops after it read *by the old name*, and the ops
before it must read it first. :func:`inplace_order` turns each such write into ordering
edges (earlier readers before the writer, the writer before later readers), which
clustering honours like data edges and the rewrite when it moves ops past a launch;
without them a cluster could compute from the value as it was before the write (an
all-reduce skipped).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .lowering import vid

__all__ = ["NOT_COMPUTE", "Node", "ProgramView", "inplace_order", "inplace_writes",
           "is_vector"]

#: ops that are not computation: never clustered, not in the report
NOT_COMPUTE = frozenset({"pd_op.data", "builtin.parameter", "builtin.shadow_output",
                         "builtin.combine", "builtin.split", "builtin.constant",
                         "pd_op.feed", "pd_op.fetch", "builtin.set_parameter"})


def is_vector(v: Any) -> bool:
    """A vector-of-tensors value (``builtin.combine``'s result, ``split``'s)."""
    return v.initialized() and str(v.type()).startswith("vec[")


def _inplace_info(op: Any) -> dict[int, int]:
    """result index -> operand index, for each result that reuses an operand's buffer."""
    from paddle.base import core

    try:
        return dict(core.pir.get_op_inplace_info(op))
    except (RuntimeError, ValueError):  # an op without Paddle's yaml info (builtin ops)
        return {}


def _expand_combine(v: Any) -> list[Any]:
    d = v.get_defining_op()
    if d is not None and d.name() == "builtin.combine":
        return [s for s in d.operands_source() if s.initialized()]
    return [v]


def inplace_writes(op: Any) -> list[tuple[Any, Any | None]]:
    """(operand written in place, the result that aliases it) for each buffer ``op``
    overwrites; a vector operand (``builtin.combine``) writes each of its elements."""
    out: list[tuple[Any, Any | None]] = []
    if op.name() in NOT_COMPUTE:
        return out
    for ri, oi in _inplace_info(op).items():
        v = op.operand_source(oi)
        if not v.initialized():
            continue
        r = op.result(ri)
        targets = _expand_combine(v)
        alias = r if len(targets) == 1 and r.initialized() and not is_vector(r) else None
        out.extend((t, alias) for t in targets)
    return out


def inplace_order(ops: list[Any]) -> list[tuple[Any, Any]]:
    """Ordering edges ``(before, after)`` between ops of one block that in-place writes
    impose beyond data flow (see the module docstring): for each op writing a buffer, every
    other op reading that buffer (under any of its names: the operand, the aliasing
    result, other writers' results) and placed before it must run before it, and every one
    placed after it must run after it. Empty when no op works in place."""
    parent: dict[str, str] = {}

    def find(i: str) -> str:
        while parent.get(i, i) != i:
            parent[i] = parent.get(parent[i], parent[i])
            i = parent[i]
        return i

    writers: list[tuple[int, Any, str]] = []  # (position, op, written value id)
    for pos, op in enumerate(ops):
        for target, alias in inplace_writes(op):
            writers.append((pos, op, vid(target)))
            if alias is not None:
                parent[find(vid(alias))] = find(vid(target))
    if not writers:
        return []
    written = {find(i) for _, _, i in writers}
    readers: dict[str, list[tuple[int, Any]]] = {}
    for pos, op in enumerate(ops):
        if op.name() in ("builtin.combine", "builtin.split"):
            continue  # their readers read the elements (expanded below)
        for v in op.operands_source():
            if not v.initialized():
                continue
            for s in _expand_combine(v):
                root = find(vid(s))
                if root in written:
                    readers.setdefault(root, []).append((pos, op))
    edges: list[tuple[Any, Any]] = []
    for wpos, w, i in writers:
        for rpos, r in readers.get(find(i), ()):
            if r.id() == w.id():
                continue
            edges.append((r, w) if rpos < wpos else (w, r))
    return edges


@dataclass(eq=False)
class Node:
    """One computation op with its effective inputs and outputs (see the module docstring).
    Nodes compare by identity, as clustering needs."""

    op: Any
    index: int
    inputs: list[Any]
    outputs: list[Any]
    splits: list[Any] = field(default_factory=list)  # builtin.split ops of vector results

    @property
    def name(self) -> str:
        return self.op.name()

    def __repr__(self) -> str:
        return f"Node({self.name}#{self.index})"


class ProgramView:
    """The nodes of ``program``'s global block, who produces and who reads each value."""

    def __init__(self, program: Any):
        self.program = program
        self.block = program.global_block()
        ops = list(self.block.ops)
        self.nodes: list[Node] = []
        self.producer: dict[str, Node] = {}
        self.readers: dict[str, list[Any]] = {}  # value id -> reading ops (combine expanded)
        self.program_outputs: set[str] = set()  # read by builtin.shadow_output
        self.sources: list[Any] = []  # values that enter: data, parameters, block arguments
        self.combine_users: dict[int, list[int]] = {}  # combine op id -> reading op ids
        split_of: dict[str, Any] = {}
        for op in ops:
            if op.name() == "builtin.split":
                split_of[vid(op.operand_source(0))] = op
        for i, op in enumerate(ops):
            name = op.name()
            if name in ("pd_op.data", "builtin.parameter", "builtin.constant"):
                self.sources.extend(op.results())
            if name == "builtin.shadow_output":
                self.program_outputs.add(vid(op.operand_source(0)))
            if name in NOT_COMPUTE:
                continue
            inputs: list[Any] = []
            for v in op.operands_source():
                if not v.initialized():
                    continue
                d = v.get_defining_op()
                if d is not None and d.name() == "builtin.combine":
                    inputs.extend(d.operands_source())
                else:
                    inputs.append(v)
            outputs: list[Any] = []
            splits: list[Any] = []
            for r in op.results():
                s = split_of.get(vid(r)) if is_vector(r) else None
                if s is not None:
                    splits.append(s)
                    outputs.extend(s.results())
                else:
                    outputs.append(r)
            node = Node(op, i, inputs, outputs, splits)
            self.nodes.append(node)
            for r in outputs:
                if r.initialized():
                    self.producer[vid(r)] = node
        for op in ops:
            if op.name() in ("builtin.combine", "builtin.split"):
                continue
            for v in op.operands_source():
                if not v.initialized():
                    continue
                d = v.get_defining_op()
                is_combine = d is not None and d.name() == "builtin.combine"
                if is_combine:
                    self.combine_users.setdefault(d.id(), []).append(op.id())
                srcs = d.operands_source() if is_combine else [v]
                for s in srcs:
                    self.readers.setdefault(vid(s), []).append(op)
        try:
            self.sources.extend(self.block.kwargs().values())
        except (AttributeError, RuntimeError):
            pass

    def edges(self) -> list[tuple[Node, Node]]:
        """(producer, reader) between nodes, and the order in-place writes impose
        (:func:`inplace_order`)."""
        out = []
        for node in self.nodes:
            for v in node.inputs:
                p = self.producer.get(vid(v))
                if p is not None and p is not node:
                    out.append((p, node))
        by_op = {n.op.id(): n for n in self.nodes}
        for before, after in inplace_order(list(self.block.ops)):
            a, b = by_op.get(before.id()), by_op.get(after.id())
            if a is not None and b is not None and a is not b:
                out.append((a, b))
        return out

    def read_outside(self, v: Any, members: set[int]) -> bool:
        """Whether ``v`` is read by an op that is not one of ``members`` (op ids) or handed
        out by the program."""
        i = vid(v)
        if i in self.program_outputs:
            return True
        return any(op.id() not in members for op in self.readers.get(i, ()))

    def dead(self) -> set[Node]:
        """Nodes none of whose outputs anything reads (Paddle prunes them itself); an op
        that writes in place is not dead: its effect is the write (an ``all_reduce_``
        whose result nobody reads, its operand's readers see the sum)."""
        return {n for n in self.nodes if n.outputs and
                not any(self.readers.get(vid(r)) or vid(r) in self.program_outputs
                        for r in n.outputs if r.initialized())
                and not inplace_writes(n.op)}
