"""Replace clusters of a PIR program with ``disc_launch_<N>`` ops (:mod:`disc_paddle.custom_op`).

A program's block is an ordered list, so a launch must come after every op that computes
one of its inputs and before every op that reads one of its results. It takes the place
of the cluster's last member (every input is computed before some member reads it); an
op outside the cluster that sits between the members and reads a cluster result, or a
value computed from one, moves to just after the launch, in its order. So does an op
that must follow a member, or a moved op, because of an in-place write
(:func:`disc_paddle.program.inplace_order`: an ``all_reduce_`` between a member that
reads its operand and the last member moves after the launch, so the launch reads the
operand before it changes). Clustering keeps clusters convex over data and those
ordering edges (no path leaves a cluster and comes back), so no op both must precede a
member and follow one, and these moves keep the program valid.

A *checking* launch (the accuracy guard's programs, :attr:`Launch.check` set) keeps the
members: it comes right after the last one, takes their results as extra inputs (the
values the module must reproduce) and replaces them for every other reader, so what
follows runs on the module's outputs exactly as in the plain program, and the launch op
fails the call when they differ from Paddle's (``native/disc_launch.cc``). An in-place
member (a running statistic's update) would change a module input's buffer before the
launch reads it: the launch reads a copy taken just before that member instead, and the
member's own update stands (no write-back).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from disc_runtime.abi import ABI_VERSION

from .custom_op import op_name
from .program import inplace_order

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
    #: the accuracy guard: (rtol, atol) per module output; the launch then keeps the
    #: members and compares (see the module docstring). None: a plain launch
    check: Sequence[tuple[float, float]] | None = None


def _dtype_code(value: object) -> int:
    return int(value.dtype)  # type: ignore[attr-defined]  # a paddle DataType enum


def _between(ops: list[object], member_ids: set[int]) -> list[object]:
    """The non-member ops between a cluster's first and last member, in order."""
    idx = [i for i, op in enumerate(ops) if op.id() in member_ids]  # type: ignore[attr-defined]
    return [op for op in ops[idx[0]:idx[-1]] if op.id() not in member_ids]  # type: ignore[attr-defined]


def _order_successors(ops: list[object]) -> dict[int, set[int]]:
    """op id -> ids of the ops in-place writes make run after it (see the module
    docstring)."""
    after: dict[int, set[int]] = {}
    for before, later in inplace_order(ops):
        after.setdefault(before.id(), set()).add(later.id())  # type: ignore[attr-defined]
    return after


def _move_readers_after(block: object, launch_op: object, between: list[object],
                        members: set[int] | None = None,
                        order: dict[int, set[int]] | None = None) -> None:
    """Move the ops of ``between`` that read a launch result (directly or through another
    moved op), or that ``order`` (op id -> ids that must follow it) puts after one of
    ``members`` or after a moved op, to just after the launch op, keeping their order."""
    tainted = {r.id for r in launch_op.results()}  # type: ignore[attr-defined]
    order = order or {}
    follow: set[int] = set()
    for m in members or ():
        follow |= order.get(m, set())
    moved = []
    for op in between:
        if op.id() in follow or \
                any(v.id in tainted for v in op.operands_source()):  # type: ignore[attr-defined]
            moved.append(op)
            tainted.update(r.id for r in op.results())  # type: ignore[attr-defined]
            follow |= order.get(op.id(), set())  # type: ignore[attr-defined]
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


def _expected(launch: Launch, slots: list[int | None]) -> list[object]:
    """The member result each module output must reproduce, in module output order."""
    want: dict[int, object] = {}
    for old, slot in zip(launch.outputs, slots):
        if slot is not None:
            want.setdefault(slot, old)
    return [want[j] for j in range(len(launch.out_dims))]


def _guard_inputs(program: object, launch: Launch, inputs: list[object],
                  current: Callable[[object], object]) -> list[object]:
    """A checking launch's module inputs: each value an in-place member updates is
    replaced by a copy taken just before that member (see the module docstring)."""
    import paddle

    targets = {current(t).id: launch.outputs[i]  # type: ignore[attr-defined]
               for i, t in launch.writebacks}
    if not targets:
        return inputs
    out = []
    for v in inputs:
        updated = targets.get(v.id)  # type: ignore[attr-defined]
        if updated is None:
            out.append(v)
            continue
        with paddle.static.program_guard(program):
            paddle.pir.set_insertion_point(updated.get_defining_op())  # type: ignore[attr-defined]
            out.append(paddle._C_ops.assign(v))
    return out


