"""From a PIR program to clusters of supported ops, each lowered to a core graph.

Steps, all on the program's global block (:class:`~disc_paddle.program.ProgramView`):

1. **Verdicts in context.** One pass over every node in program order lowers what the
   converter table supports into a single scratch core graph, so known values (shapes)
   and symbolic dims flow exactly as they will inside clusters. A value that enters the
   program gets a fresh symbol per -1 dim, unless the caller knows its dims (a backward
   program's inputs are the forward program's values: ``seeds`` by name, so both programs
   speak of the same sizes). A node the table refuses gets a reason; its outputs re-enter
   as fresh inputs.
2. **Clustering** with the shared core algorithm: no in-place op (PIR names them with a
   trailing ``_``), no collective (an op with a ``ring_id``: communication is Paddle's,
   reported as ``framework_op``), no op with regions (control flow), no op the user
   excluded, no cycles (over data edges and the order in-place writes impose:
   :func:`~disc_paddle.program.inplace_order`), at least ``min_cluster_size`` ops.
3. **Lowering** each cluster on its own: inputs typed with the symbolic dims of step 1
   (renamed ``s0, s1, ...`` in order, so equal clusters share one compilation), constants
   and known shapes inlined, outputs the values read outside.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from disc_core.bridge.convert import Expected, as_results, check_count, check_result, run_converter
from disc_core.bridge.known import symbols_of
from disc_core.bridge.verdict import precheck, trial
from disc_core.clustering import ClusteringResult, Support, find_clusters
from disc_core.ir import Graph, Value
from disc_core.report import ReasonCode
from disc_core.symbolic import Expr

from .converters import CONVERTERS
from .converters.registry import INPLACE
from .lowering import ConversionError, Known, Lowering, Vector, core_dtype, dtype_name, vid
from .program import Node, ProgramView, is_vector

__all__ = ["Analysis", "LoweredCluster", "analyze", "convert_node", "lower_cluster",
           "source_names"]

_symbol_ids = itertools.count()


def _fresh() -> Expr:
    return Expr.sym(f"s{next(_symbol_ids)}")


@dataclass
class Analysis:
    """Step 1 and 2's results for one program."""

    view: ProgramView
    verdicts: dict[Node, Support]
    types: dict[str, Value]  # value id -> its value in the scratch graph (type source)
    known: dict[str, np.ndarray]
    clustering: ClusteringResult
    nodes: list[Node]  # what was clustered and is reported
    names: dict[str, str] = field(default_factory=dict)  # value id -> program name

    def known_by_name(self) -> dict[str, np.ndarray]:
        """The compile-time values of named values (a forward program's constants and
        shapes that its backward reads as arguments: ``mean_grad``'s axes, ``slice_grad``'s
        starts)."""
        return {name: self.known[i] for i, name in self.names.items() if i in self.known}

    def dims_by_name(self) -> dict[str, tuple[Expr, ...]]:
        """The symbolic dims of every named value (inputs, parameters, handed-out values):
        what a later program that reads them by name (the backward) seeds with."""
        out: dict[str, tuple[Expr, ...]] = {}
        for i, name in self.names.items():
            v = self.types.get(i)
            if v is not None:
                out[name] = tuple(v.shape)
        return out


def source_names(view: ProgramView) -> dict[str, str]:
    """value id -> name, for the values a program names: ``pd_op.data`` inputs, parameters,
    block arguments (a backward program's inputs) and ``builtin.shadow_output`` values."""
    names: dict[str, str] = {}
    for op in view.block.ops:
        n = op.name()
        attrs = op.attrs() if n in ("pd_op.data", "builtin.parameter",
                                    "builtin.shadow_output") else {}
        if n == "pd_op.data":
            names[vid(op.result(0))] = attrs.get("name", "")
        elif n == "builtin.parameter":
            names[vid(op.result(0))] = attrs.get("parameter_name", "")
        elif n == "builtin.shadow_output":
            names.setdefault(vid(op.operand_source(0)), attrs.get("output_name", ""))
    try:
        for name, v in view.block.kwargs().items():
            names[vid(v)] = name
    except (AttributeError, RuntimeError):
        pass
    return names


