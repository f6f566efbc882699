"""From a traced concrete function to clusters of supported ops, each lowered and compiled.

Steps, all on the function's graph:

1. **Verdicts in context.** One pass over every op in topological order lowers what the
   converter table supports into a single scratch core graph (:class:`Lowering`), so known
   values (shapes) and symbolic dims flow exactly as they will inside clusters; an op the
   table refuses gets a reason and its outputs re-enter as fresh inputs (a symbol per
   unknown dim).
2. **Clustering** with the shared core algorithm and TF's rules: nothing that reads or
   writes a resource, no stateful op, no control flow or function call, no cluster across
   devices, no cycles (control edges count), at least ``min_cluster_size`` ops.
3. **Lowering and compiling** each cluster on its own: inputs typed with the symbolic dims
   of step 1, constants and known shapes inlined, outputs the values read outside.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from disc_core.bridge.convert import Expected, as_results, check_count, check_result, run_converter
from disc_core.bridge.known import symbols_of
from disc_core.bridge.verdict import precheck, trial
from disc_core.clustering import ClusteringResult, Support, find_clusters
from disc_core.ir import Graph, Value
from disc_core.report import ReasonCode
from disc_core.symbolic import Expr

from .converters import CONVERTERS, Known
from .converters.shapes import fold_integer_op
from .lowering import TF_DTYPES, ConversionError, Lowering, core_dtype

__all__ = ["Analysis", "LoweredCluster", "analyze", "lower_cluster", "overrides_gradient"]

#: ops that are not computation: never clustered, not in the report
NOT_COMPUTE = {"Placeholder", "Const", "NoOp"}
CONTROL_FLOW = {"If", "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase",
                "PartitionedCall", "StatefulPartitionedCall", "For", "RemoteCall",
                "Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond"}

#: cross-device and cross-process communication: tf.distribute's all-reduces, gathers and
#: broadcasts, NCCL, and the send/recv pairs TensorFlow inserts between devices. They
#: stay in TensorFlow by design (DISC compiles the computation between them); most are
#: stateful or read an ordering-token resource anyway, but the verdict should say why
COMMUNICATION_PREFIXES = ("Collective", "Nccl")
COMMUNICATION = frozenset({"_Send", "_Recv", "_HostSend", "_HostRecv", "Send", "Recv",
                           "_XlaSend", "_XlaRecv"})

_symbol_ids = itertools.count()


def is_communication(op_type: str) -> bool:
    """Whether an op type moves data between devices or processes."""
    return op_type in COMMUNICATION or op_type.startswith(COMMUNICATION_PREFIXES)


def topo_order(ops: Iterable[tf.Operation]) -> list[tf.Operation]:
    """Ops in a topological order of data and control edges (creation order breaks ties)."""
    ops = list(ops)
    pos = {op: i for i, op in enumerate(ops)}
    indeg = {op: 0 for op in ops}
    users: dict[tf.Operation, list[tf.Operation]] = {op: [] for op in ops}
    for op in ops:
        preds = {t.op for t in op.inputs} | set(op.control_inputs)
        for p in preds:
            if p in pos:
                indeg[op] += 1
                users[p].append(op)
    import heapq

    ready = [(pos[op], op.name) for op in ops if indeg[op] == 0]
    heapq.heapify(ready)
    by_name = {op.name: op for op in ops}
    out: list[tf.Operation] = []
    while ready:
        _, name = heapq.heappop(ready)
        op = by_name[name]
        out.append(op)
        for u in users[op]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, (pos[u], u.name))
    if len(out) != len(ops):
        raise ValueError("the function graph has a cycle")
    return out


@dataclass
class Analysis:
    """Step 1 and 2's results for one function graph."""

    order: list[tf.Operation]
    verdicts: dict[tf.Operation, Support]
    types: dict[str, Value]  # tensor name -> its value in the scratch graph (type source)
    known: dict[str, np.ndarray]
    clustering: ClusteringResult
    nodes: list[tf.Operation]  # what was clustered and is reported
    #: ops nothing reads (TF prunes them when it runs the function): no cluster output is
    #: kept for them (a dead ``Shape`` of the attention probabilities, left by TF's einsum
    #: gradient, made a training cluster write the [B, H, S, S] tensor out)
    dead: set[tf.Operation] = field(default_factory=set)
    #: argument dims assumed equal, ((tensor, axis), (tensor, axis)) pairs (see analyze)
    equal_dims: list[tuple[tuple[str, int], tuple[str, int]]] = field(default_factory=list)


