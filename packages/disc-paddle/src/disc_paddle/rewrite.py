"""Replace clusters of a PIR program with ``disc_launch_<N>`` ops (:mod:`disc_paddle.custom_op`).

A program's block is an ordered list, so a launch must come after every op that computes
one of its inputs and before every op that reads one of its results. It takes the place
of the cluster's last member (every input is computed before some member reads it); an
op outside the cluster that sits between the members and reads a cluster result, or a
value computed from one, moves to just after the launch, in its order. Clustering keeps
clusters convex (no path leaves a cluster and comes back), so no op both feeds a member
and reads a result, and these moves keep the program valid.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from disc_runtime.native import ABI_VERSION

from .custom_op import op_name

__all__ = ["Launch", "replace_clusters"]


@dataclass
class Launch:
    """One compiled cluster, ready to replace its members in the program.

    ``members`` are the ops the launch replaces (with the ``builtin.split``/``combine``
    plumbing that only they use), in program order. ``inputs`` are the module's inputs in
    order. The module has ``len(out_dims)`` outputs, of dtypes ``out_dtypes`` (Paddle
    codes; None: those of ``outputs``) and dims ``out_dims`` as the program should see
    them (static sizes, -1 for symbolic). ``outputs`` are the member results read outside
    the cluster; ``output_slots[i]`` is the module output that replaces ``outputs[i]``
    (default: output ``i``), or None when ``passthrough[i]``, one of the inputs, does.
    """

    members: Sequence[object]  # pir.Operation, in program order
    inputs: Sequence[object]  # pir.Value
    outputs: Sequence[object]  # pir.Value
    out_dims: Sequence[Sequence[int]]
    module_path: str
    key: str
    output_slots: Sequence[int | None] | None = None
    passthrough: dict[int, object] = field(default_factory=dict)
    out_dtypes: Sequence[int] | None = None
    #: (position in ``outputs``, value): an in-place member's update of ``value``, written
    #: back into it after the launch (``assign_out_``)
    writebacks: Sequence[tuple[int, object]] = ()


def _dtype_code(value: object) -> int:
    return int(value.dtype)  # type: ignore[attr-defined]  # a paddle DataType enum


def _between(ops: list[object], member_ids: set[int]) -> list[object]:
    """The non-member ops between a cluster's first and last member, in order."""
    idx = [i for i, op in enumerate(ops) if op.id() in member_ids]  # type: ignore[attr-defined]
    return [op for op in ops[idx[0]:idx[-1]] if op.id() not in member_ids]  # type: ignore[attr-defined]


def _move_readers_after(block: object, launch_op: object, between: list[object]) -> None:
    """Move the ops of ``between`` that read a launch result (directly or through another
    moved op) to just after the launch op, keeping their order."""
    tainted = {r.id for r in launch_op.results()}  # type: ignore[attr-defined]
    moved = []
    for op in between:
        if any(v.id in tainted for v in op.operands_source()):  # type: ignore[attr-defined]
            moved.append(op)
            tainted.update(r.id for r in op.results())  # type: ignore[attr-defined]
    if not moved:
        return
    ops = list(block.ops)  # type: ignore[attr-defined]
    at = next(i for i, op in enumerate(ops) if op.id() == launch_op.id())  # type: ignore[attr-defined]
    anchor = ops[at + 1] if at + 1 < len(ops) else None
    for op in moved:
        if anchor is None:
            block.move_op_to_block_end(op)  # type: ignore[attr-defined]
        else:
            op.move_before(anchor)  # type: ignore[attr-defined]


def _write_back(program: object, launch: Launch, slots: list[int | None], new: list[object],
                current: object, launch_op: object) -> None:
    """After the launch, copy each in-place update into the value the replaced op updated
    (a running statistic: a parameter, whose buffer Paddle keeps)."""
    import paddle

    todo = [(new[slots[i]], current(target))  # type: ignore[operator]
            for i, target in launch.writebacks if slots[i] is not None]
    if not todo:
        return
    with paddle.static.program_guard(program):
        paddle.pir.set_insertion_point_after(launch_op)
        for value, target in reversed(todo):  # each inserted right after the launch
            paddle._C_ops.assign_out_(value, target)


def replace_clusters(program: object, launches: Sequence[Launch]) -> None:
    """Put one launch op in place of each cluster's members (see the module docstring).

    The launch library must be loaded (:func:`disc_paddle.custom_op.load_library`), which
    registers the ops this inserts."""
    import paddle

    block = program.global_block()  # type: ignore[attr-defined]
    # a cluster may read another's results: once that one is replaced, its old values are
    # gone (their ops removed), so later launches read the replacements
    replaced: dict[str, object] = {}

    def current(v: object) -> object:
        return replaced.get(v.id, v)  # type: ignore[attr-defined]

    for launch in launches:
        members = list(launch.members)
        inputs = [current(v) for v in launch.inputs]
        between = _between(list(block.ops), {op.id() for op in members})
        slots = list(launch.output_slots) if launch.output_slots is not None \
            else list(range(len(launch.outputs)))
        ranks = [len(d) for d in launch.out_dims]
        flat = [int(x) for dims in launch.out_dims for x in dims]
        dtypes = list(launch.out_dtypes) if launch.out_dtypes is not None \
            else [_dtype_code(v) for v in launch.outputs]
        new: list[object] = []
        if launch.out_dims:
            with paddle.static.program_guard(program):
                paddle.pir.set_insertion_point(members[-1])
                made = paddle._C_ops._run_custom_op(
                    op_name(len(launch.out_dims)), inputs, launch.module_path,
                    launch.key, ABI_VERSION, [len(v.shape) for v in inputs], ranks,
                    dtypes, flat)
            new = list(made) if isinstance(made, (list, tuple)) else [made]
        for i, (old, slot) in enumerate(zip(launch.outputs, slots)):
            repl = current(launch.passthrough[i]) if slot is None else new[slot]
            old.replace_all_uses_with(repl)  # type: ignore[attr-defined]
            replaced[old.id] = repl  # type: ignore[attr-defined]
        for op in reversed(members):
            block.remove_op(op)
        if new:
            launch_op = new[0].get_defining_op()
            _move_readers_after(block, launch_op, between)
            _write_back(program, launch, slots, new, current, launch_op)
