"""Fusion planning: partition a graph into fused kernels, library calls and aliases.

Placement: ``dot_general`` goes to BLAS (a library call), ``reshape`` of a contiguous buffer
is a zero-copy alias, everything else memory-bound is generated code. A fused kernel has an
iteration *space* (the shape of its root) viewed as rows x an innermost column dim:

* ``loop``: elementwise, broadcast, transpose, convert, iota chains;
* ``row``: reductions over the innermost dim together with their producers, and consumers
  that broadcast the reduced rows back (stitch fusion: softmax, LayerNorm, RMSNorm and their
  backward passes are one kernel, the row stays in cache between phases);
* ``column``: a reduction over the leading dims with its elementwise producers; a column
  *sum* of what a row or loop kernel over the same space computes is folded into that
  kernel instead (a column epilogue: per-block partial sums).

After planning, loop kernels that consume a row or loop kernel's values over its space
or its rows are folded into it (vertical merging), column sums ride on a kernel that makes
or reads what they sum (column epilogues), and independent kernels over one space merge
(horizontal fusion).

Every value a kernel touches carries a *dim map*: for each of its dims, the kernel dim it
follows, or None where it is broadcast. Dims that are structurally equal (after shape
propagation: provably equal) map without index arithmetic; a symbolic dim that may be an
implicit broadcast at run time (a broadcast_in_dim operand dim that is a different symbol
from the result dim) makes the kernel *speculative*: the host picks the contiguous version
when the dims agree and a strided one otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..index_map import DATA, Aff, DimMap, Entry, Quot, compose, kdim
from ..ir import Graph, Op, Value
from ..opdef import Fusion
from ..ops.shape_ops import unit_reshape_pairs
from .gemm_operands import library_reads

__all__ = ["DATA", "Aff", "Alias", "DimMap", "Entry", "FusionPlan", "Kernel", "LibraryCall",
           "NativeUnsupported", "Quot", "ScanCall", "ScatterCall", "Step", "compose", "kdim",
           "operand_map", "plan_fusion", "red_axes", "scatter_fill", "scatter_reads",
           "step_values", "unit_reshape_pairs"]


def red_axes(op: Op) -> list[int] | None:
    """The axes a reduction-like op (reduce, argmax, argmin) removes, None for other ops."""
    return op.opdef.red_axes(op)


def _is_reduction(op: Op) -> bool:
    return op.opdef.has_trait("reduction")


def _is_constant(op: Op | None) -> bool:
    """A literal (its data is an attribute: scalars become C literals, arrays static data)."""
    return op is not None and op.opdef.has_trait("constant")


class NativeUnsupported(Exception):
    """The native engine has no code path for part of the graph (the reason says which)."""


@dataclass
class Kernel:
    """One fused kernel: the facts codegen (``kernel_emit``, ``host_emit``) reads.

    Keyed by the IR objects themselves (values and ops hash by identity): the dim map of
    every value computed or written, and of every materialized operand read, with the dims
    of those reads that may be implicit broadcasts at run time."""

    id: int
    kind: str  # "loop" | "row" | "column"
    space: tuple  # tuple[Expr, ...]: the iteration space
    ops: list[Op] = field(default_factory=list)  # computed inside, topological order
    maps: dict[Value, DimMap] = field(default_factory=dict)  # value -> its dim map
    inputs: list[Value] = field(default_factory=list)  # materialized values read
    outputs: list[Value] = field(default_factory=list)  # values written to memory
    # (consumer op, operand index) -> dim map used to read a materialized operand
    reads: dict[tuple[Op, int], DimMap] = field(default_factory=dict)
    # materialized reads whose dims may be implicitly broadcast at run time:
    # (consumer op, operand index) -> {operand dim: kernel dim}
    maybe_broadcast: dict[tuple[Op, int], dict[int, int]] = field(default_factory=dict)
    # a concatenate along the innermost kernel dim whose operands are computed in place: the
    # inner loop is split at its boundaries, so each operand is evaluated only in range
    split_concat: Op | None = None
    # column sums over every row of this (row or loop) kernel's space, accumulated while
    # its last inner loop runs: per-block partial rows, added up after the parallel loop
    column_epilogue: list[Op] = field(default_factory=list)

    @property
    def rank(self) -> int:
        return len(self.space)

    def copy(self) -> Kernel:
        """The same kernel with its own containers, to grow without touching this one."""
        return Kernel(id=self.id, kind=self.kind, space=self.space, ops=list(self.ops),
                      maps=dict(self.maps), inputs=list(self.inputs),
                      outputs=list(self.outputs), reads=dict(self.reads),
                      maybe_broadcast=dict(self.maybe_broadcast),
                      split_concat=self.split_concat,
                      column_epilogue=list(self.column_epilogue))

    @property
    def speculative(self) -> bool:
        return bool(self.maybe_broadcast)

    @property
    def reductions(self) -> list[Op]:
        """Reductions of the kernel's own schedule (column epilogue sums excluded)."""
        epilogue = {id(op) for op in self.column_epilogue}
        return [op for op in self.ops if _is_reduction(op) and id(op) not in epilogue]