def _fresh(tensor: str, axis: int) -> Expr:
    return Expr.sym(f"s{next(_symbol_ids)}")


def _uses_resource(op: tf.Operation) -> bool:
    return any(t.dtype in (tf.resource, tf.variant) for t in list(op.inputs) + list(op.outputs))


def _pre_verdict(op: tf.Operation, excluded: frozenset[str]) -> Support | None:
    """Reasons known before any lowering; None when the op deserves a conversion attempt."""
    if op.type in excluded:
        return Support(False, f"{op.type} excluded by the user", code=ReasonCode.EXCLUDED_BY_USER)
    if op.type in CONTROL_FLOW:
        return Support(False, f"{op.type} is control flow or a function call (stays with "
                       "TensorFlow)", code=ReasonCode.NO_CONVERTER)
    if is_communication(op.type):
        return Support(False, f"{op.type} is collective communication or a send/recv "
                       "(stays in TensorFlow by design)", code=ReasonCode.FRAMEWORK_OP)
    if _uses_resource(op):
        # variables, iterators and other resource handles are TensorFlow's state: these
        # ops stay in TensorFlow by design (clusters take the values they read as inputs
        # and hand back the values they write), they are not missing converters
        return Support(False, f"{op.type} reads or writes a resource or variant (stays in "
                       "TensorFlow by design)", code=ReasonCode.FRAMEWORK_OP)
    if op.op_def is not None and op.op_def.is_stateful:
        return Support(False, f"{op.type} is stateful (random numbers, I/O, side effects)",
                       code=ReasonCode.NO_CONVERTER)
    if CONVERTERS.lookup(op.type) is not None:
        for t in list(op.inputs) + list(op.outputs):
            if t.dtype not in TF_DTYPES:
                return Support(False, f"{op.type} on {t.dtype.name}",
                               code=ReasonCode.UNSUPPORTED_DTYPE)
    try:
        key_dtype = op.get_attr("T")
    except (ValueError, TypeError):
        key_dtype = op.inputs[0].dtype if op.inputs else op.outputs[0].dtype \
            if op.outputs else None
    keyed = [key_dtype] if isinstance(key_dtype, tf.DType) else []
    return precheck(CONVERTERS, op.type, op.type, keyed, dtype_name=lambda d: d.name)


def convert_op(ctx: Lowering, op: tf.Operation) -> None:
    """Run ``op``'s converter in ``ctx`` and record its outputs (values or known values).
    Raises ConversionError (or a core VerifyError) when it cannot."""
    folded = fold_integer_op(ctx, op)
    results = as_results(folded if folded is not None
                         else run_converter(CONVERTERS, op.type, ctx, op))
    check_count(op.type, results, len(op.outputs))
    for t, r in zip(op.outputs, results):
        if isinstance(r, Known):
            want = t.shape
            if want.rank is not None and want.rank != r.value.ndim:
                raise ConversionError(f"{op.type}: folded a rank-{r.value.ndim} value for a "
                                      f"rank-{want.rank} output")
            ctx.known_values[t.name] = r.value
            continue
        _check_result(op, t, r)
        ctx.values[t.name] = r