def replace_clusters(program: object, launches: Sequence[Launch]) -> None:
    """Put one launch op in place of each cluster's members (see the module docstring).

    The launch library must be loaded (:func:`disc_paddle.custom_op.load_library`), which
    registers the ops this inserts."""
    import paddle

    for launch in launches:  # what can be refused is refused before the program changes
        if launch.out_dims:
            op_name(len(launch.out_dims))
    block = program.global_block()  # type: ignore[attr-defined]
    # a cluster may read another's results: once that one is replaced, its old values are
    # gone (their ops removed), so later launches read the replacements
    replaced: dict[str, object] = {}

    def current(v: object) -> object:
        return replaced.get(v.id, v)  # type: ignore[attr-defined]

    for launch in launches:
        members = list(launch.members)
        inputs = [current(v) for v in launch.inputs]
        member_ids = {op.id() for op in members}
        block_ops = list(block.ops)
        between = _between(block_ops, member_ids)
        order = _order_successors(block_ops)
        slots = list(launch.output_slots) if launch.output_slots is not None \
            else list(range(len(launch.outputs)))
        ranks = [len(d) for d in launch.out_dims]
        flat = [int(x) for dims in launch.out_dims for x in dims]
        dtypes = list(launch.out_dtypes) if launch.out_dtypes is not None \
            else [_dtype_code(v) for v in launch.outputs]
        checking = launch.check is not None and bool(launch.out_dims)
        expected = _expected(launch, slots) if checking else []
        rtol = [float(r) for r, _ in launch.check] if checking else []  # type: ignore[union-attr]
        atol = [float(a) for _, a in launch.check] if checking else []  # type: ignore[union-attr]
        if checking:
            inputs = _guard_inputs(program, launch, inputs, current)
        new: list[object] = []
        if launch.out_dims:
            with paddle.static.program_guard(program):
                if checking:
                    paddle.pir.set_insertion_point_after(members[-1])
                else:
                    paddle.pir.set_insertion_point(members[-1])
                made = paddle._C_ops._run_custom_op(
                    op_name(len(launch.out_dims)), inputs + expected, launch.module_path,
                    launch.key, ABI_VERSION, [len(v.shape) for v in inputs], ranks,
                    dtypes, flat, rtol, atol)
            new = list(made) if isinstance(made, (list, tuple)) else [made]
        kept = _kept_uses(launch.outputs, members, new[0]) if checking else []
        for i, (old, slot) in enumerate(zip(launch.outputs, slots)):
            repl = current(launch.passthrough[i]) if slot is None else new[slot]
            old.replace_all_uses_with(repl)  # type: ignore[attr-defined]
            replaced[old.id] = repl  # type: ignore[attr-defined]
        for op, k, value in kept:
            op.operand(k).set_source(value)  # type: ignore[attr-defined]
        if not checking:
            for op in reversed(members):
                block.remove_op(op)
        if new:
            launch_op = new[0].get_defining_op()
            _move_readers_after(block, launch_op, between, member_ids, order)
            if not checking:
                _write_back(program, launch, slots, new, current, launch_op)


def _kept_uses(values: Sequence[object], members: Sequence[object],
               result: object) -> list[tuple[object, int, object]]:
    """(op, operand index, value) of each use of a checking launch's ``values`` (the
    members' results) that must keep reading them once every other reader reads the
    launch's outputs: the members' own, those of the vector operands (``builtin.combine``)
    members read, and the launch's expected inputs. Redirected too, they would make the
    members read what the launch computes after them."""
    keep = list(members)
    for op in members:
        for v in op.operands_source():  # type: ignore[attr-defined]
            d = v.get_defining_op() if v.initialized() else None
            if d is not None and d.name() == "builtin.combine":
                keep.append(d)
    launch_op = result.get_defining_op()  # type: ignore[attr-defined]
    keep.append(launch_op.operand_source(0).get_defining_op())  # its input vector
    ids = {op.id() for op in keep}  # type: ignore[attr-defined]
    wanted = {v.id: v for v in values}  # type: ignore[attr-defined]
    uses = []
    for v in wanted.values():
        for op in {op.id(): op for op in v.all_used_ops()}.values():  # type: ignore[attr-defined]
            if op.id() not in ids:
                continue
            for k in range(op.num_operands()):
                if op.operand_source(k).id == v.id:  # type: ignore[attr-defined]
                    uses.append((op, k, v))
    return uses