@dataclass
class LibraryCall:
    """A GEMM (``dot_general``) through BLAS. ``epilogue``: a row or loop kernel over the
    GEMM's output that runs on each block of rows as soon as the block is computed
    (``gemm_epilogue.fuse_gemm_epilogues``), reading ``epilogue_reads`` besides it.
    ``prologue``: the loop kernel that makes the GEMM's operand ``prologue_operand`` (0:
    lhs, 1: rhs), run block by block into a buffer the GEMM reads at once, never written
    whole (``gemm_prologue``)."""

    op: Op
    epilogue: Kernel | None = None
    epilogue_reads: list[Value] = field(default_factory=list)
    prologue: Kernel | None = None
    prologue_operand: int = 1


@dataclass
class ScatterCall:
    """scatter_add / scatter_elements_add: a serial accumulation loop (indices may repeat)."""

    op: Op


def scatter_fill(op: Op) -> Value | None:
    """The rank-0 constant a scatter's operand is a broadcast of, or None.

    Gradients scatter into zeros (max-pool and embedding backward, index_put on a fresh
    tensor): the scatter then fills its result with the scalar itself, so the operand is
    never materialized, which saves one kernel writing it and one pass copying it."""
    p = op.operands[0].producer
    if p is None or not _is_broadcast(p):
        return None
    if not _is_constant(p.operands[0].producer) or p.operands[0].rank != 0:
        return None
    return p.operands[0]


def _is_broadcast(op: Op) -> bool:
    """An op fused as indexing that replicates its operand (broadcast_in_dim)."""
    return op.opdef.fusion == Fusion.INDEXING and op.opdef.has_trait("broadcast")


def scatter_reads(op: Op) -> list[Value]:
    """The values a scatter step reads from memory (its operand only when not a fill)."""
    return list(op.operands[1:]) if scatter_fill(op) is not None else list(op.operands)


@dataclass
class Alias:
    """``result`` shares the buffer of ``source`` (a reshape of contiguous memory)."""

    op: Op


@dataclass
class ScanCall:
    """cumulative: a loop carrying the accumulator along the axis, parallel over the rest."""

    op: Op


Step = Kernel | LibraryCall | ScatterCall | ScanCall | Alias


@dataclass
class FusionPlan:
    steps: list[Step]

    @property
    def kernels(self) -> list[Kernel]:
        """Every generated kernel: the steps' own and the GEMM epilogues."""
        return [k for s in self.steps for k in (
            [s] if isinstance(s, Kernel) else
            [x for x in (s.prologue, s.epilogue) if x is not None]
            if isinstance(s, LibraryCall) else [])]

    def summary(self) -> dict[str, int]:
        kinds: dict[str, int] = {}
        for s in self.steps:
            name = s.kind if isinstance(s, Kernel) else type(s).__name__.lower()
            kinds[name] = kinds.get(name, 0) + 1
            if isinstance(s, LibraryCall) and s.epilogue is not None:
                kinds["gemm_epilogue"] = kinds.get("gemm_epilogue", 0) + 1
            if isinstance(s, LibraryCall) and s.prologue is not None:
                kinds["gemm_prologue"] = kinds.get("gemm_prologue", 0) + 1
        return kinds


# -- operand dim maps: how each op's operands index the kernel space --------------------

def operand_map(op: Op, i: int, result_map: DimMap, kernel_rank: int
                ) -> tuple[DimMap, dict[int, int]]:
    """The dim map operand ``i`` needs so that ``op``'s result follows ``result_map``
    (the op's own ``index_map``). Also returns the operand dims that might be implicit
    broadcasts at run time.
    """
    got = op.opdef.index_map(op, i, result_map, kernel_rank)
    if got is None:
        raise NativeUnsupported(f"{op.name} cannot be fused")
    return got


def _fusible(op: Op) -> bool:
    return op.opdef.fuses(op)


# -- planning -----------------------------------------------------------------------------

def plan_fusion(graph: Graph, *, horizontal: bool = True) -> FusionPlan:
    """Walk the graph backwards; every value some step must read (or the graph returns)
    roots a step. Kernels absorb producers whose users they contain; a producer whose value
    is also needed elsewhere joins as an extra output (multi-output fusion) when that cannot
    create a cycle. Independent kernels over the same space are then merged (horizontal
    fusion) and the steps ordered by their data dependencies.

    Whether an extra output creates a cycle depends on kernels not formed yet (two kernels
    may each write a value the other reads), so the steps are checked once formed: an extra
    output on a cycle is banned and the graph planned again. Without extra outputs every
    value a kernel writes is its root, which no earlier kernel can need, so this ends."""
    banned: set[int] = set()
    while True:
        steps = _plan_steps(graph, banned)
        try:
            steps = _order_steps(steps)
            break
        except _Cycle as cycle:
            extras = _extra_outputs_on(cycle.path, steps) - banned
            if not extras:
                raise NativeUnsupported("fusion produced a cycle between kernels") from None
            banned |= extras
    if horizontal:
        # column kernels first look for a kernel to ride on (each for its own producer),
        # then whatever is left merges horizontally
        steps = _order_steps(_merge_horizontally(steps, ("row", "loop")))
        steps = _merge_vertically(steps, graph)
        steps = _order_steps(_fuse_column_epilogues(steps, graph))
        steps = _order_steps(_merge_horizontally(steps, ("column", "row", "loop")))
    for n, k in enumerate(s for s in steps if isinstance(s, Kernel)):
        k.id = n
        _split_read_concat(k)
    return FusionPlan(steps)