def _check_result(op: tf.Operation, t: tf.Tensor, v: Value) -> None:
    """A converter's result must agree with TensorFlow's static shape and dtype (TF knows
    static sizes only: a dim DISC knows as a symbol is not a mismatch)."""
    dims = None if t.shape.rank is None else tuple(
        None if d is None else Expr.const(d) for d in t.shape.as_list())
    check_result(op.type, v, Expected(core_dtype(t.dtype), dims, exact=False), "TF")


#: ops that stay in TensorFlow (random numbers) whose output shape is their first operand
SHAPED_BY_OPERAND = frozenset({
    "RandomUniform", "RandomStandardNormal", "TruncatedNormal", "RandomUniformInt",
    "StatelessRandomUniform", "StatelessRandomNormal", "StatelessTruncatedNormal",
    "StatelessRandomUniformV2", "StatelessRandomNormalV2", "StatelessTruncatedNormalV2",
    "StatelessRandomUniformIntV2", "StatelessRandomUniformFullIntV2",
})


def _operand_shape(ctx: Lowering, t: tf.Tensor) -> list[Expr] | None:
    """The dims of a random op's output when its shape operand is known (``[s0, 1, 1,
    1]`` for a drop-connect mask of a batch of ``s0``), else None. With fresh symbols
    instead, the mask's batch could not be told equal to the activations', and the
    gradient of their product (BroadcastGradientArgs, then a Sum over axes computed at run
    time) stayed in TensorFlow, splitting EfficientNet's train step at every block."""
    if t.op.type not in SHAPED_BY_OPERAND or not t.op.inputs or t.shape.rank is None:
        return None
    k = ctx.known(t.op.inputs[0])
    if k is None or k.ndim != 1 or len(k) != t.shape.rank:
        return None
    dims = [e if isinstance(e, Expr) else Expr.const(int(e)) for e in k.reshape(-1)]
    for d, n in zip(dims, t.shape.as_list()):
        if n is not None and not (d.is_const and d.value == n):
            return None
    return dims


def _ensure_inputs(ctx: Lowering, op: tf.Operation) -> None:
    for t in op.inputs:
        if not ctx.has(t):
            dims = _operand_shape(ctx, t)
            if dims is None:
                ctx.add_tf_input(t)
            else:
                ctx.add_input(t.name, core_dtype(t.dtype), dims)


def _lower_in_context(ctx: Lowering, op: tf.Operation) -> None:
    """Convert ``op`` in the analysis's scratch context (its inputs become graph inputs
    where no earlier op computed them): the trial whose failure is the op's verdict."""
    _ensure_inputs(ctx, op)
    convert_op(ctx, op)


class _ArgumentDims:
    """The symbols of the analysis, and which argument dims are assumed equal.

    Every unknown dim of a tensor entering the scratch graph gets a fresh symbol; a dim of
    a function argument the analysis has assumed equal to another argument's gets that
    argument's symbol instead (:meth:`assume_equal`, a union-find over (tensor, axis))."""

    def __init__(self, arguments: Iterable[str]):
        self.arguments = set(arguments)
        self.parent: dict[tuple[str, int], tuple[str, int]] = {}
        self._symbols: dict[tuple[str, int], Expr] = {}
        self._origin: dict[str, tuple[str, int]] = {}
        self.new_assumptions = False

    def find(self, key: tuple[str, int]) -> tuple[str, int]:
        while key in self.parent:
            key = self.parent[key]
        return key

    def fresh(self, tensor: str, axis: int) -> Expr:
        root = self.find((tensor, axis))
        sym = self._symbols.get(root)
        if sym is None:
            sym = self._symbols[root] = _fresh(tensor, axis)
            self._origin[sym.symbol_name] = root
        return sym

    def assume_equal(self, a: Expr, b: Expr) -> bool:
        """Record that the dims ``a`` and ``b`` are equal (both must be plain symbols of
        function arguments' dims); whether the assumption was taken."""
        ka = self._origin.get(a.symbol_name) if a.is_symbol else None
        kb = self._origin.get(b.symbol_name) if b.is_symbol else None
        if ka is None or kb is None or ka[0] not in self.arguments or \
                kb[0] not in self.arguments:
            return False
        ra, rb = self.find(ka), self.find(kb)
        if ra != rb:
            self.parent[rb] = ra
            self.new_assumptions = True
        return True

    def equalities(self) -> list[tuple[tuple[str, int], tuple[str, int]]]:
        """The assumed equalities, each argument dim with its representative's."""
        return [(k, self.find(k)) for k in self.parent]


