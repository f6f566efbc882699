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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .lowering import vid

__all__ = ["NOT_COMPUTE", "Node", "ProgramView", "is_vector"]

#: ops that are not computation: never clustered, not in the report
NOT_COMPUTE = frozenset({"pd_op.data", "builtin.parameter", "builtin.shadow_output",
                         "builtin.combine", "builtin.split", "builtin.constant",
                         "pd_op.feed", "pd_op.fetch", "builtin.set_parameter"})


def is_vector(v: Any) -> bool:
    """A vector-of-tensors value (``builtin.combine``'s result, ``split``'s)."""
    return v.initialized() and str(v.type()).startswith("vec[")


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
        """(producer, reader) between nodes."""
        out = []
        for node in self.nodes:
            for v in node.inputs:
                p = self.producer.get(vid(v))
                if p is not None and p is not node:
                    out.append((p, node))
        return out

    def read_outside(self, v: Any, members: set[int]) -> bool:
        """Whether ``v`` is read by an op that is not one of ``members`` (op ids) or handed
        out by the program."""
        i = vid(v)
        if i in self.program_outputs:
            return True
        return any(op.id() not in members for op in self.readers.get(i, ()))

    def dead(self) -> set[Node]:
        """Nodes none of whose outputs anything reads (Paddle prunes them itself)."""
        return {n for n in self.nodes if n.outputs and
                not any(self.readers.get(vid(r)) or vid(r) in self.program_outputs
                        for r in n.outputs if r.initialized())}