def _plan_steps(graph: Graph, banned: set[int]) -> list[Step]:
    """The steps of plan_fusion, unordered; values in ``banned`` (ids) are never written as
    a kernel's extra output."""
    users = graph.users()
    needed: set[int] = {id(v) for v in graph.outputs}
    fused: set[int] = set()
    ancestors = _ancestors(graph)
    steps_rev: list[Step] = []
    for op in reversed(graph.ops):
        if id(op) in fused:
            continue
        if not any(id(r) in needed for r in op.results) or _is_constant(op):
            continue  # fused into every consumer, dead, or a static array (constants)
        role = op.opdef.fusion
        if role == Fusion.LIBRARY:
            step: Step = LibraryCall(op)
            reads = library_reads(op)
        elif role == Fusion.ALIAS:
            step = Alias(op)
            reads = list(op.operands)
        elif role == Fusion.SCATTER:
            step = ScatterCall(op)
            reads = scatter_reads(op)
        elif role == Fusion.SCAN:
            step = ScanCall(op)
            reads = list(op.operands)
        elif _fusible(op):
            step = _grow_kernel(op, users, needed, ancestors, fused, banned)
            # duplicated ops (broadcast constants, iotas) stay unfused: a library call may
            # still need them in memory
            fused.update(id(o) for o in step.ops if not _duplicable(o))
            reads = step.inputs
        else:
            raise NativeUnsupported(f"op {op.name} has no native code path yet")
        needed.update(id(v) for v in reads)
        steps_rev.append(step)
    return steps_rev[::-1]


class _Cycle(NativeUnsupported):
    """Steps that depend on each other: ``path[i]`` reads a value ``path[i + 1]`` writes,
    and the last reads one the first writes."""

    def __init__(self, path: list[int]):
        super().__init__("fusion produced a cycle between kernels")
        self.path = path


def _extra_outputs_on(path: list[int], steps: list[Step]) -> set[int]:
    """Ids of the values a cycle's steps exchange that a kernel writes as an extra output
    (multi-output fusion; a kernel's first output is its root)."""
    out: set[int] = set()
    for i, n in enumerate(path):
        reader, writer = steps[n], steps[path[(i + 1) % len(path)]]
        if isinstance(writer, Kernel):
            read = {id(v) for v in step_values(reader)[0]}
            out |= {id(v) for v in writer.outputs[1:] if id(v) in read}
    return out


@dataclass
class _Ancestry:
    """Which ops each op depends on, as bitmasks over graph.ops positions."""

    pos: dict[int, int]
    mask: dict[int, int]

    def depends_on(self, op: Op, other: Op) -> bool:
        return bool(self.mask[id(op)] >> self.pos[id(other)] & 1)


def _ancestors(graph: Graph) -> _Ancestry:
    pos = {id(op): n for n, op in enumerate(graph.ops)}
    mask: dict[int, int] = {}
    for op in graph.ops:
        m = 0
        for v in op.operands:
            p = v.producer
            if p is not None:
                m |= mask[id(p)] | (1 << pos[id(p)])
        mask[id(op)] = m
    return _Ancestry(pos, mask)


def step_values(s: Step) -> tuple[list[Value], list[Value]]:
    """(values the step reads, values it produces)."""
    if isinstance(s, Kernel):
        return s.inputs, s.outputs
    if isinstance(s, ScatterCall):
        return scatter_reads(s.op), list(s.op.results)
    if isinstance(s, LibraryCall):
        reads = library_reads(s.op)
        if s.prologue is not None:  # that operand is made inside the step, from these
            kept = reads[1 - s.prologue_operand:][:1]
            reads = kept + [v for v in s.prologue.inputs if v not in kept]
        if s.epilogue is None:
            return reads, list(s.op.results)
        reads += [v for v in s.epilogue_reads if v not in reads]
        return reads, list(s.op.results) + list(s.epilogue.outputs)
    return list(s.op.operands), list(s.op.results)


def _producer_index(steps: list[Step]) -> dict[int, int]:
    """id(value) -> index of the step that writes it."""
    return {id(v): n for n, s in enumerate(steps) for v in step_values(s)[1]}


def _order_steps(steps: list[Step]) -> list[Step]:
    """Topological order of steps by the values they exchange, stable otherwise."""
    producer = _producer_index(steps)
    deps = [{producer[id(v)] for v in step_values(s)[0] if id(v) in producer} - {n}
            for n, s in enumerate(steps)]
    out: list[int] = []
    state = [0] * len(steps)
    stack: list[int] = []

    def visit(n: int) -> None:
        if state[n] == 2:
            return
        if state[n] == 1:
            raise _Cycle(stack[stack.index(n):])
        state[n] = 1
        stack.append(n)
        for d in sorted(deps[n]):
            visit(d)
        stack.pop()
        state[n] = 2
        out.append(n)

    for n in range(len(steps)):
        visit(n)
    return [steps[n] for n in out]


def _schedule(k: Kernel) -> tuple:
    """What two kernels must share to run as one: kind, iteration space and, for column
    reductions, how many leading dims are rows (a sum over [0, 1] and one over [0] of the
    same [4, 16, 16] split it differently: merged, one of them summed the wrong rows and
    wrote past its output)."""
    rows = (frozenset(len(red_axes(op) or ()) for op in k.reductions)
            if k.kind == "column" else frozenset())
    return k.kind, tuple(k.space), rows