def analyze(graph: tf.Graph, *, min_cluster_size: int,
            excluded_ops: frozenset[str] = frozenset(),
            outputs: Iterable[str] = (), arguments: Iterable[str] = ()) -> Analysis:
    """Verdicts for every op (in context) and the clustering. ``outputs``: the tensors the
    function returns; ops nothing reads (dead code TF prunes itself) are left alone.

    ``arguments``: the names of the function's argument tensors. Where the gradient of a
    broadcast between two of them (``BroadcastGradientArgs``) cannot tell which side
    broadcasts because two independent symbolic dims meet (a loss ``y - target`` of two
    [None, None, d] arguments), the analysis is redone with those dims assumed equal:
    that gradient then reduces nothing, the step is not split around it, and
    :attr:`Analysis.equal_dims` lists what a caller must check per call (a call whose
    argument dims differ there, say a target broadcast from [1, S, d], must run the
    original function)."""
    dims = _ArgumentDims(arguments)
    for _ in range(4):  # each redo may find further equalities (rarely more than one)
        dims.new_assumptions = False
        result = _analyze_once(graph, dims, min_cluster_size, excluded_ops, outputs)
        if not dims.new_assumptions:
            break
    result.equal_dims = dims.equalities()
    return result


def _analyze_once(graph: tf.Graph, dims: _ArgumentDims, min_cluster_size: int,
                  excluded_ops: frozenset[str], outputs: Iterable[str]) -> Analysis:
    order = topo_order(graph.get_operations())
    read = set(outputs)
    ordered_before: set[tf.Operation] = set()
    for op in order:
        read.update(t.name for t in op.inputs)
        ordered_before.update(op.control_inputs)
    # only computation: a function argument (a Placeholder, say a dataset iterator a
    # nested call reads through its captures) or anything holding a resource or variant
    # is part of the function's interface and must survive the rebuild
    dead = {op for op in order if op.outputs and op not in ordered_before and
            not any(t.name in read for t in op.outputs) and not op.op_def.is_stateful and
            op.type not in ("Placeholder", "NoOp") and not _uses_resource(op)}
    ctx = Lowering("scratch", dims.fresh)
    ctx.assume_equal = dims.assume_equal
    verdicts: dict[tf.Operation, Support] = {}
    for op in order:
        pre = _pre_verdict(op, excluded_ops) if op.type not in ("Const",) else None
        if op.type in ("Placeholder", "NoOp"):
            pre = Support(False, "not computation", code=ReasonCode.NO_CONVERTER)
        elif _ordering_point(op):
            pre = Support(False, "an Identity under control dependencies (a returned value "
                          "waiting for the stateful ops): stays in TensorFlow by design",
                          code=ReasonCode.FRAMEWORK_OP)
        if pre is not None:
            verdicts[op] = pre
            continue
        verdicts[op] = trial(op.type, lambda op=op: _lower_in_context(ctx, op))
    never = [op for op in order if op.type in NOT_COMPUTE or op in dead]
    # a control edge into a Const orders nothing (a constant has no effect, and clusters
    # inline constants): TF's gradients put constants under control dependencies (the 2
    # of SquaredDifference's gradient), and counting those edges closed false cycles
    # between every batch norm's backward and the next; the rewrite drops them
    edges = [(p, op) for op in order
             for p in {t.op for t in op.inputs} |
             (set() if op.type == "Const" else set(op.control_inputs))]
    clustering = find_clusters(order, edges, verdicts, min_cluster_size=min_cluster_size,
                               never_cluster=never, group_key=lambda op: op.device)
    nodes = [op for op in order if op.type not in NOT_COMPUTE and op not in dead]
    return Analysis(order, verdicts, ctx.values, ctx.known_values, clustering, nodes,
                    dead=dead)