def _pre_verdict(node: Node, excluded: frozenset[str]) -> Support | None:
    """Reasons known before any lowering; None when the node deserves a trial."""
    name = node.name
    if name in excluded or name.removeprefix("pd_op.") in excluded:
        return Support(False, f"{name} excluded by the user", code=ReasonCode.EXCLUDED_BY_USER)
    if node.op.has_attr("ring_id"):
        # every Paddle communication op (all_reduce_, c_allreduce_sum_, all_gather,
        # broadcast_, send_v2 ...) names its communicator ring: collectives run in Paddle
        return Support(False, f"{name} is a collective (communication stays with Paddle)",
                       code=ReasonCode.FRAMEWORK_OP)
    if node.op.num_regions():
        return Support(False, f"{name} is control flow (stays with Paddle)",
                       code=ReasonCode.NO_CONVERTER)
    if name.endswith("_") and not name.endswith("__") and CONVERTERS.lookup(name) is None:
        # an in-place op whose converter is registered under its own name knows when
        # nothing needs writing back (batch_norm_ in test mode); the others never cluster
        return Support(False, f"{name} works in place (stays with Paddle)",
                       code=ReasonCode.NO_CONVERTER)
    dtypes = []
    for v in list(node.inputs) + list(node.outputs):
        if not v.initialized() or is_vector(v):
            continue
        if not v.is_dense_tensor_type():
            return Support(False, f"{name} reads or makes a {v.type()}",
                           code=ReasonCode.NO_CONVERTER)
        dtypes.append(int(v.dtype))
    if CONVERTERS.lookup(name) is not None:
        from .lowering import PADDLE_DTYPES

        for d in dtypes:
            if d not in PADDLE_DTYPES:
                return Support(False, f"{name} on {dtype_name(d)}",
                               code=ReasonCode.UNSUPPORTED_DTYPE)
    keyed = dtypes[:1] if not node.inputs else [int(node.inputs[0].dtype)] \
        if node.inputs[0].is_dense_tensor_type() else []
    return precheck(CONVERTERS, name, name, keyed, node=node.op, dtype_name=dtype_name)


def convert_node(ctx: Lowering, node: Node) -> None:
    """Run ``node``'s converter in ``ctx`` and record its outputs (values, known values,
    vector elements). Raises ConversionError (or a core VerifyError) when it cannot."""
    op = node.op
    results = as_results(run_converter(CONVERTERS, node.name, ctx, op))
    check_count(node.name, results, op.num_results())
    splits = iter(node.splits)
    for r, out in zip(op.results(), results):
        if out is None:
            continue  # an output the converter does not compute (unset, or unread)
        if isinstance(out, Vector):
            if not is_vector(r):
                raise ConversionError(f"{node.name}: a vector for a tensor result")
            split = next(splits, None)
            if split is None:
                ctx.vectors[vid(r)] = out.items
                continue
            if split.num_results() != len(out.items):
                raise ConversionError(f"{node.name}: {len(out.items)} vector elements for "
                                      f"{split.num_results()} results")
            for elem, item in zip(split.results(), out.items):
                _record(ctx, node.name, elem, item)
            continue
        if isinstance(out, Known):
            if r.is_dense_tensor_type() and len(r.shape) != out.value.ndim:
                raise ConversionError(f"{node.name}: folded a rank-{out.value.ndim} value "
                                      f"for a rank-{len(r.shape)} result")
            ctx.known_values[vid(r)] = out.value
            continue
        _record(ctx, node.name, r, out)


def _record(ctx: Lowering, what: str, r: Any, v: Value) -> None:
    """A converter's result must agree with the PIR type (static sizes only: -1 says
    nothing, and DISC may know such a dim as a symbol)."""
    dims = tuple(None if d < 0 else Expr.const(d) for d in r.shape)
    check_result(what, v, Expected(core_dtype(r.dtype), dims, exact=False), "Paddle")
    ctx.values[vid(r)] = v


def _ensure_inputs(ctx: Lowering, node: Node, seeds: Mapping[str, tuple[Expr, ...]],
                   names: Mapping[str, str]) -> None:
    for v in node.inputs:
        if ctx.has(v) or is_vector(v):
            continue
        dims = seeds.get(names.get(vid(v), ""))
        if dims is not None and len(dims) != len(v.shape):
            dims = None
        ctx.add_pir_input(v, dims)