def _merge_horizontally(steps: list[Step], kinds: tuple[str, ...]) -> list[Step]:
    """Merge independent kernels of the same kind (one of ``kinds``) over the same space.

    Saves a pass over shared inputs and a kernel launch (e.g. two column reductions of the
    same values become one kernel)."""
    reach = _step_reachability(steps)
    merged: list[Step] = []
    absorbed: set[int] = set()
    for n, s in enumerate(steps):
        if n in absorbed:
            continue
        if isinstance(s, Kernel) and s.kind in kinds:
            group = [n]
            for m in range(n + 1, len(steps)):
                t = steps[m]
                if (m in absorbed or not isinstance(t, Kernel)
                        or _schedule(t) != _schedule(s)):
                    continue
                if any(reach[g] >> m & 1 or reach[m] >> g & 1 for g in group):
                    continue
                if t.split_concat is not None and any(
                        steps[g].split_concat is not None for g in group):  # type: ignore[union-attr]
                    continue  # one split inner loop per kernel
                if not all(_maps_agree(steps[g], t) for g in group):  # type: ignore[arg-type]
                    continue
                group.append(m)
            if len(group) > 1:
                s = _merge([steps[g] for g in group])  # type: ignore[misc]
                absorbed.update(group)
                _contract(reach, group)
        merged.append(s)
    return merged


def _maps_agree(a: Kernel, b: Kernel) -> bool:
    """Whether every value both kernels compute follows one dim map in both: a merged
    kernel has one map per value. Independent kernels share only duplicable values (an
    iota, a constant broadcast), which each computed under its own map: an iota read
    directly by one and reversed by the other must stay in two kernels."""
    return all(a.maps[v] == b.maps[v] for v in a.maps.keys() & b.maps.keys())


def _fuse_column_epilogues(steps: list[Step], graph: Graph) -> list[Step]:
    """Fold column-sum kernels into the row or loop kernel over the same space that produces
    what they sum (stitching a column reduction onto a row schedule).

    Backward passes sum over the rows what a row or loop kernel has just computed or read:
    LayerNorm's dgamma and dbeta, a bias gradient next to the elementwise gradient. As two
    kernels, the second reads back values the first wrote for it (often only for it) or read
    already; folded together, every block of rows accumulates its own partial column sums
    while its last inner loop runs, and the partials are added once the blocks are done.
    Taken when every reduction of the column kernel sums all dims but the innermost, its
    other inputs exist before the row kernel runs, and values the two share follow the same
    dim map.
    """
    fused_any = False
    while True:  # one fold at a time: positions and reachability change with each
        position = _producer_index(steps)
        reach = _step_reachability(steps)
        for n, col in enumerate(steps):
            if not (isinstance(col, Kernel) and col.kind == "column" and col.rank >= 2):
                continue
            reds = col.reductions
            lead = list(range(col.rank - 1))
            if len(reds) != len(col.outputs) or any(
                    op.opdef.reduction_kind(op) != "sum" or red_axes(op) != lead
                    for op in reds):
                continue
            h = _epilogue_host(steps, n, col, position, reach)
            if h is not None:
                merged = _with_epilogue(steps[h], col)  # type: ignore[arg-type]
                steps = _order_steps([merged if m == h else s for m, s in enumerate(steps)
                                      if m != n])
                fused_any = True
                break
        else:
            break
    if fused_any:
        _drop_unread_outputs(steps, graph)
    return steps


def _epilogue_host(steps: list[Step], n: int, col: Kernel, position: dict[int, int],
                   reach: list[int]) -> int | None:
    """Index of the row/loop kernel that can take column kernel ``steps[n]`` as epilogue:
    the nearest one writing a value it sums, else the nearest one reading one (before or
    after it in the order: a sibling may run later)."""
    for siblings in (False, True):
        h = _epilogue_host_among(steps, n, col, position, reach, siblings)
        if h is not None:
            return h
    return None


def _epilogue_host_among(steps: list[Step], n: int, col: Kernel, position: dict[int, int],
                         reach: list[int], siblings: bool) -> int | None:
    for h in sorted((m for m in range(len(steps)) if m != n), key=lambda m: abs(m - n)):
        host = steps[h]
        if (not isinstance(host, Kernel) or host.kind not in ("row", "loop")
                or tuple(host.space) != tuple(col.space)):
            continue
        if host.split_concat is not None:
            continue
        produced = {id(v) for v in host.outputs}
        sums = {id(r) for op in host.column_epilogue for r in op.results}
        if any(id(v) in sums for v in col.inputs):
            continue  # the host's column sums exist only after its loop, not during it
        col_maps, host_maps = _read_maps(col), _read_maps(host)
        if not any(id(v) in produced or (siblings and v in host_maps and
                                         host_maps[v] == col_maps.get(v))
                   for v in col.inputs):
            continue  # nothing to save: it neither writes nor reads what the column sums
        if h < n:  # the column kernel's other inputs must exist before the host runs
            if any(id(v) not in produced and position.get(id(v), -1) >= h
                   for v in col.inputs):
                continue
        elif reach[h] >> n & 1:
            continue  # a later host that needs the sums (or what they feed) cannot make them
        # what the column kernel reads from the host, it must read in the host's layout
        ok = all(host.maps.get(op.operands[i]) == m for (op, i), m in col.reads.items()
                 if id(op.operands[i]) in produced)
        # values in both kernels (duplicated constants) must follow the same dims
        shared = col.maps.keys() & host.maps.keys()
        if ok and all(col.maps[v] == host.maps[v] for v in shared):
            return h
    return None