def _ordering_point(op: tf.Operation) -> bool:
    """An Identity under control dependencies: how tf.function makes a returned value wait
    for the function's stateful ops (a training step's loss after its variable updates).
    It computes nothing, and in a cluster it would pull the ops that make its value (the
    loss's Mean) into a second cluster after those updates, apart from the step's."""
    return op.type == "Identity" and bool(op.control_inputs)


@dataclass
class LoweredCluster:
    """A cluster as a core graph plus how it connects to the TF graph.

    ``inputs``: TF tensors fed to the graph's inputs, in order. ``outputs``: the member
    tensors read outside the cluster; ``output_index[i]`` is the graph output that gives
    ``outputs[i]``, or None when that tensor is one of the inputs passed through
    (``passthrough[i]`` names it).
    """

    graph: Graph
    members: list[tf.Operation]
    inputs: list[tf.Tensor]
    outputs: list[tf.Tensor]
    output_index: list[int | None]
    passthrough: dict[int, tf.Tensor] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return hashlib.sha256(str(self.graph).encode()).hexdigest()[:16]


def lower_cluster(analysis: Analysis, members: list[tf.Operation], outside_readers:
                  dict[str, bool], name: str, bind_sizes: bool = False) -> LoweredCluster:
    """The core graph of one cluster. ``outside_readers[tensor]`` says whether a tensor is
    read outside the cluster (by another op or as a function output). ``bind_sizes``: also
    bind the symbols of fed dims that are expressions (see :func:`_binders`), the retry
    for a cluster whose lowering failed without them."""
    member_set = set(members)
    external: list[tf.Tensor] = []
    seen: set[str] = set()
    for op in members:
        for t in op.inputs:
            if t.op not in member_set and t.name not in seen:
                seen.add(t.name)
                external.append(t)
    # inputs bind symbols with their plain-symbol dims; a dim that is an expression of
    # symbols no input binds becomes a fresh symbol (its relation to others is lost, never
    # wrong)
    fed = [t for t in external if not _static_known(analysis, t)]
    bound: set[str] = set()
    for t in fed:
        if t.name in analysis.types:
            bound |= {d.symbol_name for d in analysis.types[t.name].shape if d.is_symbol}
    for t in _binders(analysis, members, fed, bound, bind_sizes):
        fed.append(t)
        bound |= {d.symbol_name for d in analysis.types[t.name].shape if d.is_symbol}
    fed_names = {t.name for t in fed}
    ctx = Lowering(name)
    for t in external:
        k = analysis.known.get(t.name)
        if t.name in fed_names:
            continue
        ctx.known_values[t.name] = k  # constants, static shapes
    # symbols renamed s0, s1, ... in order of appearance: equal clusters of different
    # functions (or processes) print the same graph and share one compilation
    rename: dict[str, Expr] = {}

    def canon(e: Expr) -> Expr:
        for name in sorted(e.free_symbols()):
            rename.setdefault(name, Expr.sym(f"s{len(rename)}"))
        return e.subs(rename) if e.free_symbols() else e

    inputs: list[tf.Tensor] = []
    for t in fed:
        v = analysis.types.get(t.name)
        k = analysis.known.get(t.name)
        if k is not None and k.dtype == object and \
                symbols_of(e for e in k.reshape(-1) if isinstance(e, Expr)) <= bound:
            continue  # a shape computed outside, in terms of the inputs' dims: below
        if v is None:  # a known shape whose sizes no input binds: fed as data
            if t.shape.rank is None:
                raise ConversionError(f"{t.name} has an unknown rank")
            ctx.add_input(t.name, core_dtype(t.dtype),
                          [Expr.const(d) if d is not None else
                           canon(Expr.sym(f"u{next(_symbol_ids)}")) for d in t.shape.as_list()])
            inputs.append(t)
            continue
        dims = [d if d.is_const or d.is_symbol or d.free_symbols() <= bound
                else Expr.sym(f"u{next(_symbol_ids)}") for d in v.shape]
        ctx.add_input(t.name, v.dtype, [canon(d) for d in dims])
        inputs.append(t)
    for t in fed:
        k = analysis.known.get(t.name)
        if t.name not in ctx.values and k is not None:
            ctx.known_values[t.name] = np.vectorize(
                lambda e: canon(e) if isinstance(e, Expr) else e, otypes=[object])(k)
    for op in members:
        convert_op(ctx, op)
    classes = _gradient_classes(ctx, members)
    input_values = {id(ctx.values[t.name]): t for t in inputs}
    outputs: list[tf.Tensor] = []
    index: list[int | None] = []
    passthrough: dict[int, tf.Tensor] = {}
    graph_outputs: list[Value] = []
    slots: dict[tuple[int, str | None], int] = {}
    for op in members:
        for t in op.outputs:
            if not outside_readers.get(t.name):
                continue
            v = ctx.value(t)
            outputs.append(t)
            # tensors share a launch output (or pass an input through) only when their
            # gradients agree too: the launch's gradient sees one output per slot
            cls = classes.get(t.name)
            if id(v) in input_values and cls is None:
                passthrough[len(outputs) - 1] = input_values[id(v)]
                index.append(None)
                continue
            key = (id(v), cls)
            if key not in slots:
                slots[key] = len(graph_outputs)
                graph_outputs.append(v)
            index.append(slots[key])
    graph = ctx.b.graph
    graph.outputs = graph_outputs
    graph.verify()
    return LoweredCluster(graph, members, inputs, outputs, index, passthrough)