def analyze(program: Any, *, min_cluster_size: int, excluded_ops: frozenset[str] = frozenset(),
            seeds: Mapping[str, tuple[Expr, ...]] | None = None,
            known_seeds: Mapping[str, np.ndarray] | None = None,
            outputs: Iterable[Any] = ()) -> Analysis:
    """Verdicts for every node (in context) and the clustering. ``seeds``: dims of named
    values known from an earlier program (see the module docstring); ``outputs``: values
    the caller reads besides the program's ``shadow_output`` ones (fetched values)."""
    view = ProgramView(program)
    view.program_outputs.update(vid(v) for v in outputs)
    names = source_names(view)
    seeds = seeds or {}
    ctx = Lowering("scratch", _fresh)
    for v in view.sources:
        k = (known_seeds or {}).get(names.get(vid(v), ""))
        if k is not None and v.initialized() and v.is_dense_tensor_type() and \
                tuple(k.shape) == tuple(v.shape):
            ctx.known_values[vid(v)] = k
        if v.initialized() and v.is_dense_tensor_type() and vid(v) not in ctx.values:
            dims = seeds.get(names.get(vid(v), ""))
            if dims is not None and len(dims) != len(v.shape):
                dims = None
            try:
                ctx.add_pir_input(v, dims)
            except ConversionError:
                pass  # a dtype DISC lacks: its readers fall back
    dead = view.dead()
    verdicts: dict[Node, Support] = {}
    for node in view.nodes:
        pre = _pre_verdict(node, excluded_ops)
        if pre is not None:
            verdicts[node] = pre
            continue
        verdicts[node] = trial(node.name, lambda node=node: (
            _ensure_inputs(ctx, node, seeds, names), convert_node(ctx, node)))
        if not verdicts[node].supported:
            for r in node.outputs:  # its results re-enter as fresh inputs
                if r.initialized() and r.is_dense_tensor_type() and not ctx.has(r):
                    try:
                        ctx.add_pir_input(r)
                    except ConversionError:
                        pass
    clustering = find_clusters(view.nodes, view.edges(), verdicts,
                               min_cluster_size=min_cluster_size, never_cluster=dead)
    nodes = [n for n in view.nodes if n not in dead]
    return Analysis(view, verdicts, ctx.values, ctx.known_values, clustering, nodes, names)


@dataclass
class LoweredCluster:
    """A cluster as a core graph plus how it connects to the program.

    ``inputs``: PIR values fed to the graph's inputs, in order. ``outputs``: the member
    results read outside the cluster; ``output_index[i]`` is the graph output that gives
    ``outputs[i]``, or None when that value is one of the inputs passed through
    (``passthrough[i]`` names it)."""

    graph: Graph
    members: list[Node]
    inputs: list[Any]
    outputs: list[Any]
    output_index: list[int | None]
    passthrough: dict[int, Any] = field(default_factory=dict)
    #: (position in ``outputs``, the operand an in-place member updates with it)
    writebacks: list[tuple[int, Any]] = field(default_factory=list)

    @property
    def key(self) -> str:
        return hashlib.sha256(str(self.graph).encode()).hexdigest()[:16]


def lower_cluster(analysis: Analysis, members: list[Node], name: str) -> LoweredCluster:
    """The core graph of one cluster."""
    view = analysis.view
    member_ops = {n.op.id() for n in members}
    for n in members:
        member_ops.update(s.id() for s in n.splits)
    produced = {vid(r) for n in members for r in n.outputs if r.initialized()}
    external: list[Any] = []
    seen: set[str] = set()
    for n in members:
        for v in n.inputs:
            i = vid(v)
            if i not in produced and i not in seen:
                seen.add(i)
                external.append(v)
    # values known at compile time (constants, shapes in terms of bound symbols) are
    # inlined; the others are fed
    fed = [v for v in external if not _static_known(analysis, v)]
    fed_ids = {vid(v) for v in fed}
    bound: set[str] = set()
    for v in fed:
        t = analysis.types.get(vid(v))
        if t is not None and vid(v) not in analysis.known:
            bound |= {d.symbol_name for d in t.shape if d.is_symbol}
    for v in _binders(analysis, external, fed, bound):
        fed.append(v)
        fed_ids.add(vid(v))
        external.append(v)
        t = analysis.types[vid(v)]
        bound |= {d.symbol_name for d in t.shape if d.is_symbol}
    rename: dict[str, Expr] = {}

    def canon(e: Expr) -> Expr:
        for s in sorted(e.free_symbols()):
            rename.setdefault(s, Expr.sym(f"s{len(rename)}"))
        return e.subs(rename) if e.free_symbols() else e

    ctx = Lowering(name)
    inputs: list[Any] = []
    later_known: list[Any] = []
    for v in external:
        k = analysis.known.get(vid(v))
        if vid(v) not in fed_ids:
            ctx.known_values[vid(v)] = k
            continue
        if k is not None and k.dtype == object and \
                symbols_of(e for e in k.reshape(-1) if isinstance(e, Expr)) <= bound:
            later_known.append(v)  # a shape computed outside, in the inputs' sizes
            continue
        t = analysis.types.get(vid(v))
        if t is None:
            dims = [Expr.const(d) if d >= 0 else Expr.sym(f"u{next(_symbol_ids)}")
                    for d in v.shape]
            dtype = core_dtype(v.dtype)
        else:
            dims = [d if d.is_const or d.is_symbol or d.free_symbols() <= bound
                    else Expr.sym(f"u{next(_symbol_ids)}") for d in t.shape]
            dtype = t.dtype
        ctx.add_input(v, dtype, [canon(d) for d in dims])
        inputs.append(v)
    for v in later_known:
        k = analysis.known[vid(v)]
        ctx.known_values[vid(v)] = np.vectorize(
            lambda e: canon(e) if isinstance(e, Expr) else e, otypes=[object])(k)
    for n in members:
        convert_node(ctx, n)
    _check_dims_only(ctx, members, inputs)
    input_values = {id(ctx.values[vid(v)]): v for v in inputs}
    outputs: list[Any] = []
    index: list[int | None] = []
    passthrough: dict[int, Any] = {}
    graph_outputs: list[Value] = []
    slots: dict[int, int] = {}
    writebacks: list[tuple[int, Any]] = []
    for n in members:
        inplace = {vid(n.op.result(ri)): n.op.operand_source(oi)
                   for ri, oi in INPLACE.get(n.name, {}).items()}
        for r in n.outputs:
            target = inplace.get(vid(r)) if r.initialized() else None
            if not r.initialized() or (target is None and
                                       not view.read_outside(r, member_ops)):
                continue
            v = ctx.value(r)
            if target is not None:
                if vid(target) in produced:
                    raise ConversionError(f"{n.name} updates a value the cluster computes "
                                          "in place")
                writebacks.append((len(outputs), target))
            outputs.append(r)
            if id(v) in input_values:
                passthrough[len(outputs) - 1] = input_values[id(v)]
                index.append(None)
                continue
            if id(v) not in slots:
                slots[id(v)] = len(graph_outputs)
                graph_outputs.append(v)
            index.append(slots[id(v)])
    graph = ctx.b.graph
    graph.outputs = graph_outputs
    graph.verify()
    return LoweredCluster(graph, members, inputs, outputs, index, passthrough, writebacks)