def _read_maps(k: Kernel) -> dict[Value, DimMap]:
    """value -> the dim map ``k`` reads it with (when every read agrees)."""
    out: dict[Value, DimMap] = {}
    clash: set[Value] = set()
    for (op, i), m in k.reads.items():
        v = op.operands[i]
        if out.setdefault(v, m) != m:
            clash.add(v)
    for v in clash:
        del out[v]
    return out


def _with_epilogue(host: Kernel, col: Kernel) -> Kernel:
    """``host`` also computing ``col``'s column sums; values it writes are no longer read
    back by them (they come from the host's own loop)."""
    k = host.copy()
    inside = {id(r) for op in host.ops for r in op.results}
    seen = {id(op) for op in k.ops}
    for op in col.ops:
        if id(op) not in seen:
            seen.add(id(op))
            k.ops.append(op)
        for i, v in enumerate(op.operands):
            key = (op, i)
            if key in col.reads and id(v) not in inside:
                k.reads[key] = col.reads[key]
                if key in col.maybe_broadcast:
                    k.maybe_broadcast[key] = col.maybe_broadcast[key]
                if v not in k.inputs:
                    k.inputs.append(v)
    for v, m in col.maps.items():
        k.maps.setdefault(v, m)
    k.column_epilogue += col.reductions
    k.outputs += col.outputs
    k.ops = _topo(k.ops)
    return k


def _drop_unread_outputs(steps: list[Step], graph: Graph) -> None:
    """Outputs that no step reads any more and the graph does not return are not written
    (a kernel keeps at least one)."""
    wanted = {id(v) for v in graph.outputs}
    for s in steps:
        wanted |= {id(v) for v in step_values(s)[0]}
    for s in steps:
        if isinstance(s, Kernel) and len(s.outputs) > 1:
            epilogue = {id(op.results[0]) for op in s.column_epilogue}
            kept = [o for o in s.outputs if id(o) in wanted or id(o) in epilogue]
            s.outputs = kept or s.outputs[:1]


def _merge_vertically(steps: list[Step], graph: Graph) -> list[Step]:
    """Fold a loop kernel into the row or loop kernel that writes what it reads, when
    planning from the graph's end split them: the consumer covers the producer's space (its
    full rows) or its rows (one value per row, e.g. a keepdim statistic [B, S, 1] computed
    from a row kernel's sums over [B, S, H], such as the rstd / H a LayerNorm forward saves
    for its backward). The consumer's values are then computed in the producer's loops;
    what the producer wrote only for it is no longer written. Repeated to a fixpoint."""
    while True:
        producer = _producer_index(steps)
        reach = _step_reachability(steps)
        for c, cons in enumerate(steps):
            if not (isinstance(cons, Kernel) and cons.kind == "loop" and not cons.reductions
                    and cons.split_concat is None and not cons.column_epilogue):
                continue
            sources = sorted({producer[id(v)] for v in cons.inputs if id(v) in producer})
            for p in sources:
                merged = _absorb_consumer(steps[p], cons, p, sources, reach, producer)
                if merged is not None:
                    steps = [merged if n == p else s for n, s in enumerate(steps) if n != c]
                    steps = _order_steps(steps)
                    _drop_unread_outputs(steps, graph)
                    break
            else:
                continue
            break
        else:
            return steps


def _absorb_consumer(prod: Step, cons: Kernel, p: int, sources: list[int], reach: list[int],
                     producer: dict[int, int]) -> Kernel | None:
    """``prod`` also computing loop kernel ``cons`` (see _merge_vertically), or None."""
    if not (isinstance(prod, Kernel) and prod.kind in ("row", "loop") and prod.rank >= 1
            and prod.split_concat is None):
        return None
    # cons may not depend on prod through another step (that step must run in between)
    if any(q != p and reach[q] >> p & 1 for q in sources):
        return None
    to_prod = _consumer_dims(cons, prod)
    if to_prod is None:
        return None

    def translate(m: DimMap) -> DimMap | None:
        out: list[Entry] = []
        for e in m:
            if e is None:
                out.append(None)
            elif isinstance(e, int) and not isinstance(e, bool):
                out.append(to_prod[e])
            else:
                return None  # affine / indirect entries: keep the kernels apart
        return tuple(out)

    maps: dict[Value, DimMap] = {}
    for v, m in cons.maps.items():
        t = translate(m)
        if t is None or (v in prod.maps and prod.maps[v] != t):
            return None
        maps[v] = t
    inside = {id(r) for op in prod.ops for r in op.results}
    reads: dict[tuple[Op, int], DimMap] = {}
    for (op, i), m in cons.reads.items():
        t = translate(m)
        if t is None:
            return None
        reads[(op, i)] = t
    for (op, i), t in list(reads.items()):
        v = op.operands[i]
        if id(v) in inside:
            if prod.maps.get(v) != t:
                return None  # read at other points than the producer computes it
            del reads[(op, i)]
    k = prod.copy()
    seen = {id(op) for op in k.ops}
    k.ops += [op for op in cons.ops if id(op) not in seen]
    k.ops = _topo(k.ops)
    k.maps.update(maps)
    k.reads.update(reads)
    for key, maybe in cons.maybe_broadcast.items():
        if key in reads:
            k.maybe_broadcast[key] = {j: to_prod[d] for j, d in maybe.items()}
    for v in cons.inputs:
        if id(v) not in inside and v not in k.inputs:
            k.inputs.append(v)
    k.outputs += [o for o in cons.outputs if o not in k.outputs]
    return k