#: ops whose output equals their input but whose gradient does not pass through
GRADIENT_BARRIERS = frozenset({"StopGradient", "PreventGradient"})


def overrides_gradient(op: tf.Operation) -> bool:
    """Whether the graph gives ``op`` a gradient of its own (``gradient_override_map``:
    ``tf.custom_gradient`` marks its IdentityN this way)."""
    try:
        op.get_attr("_gradient_op_type")
    except ValueError:
        return False
    return True


def _gradient_classes(ctx: Lowering, members: list[tf.Operation]) -> dict[str, str | None]:
    """Per member tensor that carries an operand's value unchanged (an Identity, a
    StopGradient, a no-op Reshape): which gradient barrier it sits behind, by the barrier's
    tensor name; None for a value whose gradient is the plain one.

    A cluster returns each distinct value once and passes inputs through, which is right
    for the values; but the launch's gradient (:mod:`disc_tf.gradients`) differentiates the
    one tensor that stands for each output, so ``x`` and ``stop_gradient(x)``, both read
    outside, must not share an output, nor may ``stop_gradient(input)`` become the input."""
    classes: dict[str, str | None] = {}
    for op in members:
        barrier = op.type in GRADIENT_BARRIERS or overrides_gradient(op)
        for t in op.outputs:
            v = ctx.values.get(t.name)
            src = next((u for u in op.inputs if v is not None and
                        ctx.values.get(u.name) is v), None)
            if src is None:
                classes[t.name] = None  # a value of its own
            elif barrier:
                classes[t.name] = t.name
            else:
                classes[t.name] = classes.get(src.name)
    return classes