def _binders(analysis: Analysis, external: list[Any], fed: list[Any], bound: set[str]
             ) -> list[Any]:
    """Extra inputs that bind the symbols of shapes computed outside the cluster.

    A shape such as ``shape64(x)`` computed in another cluster (or by Paddle) arrives as a
    known value, but converters need it as dims (a ``reshape`` target). When no fed input
    has those dims, a value that has them is fed as well: the module reads its dims, never
    its data. Only values that enter the program (inputs, parameters, a backward program's
    arguments) are taken: nothing computes them, so reading one cannot close a cycle."""
    wanted: set[str] = set()
    for v in external:
        k = analysis.known.get(vid(v))
        if k is not None and k.dtype == object:
            wanted |= symbols_of(e for e in k.reshape(-1) if isinstance(e, Expr))
    wanted -= bound
    if not wanted:
        return []
    taken = {vid(v) for v in fed}
    found: list[Any] = []
    for v in analysis.view.sources:
        if not v.initialized() or vid(v) in taken or vid(v) in analysis.known:
            continue
        t = analysis.types.get(vid(v))
        if t is None:
            continue
        syms = {d.symbol_name for d in t.shape if d.is_symbol} & wanted
        if syms:
            found.append(v)
            wanted -= syms
        if not wanted:
            break
    return found


#: core ops that read their operand's dims, never its data
_DIMS_ONLY = frozenset({"get_dimension_size"})


def _check_dims_only(ctx: Lowering, members: list[Node], inputs: list[Any]) -> None:
    """A value every member reads only for its dims (Paddle's ``no_need_buffer`` operands,
    e.g. ``add_grad``'s ``x``) may reach the launch op without its buffer: the module may
    read its dims, never its data."""
    read: set[int] = set()
    for op in ctx.b.graph.ops:
        if op.name not in _DIMS_ONLY:
            read.update(id(v) for v in op.operands)
    readers: dict[str, list[Any]] = {}
    for n in members:
        for v in n.op.operands_source():
            if v.initialized():
                readers.setdefault(vid(v), []).append(n.op)
    for v in inputs:
        ops = readers.get(vid(v), [])
        if ops and all(op.is_no_need_buffer(v) for op in ops) and \
                id(ctx.values[vid(v)]) in read:
            raise ConversionError(
                f"the cluster reads the data of a value Paddle keeps without its buffer "
                f"(a no_need_buffer operand of {ops[0].name()})")


def _static_known(analysis: Analysis, v: Any) -> bool:
    """A value whose value is a compile-time constant (inlined, not fed)."""
    k = analysis.known.get(vid(v))
    if k is None:
        return False
    if k.dtype != object:
        return True
    return all(not isinstance(e, Expr) or e.is_const for e in k.reshape(-1))