def _consumer_dims(cons: Kernel, prod: Kernel) -> list[int | None] | None:
    """For each dim of ``cons``'s space, the ``prod`` dim it is (None for a static unit dim
    read at index 0), when ``cons`` covers ``prod``'s space or its rows; else None."""
    if tuple(cons.space) == tuple(prod.space):
        return list(range(prod.rank))
    rows = tuple(prod.space[:-1])
    if prod.rank < 2 or not rows:
        return None
    out: list[int | None] = []
    nxt = 0
    for d in cons.space:
        if d.is_const and d.value == 1 and (nxt >= len(rows) or rows[nxt] != d):
            out.append(None)
        elif nxt < len(rows) and rows[nxt] == d:
            out.append(nxt)
            nxt += 1
        else:
            return None
    return out if nxt == len(rows) else None


def _contract(reach: list[int], group: list[int]) -> None:
    """Update reachability after merging ``group`` into one kernel: the members now depend
    on what any of them depended on, and whatever depended on one member depends on all.

    Without this, two merges that are each acyclic can close a cycle together (C reads A,
    B is read by D: merging {A, B} and then {C, D} makes the two kernels read each other).
    """
    bits = 0
    for g in group:
        bits |= 1 << g
    closure = bits
    for g in group:
        closure |= reach[g]
    for x in range(len(reach)):
        if x in group:
            reach[x] = closure & ~bits
        elif reach[x] & bits:
            reach[x] |= closure


def _step_reachability(steps: list[Step]) -> list[int]:
    """reach[n] = bitmask of steps that step n depends on, transitively."""
    producer = _producer_index(steps)
    reach = [0] * len(steps)
    for n, s in enumerate(steps):  # steps are topologically ordered
        for v in step_values(s)[0]:
            p = producer.get(id(v))
            if p is not None and p != n:
                reach[n] |= reach[p] | (1 << p)
    return reach


def _merge(kernels: list[Kernel]) -> Kernel:
    first = kernels[0]
    k = Kernel(id=0, kind=first.kind, space=first.space)
    seen: set[int] = set()
    for part in kernels:
        for op in part.ops:
            if id(op) not in seen:
                seen.add(id(op))
                k.ops.append(op)
        k.maps.update(part.maps)
        k.reads.update(part.reads)
        k.maybe_broadcast.update(part.maybe_broadcast)
        k.split_concat = k.split_concat or part.split_concat
        k.column_epilogue += part.column_epilogue
        for v in part.inputs:
            if v not in k.inputs:
                k.inputs.append(v)
        k.outputs.extend(part.outputs)
    k.ops = _topo(k.ops)
    return k


def _root_space(op: Op) -> tuple[str, tuple, DimMap]:
    """Kernel kind, iteration space and the root's dim map for a kernel rooted at ``op``."""
    axes = red_axes(op)
    if axes is None:
        shape = op.results[0].shape
        return "loop", shape, tuple(range(len(shape)))
    x = op.operands[0]
    n = x.rank
    if not axes:
        raise NativeUnsupported("reduce over no axes should have been canonicalized away")
    if axes == [n - 1]:
        return "row", x.shape, tuple(range(n - 1))
    if (axes == list(range(len(axes))) and len(axes) < n
            and op.opdef.reduction_kind(op) is not None):
        # column reduction: the kept trailing dims are the kernel's columns; the reduced
        # leading dims are flattened into rows
        return "column", x.shape, tuple(range(len(axes), n))
    if len(axes) == 1:
        # row schedule over a middle axis: it becomes the kernel's innermost dim (strided)
        a = axes[0]
        space = tuple(d for j, d in enumerate(x.shape) if j != a) + (x.shape[a],)
        return "row", space, tuple(range(n - 1))
    raise NativeUnsupported(f"reduce over axes {axes} of a rank-{n} tensor: split it into "
                            f"single-axis reductions first (lower.split_reductions)")