def _binders(analysis: Analysis, members: list[tf.Operation], fed: list[tf.Tensor],
             bound: set[str], bind_sizes: bool = False) -> list[tf.Tensor]:
    """Extra inputs that bind the symbols of shapes computed outside the cluster.

    A shape such as ``Shape(x)`` computed in another cluster (or by TF) arrives as data,
    but converters need it as dims (a ``Reshape`` target). When no fed input has those
    dims, a tensor that has them (preferably a function argument) is fed as well: the
    module only reads its dims (zero-copy, never its data). A tensor qualifies only if
    reading it cannot close a cycle: neither it nor any op of its cluster may depend on
    this cluster (reachability over the graph with every cluster contracted)."""
    wanted: set[str] = set()
    for t in fed:
        k = analysis.known.get(t.name)
        if k is not None and k.dtype == object:
            wanted |= symbols_of(e for e in k.reshape(-1) if isinstance(e, Expr))
        v = analysis.types.get(t.name)
        if bind_sizes and v is not None:
            # a dim that is an expression (a strided conv's ceildiv(s1, 2)) keeps its
            # relation to other inputs' dims only if its symbols are bound: otherwise two
            # inputs of equal sizes get unrelated fresh symbols, and a broadcast between
            # them (a residual add's gradient) cannot be decided. Only a retry: more
            # symbolic dims can make the native engine refuse a cluster it would take
            wanted |= symbols_of(d for d in v.shape if not d.is_const and not d.is_symbol)
    if not wanted:
        return []
    consumers: dict[tf.Operation, list[tf.Operation]] = {}
    for op in analysis.order:
        for p in {t.op for t in op.inputs} | set(op.control_inputs):
            consumers.setdefault(p, []).append(op)
    cluster_of = analysis.clustering.cluster_of
    by_cluster: dict[int, list[tf.Operation]] = {}
    for op, cid in cluster_of.items():
        by_cluster.setdefault(cid, []).append(op)
    after: set[tf.Operation] = set()
    stack = list(members)
    while stack:  # everything downstream of the cluster, clusters contracted
        op = stack.pop()
        for c in consumers.get(op, ()):
            if c in after:
                continue
            after.add(c)
            stack.append(c)
            cid = cluster_of.get(c)
            if cid is not None:
                stack.extend(m for m in by_cluster[cid] if m not in after)
                after.update(by_cluster[cid])
    member_set = set(members)
    read_outside: set[str] = set()  # tensors of clustered ops that stay visible
    for op in analysis.order:
        for t in op.inputs:
            if cluster_of.get(t.op) is not None and cluster_of.get(t.op) != cluster_of.get(op):
                read_outside.add(t.name)
    found: list[tf.Tensor] = []
    candidates = sorted((op for op in analysis.order if op not in member_set and
                         op not in after), key=lambda op: op.type != "Placeholder")
    for op in candidates:
        for t in op.outputs:
            v = analysis.types.get(t.name)
            if v is None or analysis.known.get(t.name) is not None:
                continue
            if cluster_of.get(op) is not None and t.name not in read_outside:
                continue  # a cluster's internal value: gone once the cluster is replaced
            syms = {d.symbol_name for d in v.shape if d.is_symbol} & wanted
            if syms:
                found.append(t)
                wanted -= syms
        if not wanted:
            break
    return found


def _static_known(analysis: Analysis, t: tf.Tensor) -> bool:
    """A tensor whose value is a compile-time constant (inlined, not fed)."""
    k = analysis.known.get(t.name)
    if k is None:
        return False
    if k.dtype != object:
        return True
    return all(not isinstance(e, Expr) or e.is_const for e in k.reshape(-1))


def compile_cluster(compiler: Any, low: LoweredCluster, need_native: bool
                    ) -> tuple[Any, str, float]:
    """(executable, cache source, seconds). Raises when the cluster cannot be compiled, or
    compiles only for the interpreter while native code is required."""
    start = time.perf_counter()
    exe, source = compiler.compile_traced(low.graph)
    if need_native and exe.artifact.metadata.get("native") is None:
        raise RuntimeError("no native code: " + str(exe.artifact.metadata.get(
            "native_fallback", "unknown reason")))
    return exe, source, time.perf_counter() - start