def _grow_kernel(root: Op, users: dict[Value, list[Op]], needed: set[int],
                 ancestors: _Ancestry, fused: set[int] = frozenset(),
                 banned: set[int] = frozenset()) -> Kernel:
    """Absorb producers to a fixpoint: an op joins once every user of its result has joined
    and all of them index it the same way; then record how the kernel reads the rest."""
    axes = red_axes(root)
    if axes is not None and axes == list(range(root.operands[0].rank)):
        kind, space, root_map = _full_reduction(root)
    else:
        kind, space, root_map = _root_space(root)
    k = Kernel(id=0, kind=kind, space=space)
    k.maps[root.results[0]] = root_map
    k.outputs.append(root.results[0])
    members: dict[int, Op] = {id(root): root}
    changed = True
    while changed:
        changed = False
        for op in list(members.values()):
            for v in (() if op.opdef.has_trait("shape") else op.operands):
                p = v.producer
                if p is None or id(p) in members:
                    continue
                if id(p) in fused and not _duplicable(p):
                    continue  # another kernel already writes it: read it, never write twice
                if (op.opdef.guarded and not (_duplicable(p) and not v.rank)
                        and not _splits_inner_loop(k, op)):
                    continue  # a guarded operand is only read where in range: materialize
                if op.opdef.indirect and v is op.operands[0]:
                    continue  # read at data-dependent indices: must be in memory
                need = _agreed_map(k, v, users, members)
                if need is None:
                    continue
                verdict = _can_join(k, p, v, need, users, needed, members, root, ancestors,
                                    banned)
                if verdict and op.opdef.split_axis(op) is not None and not _duplicable(p):
                    k.split_concat = op
                if verdict:
                    members[id(p)] = p
                    k.maps[v] = need
                    if verdict == "output":
                        k.outputs.append(v)
                    changed = True
    k.ops = _topo(list(members.values()))
    for op in k.ops:
        for i, v in enumerate(() if op.opdef.has_trait("shape") else op.operands):
            if v.producer is not None and id(v.producer) in members:
                continue
            need, maybe = operand_map(op, i, k.maps[op.results[0]], k.rank)
            k.reads[(op, i)] = need
            mapped = {j: d for j, d in enumerate(need) if isinstance(d, int) and j not in maybe
                      and not op.opdef.guarded and not (op.opdef.indirect and i == 0)}
            if any(v.shape[j] != k.space[d] for j, d in mapped.items()):
                raise NativeUnsupported(f"{op.name} reads operand #{i} with dims that do "
                                        f"not follow the kernel space")
            if maybe:
                k.maybe_broadcast[(op, i)] = maybe
            if v not in k.inputs:
                k.inputs.append(v)
    _check_kernel(k)
    return k


def _agreed_map(k: Kernel, v: Value, users: dict[Value, list[Op]], members: dict[int, Op]
                ) -> DimMap | None:
    """The one dim map every member user needs for ``v`` (None if they disagree or one may
    be an implicit broadcast)."""
    need: DimMap | None = None
    for u in users.get(v, []):
        if id(u) not in members or u.opdef.has_trait("shape"):
            continue  # a member reading only v's shape puts no demand on v's layout
        for i, w in enumerate(u.operands):
            if w is not v:
                continue
            m, maybe = operand_map(u, i, k.maps[u.results[0]], k.rank)
            if maybe or (need is not None and m != need):
                return None
            need = m
    return need


def _full_reduction(root: Op) -> tuple[str, tuple, DimMap]:
    """reduce over every axis: a single row over the flattened operand."""
    x = root.operands[0]
    if x.rank != 1:
        raise NativeUnsupported("full reductions of rank > 1 need a reshape to rank 1 first")
    return "row", x.shape, ()


def _dims_agree(v: Value, m: DimMap, space: tuple) -> bool:
    """Every directly mapped dim of ``v`` is provably the kernel dim it follows."""
    return all(not isinstance(d, int) or v.shape[j] == space[d] for j, d in enumerate(m))


def _duplicable(p: Op) -> bool:
    """Ops recomputed in every kernel that reads them rather than materialized."""
    if p.opdef.fusion == Fusion.DUPLICABLE:
        return True
    src = p.operands[0].producer if _is_broadcast(p) else None
    return src is not None and src.opdef.fusion == Fusion.DUPLICABLE


def _splits_inner_loop(k: Kernel, op: Op) -> bool:
    """Whether ``op``, a concatenate, may have its operands computed inside kernel ``k``.

    A loop kernel whose innermost dim is the concatenation axis runs one inner loop per
    operand (loop splitting at the boundaries), each computing only its own operand: no
    per-element select chain, no materialized operands. One such concatenate per kernel;
    reductions cannot join it afterwards (their phases run over the whole row).
    """
    axis = op.opdef.split_axis(op)
    if axis is None or k.kind != "loop" or not k.rank:
        return False
    if k.split_concat is not None and k.split_concat is not op:
        return False
    m = k.maps.get(op.results[0])
    return m is not None and m[axis] == k.rank - 1


def _split_read_concat(k: Kernel) -> None:
    """Split ``k``'s inner loop at the boundaries of a concatenate whose operands it reads
    from memory (or recomputes as duplicable ops), when no operand is computed in the
    kernel and the boundaries are static.

    Fusion splits the inner loop when it computes a concatenate's operands in place; a
    concatenate of materialized operands (dQ, dK and dV from the fused attention gradient,
    concatenated into d(QKV) and summed for the bias gradient) otherwise runs as a select
    chain per element, three guarded loads the C compiler cannot vectorize: 3 ms for
    [612, 768] floats on one thread (AMD EPYC, AVX2), against well under a millisecond for
    one vectorized loop per operand. Taken after every merge, so it changes no fusion
    decision; the boundaries are static, so the kernel's innermost extent is too and it
    had no vector-multiple version to lose."""
    if k.split_concat is not None or k.kind != "loop" or not k.rank:
        return
    for op in k.ops:
        axis = op.opdef.split_axis(op)
        if axis is None or not _splits_inner_loop(k, op):
            continue
        if all(w.shape[axis].is_const for w in op.operands):
            k.split_concat = op
        return  # one concatenate along the inner dim decides (several: the select chain)


def _can_join(k: Kernel, p: Op, v: Value, need: DimMap, users: dict[Value, list[Op]],
              needed: set[int], members: dict[int, Op], root: Op, ancestors: _Ancestry,
              banned: set[int] = frozenset()) -> bool | str:
    """False, True (fuse) or "output" (fuse and also write ``v``: multi-output fusion)."""
    if not _fusible(p) or not _dims_agree(v, need, k.space):
        return False
    for j, w in enumerate(() if p.opdef.has_trait("shape") else p.operands):
        q = w.producer
        if q is not None and id(q) in members:
            # a value the kernel already computes under one index map (an iota joins with
            # its first reader) cannot serve a reader that indexes it another way
            m, maybe = operand_map(p, j, need, k.rank)
            if maybe or m != k.maps.get(w):
                return False
    if _duplicable(p):
        return not _is_constant(p) or not p.results[0].rank
    if p.opdef.has_trait("math_call") and _recomputed_per_outer_index(need, k.rank):
        return False
    becomes_row = False
    if _is_reduction(p):
        if k.split_concat is not None:
            return False
        n = k.rank
        axes = red_axes(p)
        if k.kind == "column" or n == 0 or axes != [p.operands[0].rank - 1]:
            return False
        if need != tuple(range(n - 1)):  # rows of the result must be the kernel's rows
            return False
        if p.operands[0].shape[-1] != k.space[-1]:  # the reduced dim is the kernel's column
            return False
        becomes_row = True
    external = [u for u in users.get(v, []) if id(u) not in members]
    verdict: bool | str = True
    if id(v) in needed or external:
        # written by this kernel for its other readers: only in a layout the kernel writes
        # (full rows, or one value per row in a row kernel), and only if no other reader
        # is an ancestor of the kernel (that would make a cycle)
        dense = _without_unit_dims(v, need)
        # one value per row: a row kernel's statistics, or a per-row value a loop kernel
        # computes on its way to the reductions that will make it a row kernel (a keepdim
        # statistic saved for the backward pass)
        row_level = ((k.kind == "row" or becomes_row or k.rank >= 2)
                     and dense == tuple(range(k.rank - 1)))
        if k.kind == "column" or not (dense == tuple(range(k.rank)) or row_level):
            return False
        if any(ancestors.depends_on(root, u) for u in external):
            return False
        if id(v) in banned:  # writing it here closed a cycle with another kernel
            return False
        verdict = "output"
    if becomes_row:
        k.kind = "row"
    return verdict


def _recomputed_per_outer_index(need: DimMap, rank: int) -> bool:
    """Would a value the kernel reads through dim map ``need`` be computed again for
    every index of a kernel dim it does not vary along, outside the dims it does?

    A math function (exp, cos, erf: tens of instructions per element) fused through a
    broadcast along such a dim runs once per broadcast index: Llama's rotary embedding
    takes cos and sin of a [B, S, D] table and applies them to [B, heads, S, D] queries
    and keys, so fused they ran heads times over (1.3 ms of a 4-head forward at S = 128,
    AVX2). Computed once in their own kernel, they are read back instead. A dim missing
    only inside the ones the value varies along costs nothing: a row kernel's per-row
    value (log of a softmax sum) is computed once per row, and an invariant of the
    innermost loop is hoisted out of it."""
    used = [d for d in need if isinstance(d, int)]
    return bool(used) and any(d not in used for d in range(max(used)))


def _without_unit_dims(v: Value, need: DimMap) -> DimMap | None:
    """``need`` without the entries of ``v``'s static size-1 dims, provided those read index
    0 (None): a value laid out like the kernel but for unit dims (a keepdim statistic
    [B, S, 1] of a row kernel over [B, S, H]) is written with the same offsets."""
    out = []
    for d, e in zip(v.shape, need):
        if d.is_const and d.value == 1 and e is None:
            continue
        out.append(e)
    return tuple(out)


def _topo(ops: list[Op]) -> list[Op]:
    ids = {id(op) for op in ops}
    seen: set[int] = set()
    out: list[Op] = []

    def visit(op: Op) -> None:
        if id(op) in seen:
            return
        seen.add(id(op))
        for v in op.operands:
            if v.producer is not None and id(v.producer) in ids:
                visit(v.producer)
        out.append(op)

    for op in ops:
        visit(op)
    return out


def _check_kernel(k: Kernel) -> None:
    """Row kernels reduce the innermost dim only; column kernels write only reductions."""
    n = k.rank
    for op in k.reductions:
        m = k.maps.get(op.operands[0])
        if k.kind == "row" and op is not k.ops[-1] and m is not None and m[-1] != n - 1:
            raise NativeUnsupported("row kernel with a non-innermost reduction")
    if k.kind == "column" and any(o.producer is None
                                  or o.producer.opdef.reduction_kind(o.producer) is None
                                  for o in k.outputs):
        raise NativeUnsupported("column kernels only write their reductions")
