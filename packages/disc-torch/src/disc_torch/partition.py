"""Partition one ATen FX graph into DISC clusters and eager ops, compile the clusters.

Steps: a verdict per tensor-producing node (:mod:`disc_torch.support`), the shared core
clustering (:func:`disc_core.clustering.find_clusters`), one FX submodule per cluster
(``fuse_by_partitions``), each wrapped in a :class:`ClusterModule` that runs the DISC
executable; the coverage report is filled as this happens.
"""

from __future__ import annotations

import itertools
import operator
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from typing import Any

import torch
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions
from torch.multiprocessing.reductions import StorageWeakRef

from disc_core.clustering import Support, find_clusters
from disc_core.report import ReasonCode, get_collector, graph_report

from .cluster import Clock, ClusterModule
from .config import DiscConfig
from .flops import estimate_flops
from .layout import restore_layouts
from .lowering import LoweredCluster, lower_graph
from .support import getitem_support, is_sym_node, is_tensor_node, node_support, op_type
from .symbolic import UnsupportedSize, to_expr

__all__ = ["PartitionedGraph", "partition_and_compile", "wait_for_builds"]

_graph_ids = itertools.count()
_now = time.perf_counter  # a module global: the per-call path reads the clock twice

class PartitionedGraph:
    """The callable handed back to aot_autograd: the partitioned GraphModule plus stats."""

    def __init__(self, gm: torch.fx.GraphModule, clusters: list[ClusterModule], recorder: Any,
                 clock: Clock, has_fallback_ops: bool | None = None):
        """``has_fallback_ops``: whether the graph runs anything but its clusters, for a
        ``gm`` without an FX graph to read it from (a thawed one); None: read ``gm``."""
        self.gm = gm
        self.clusters = clusters
        self.recorder = recorder
        self._clock = clock
        #: the graph's calls and seconds in fallback ops, per thread (read by the report)
        self._tally = recorder.graph_tally()
        self._tally_cell = self._tally.local
        self._boxed_call = True
        # the generated forward reads each cluster as ``self.disc_cluster_<n>``: a submodule
        # is found only through nn.Module.__getattr__ (1.2 us a read on a 2-core EPYC, a
        # sixth of a small graph's own per-call cost); an entry in the instance dict is a
        # plain attribute read. nn.Module.__setattr__ drops the entry if a child is replaced.
        for child_name, child in gm.named_children():
            gm.__dict__[child_name] = child
        if has_fallback_ops is None:
            has_fallback_ops = any(n.op == "call_function" and n.target is not operator.getitem
                                   for n in gm.graph.nodes)
        #: does the graph run anything but its clusters (whose time is the fallback time)?
        self.has_fallback_ops = has_fallback_ops

    def __call__(self, args: list[Any]) -> Any:
        if not self.has_fallback_ops:  # nothing to time: count the call
            out = self.gm.forward(*args)
            args.clear()
            try:
                self._tally_cell.cell[0] += 1
            except AttributeError:
                self._tally.cell()[0] += 1
            return out
        clock = self._clock
        before = clock.seconds
        start = _now()
        # the generated forward itself: GraphModule.__call__ adds three Python frames of
        # error context and nn.Module hook machinery to every call
        out = self.gm.forward(*args)
        args.clear()
        fallback = _now() - start - (clock.seconds - before)
        try:
            cell = self._tally_cell.cell
        except AttributeError:
            cell = self._tally.cell()
        cell[0] += 1
        if fallback > 0.0:
            cell[1] += fallback
        return out


def _intermediate_sizes(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """Tensor nodes that read a size computed from an intermediate (non-input) tensor
    whose value has no expression over the graph's input symbols (data-dependent sizes):
    such a size exists only once the tensor does, so these nodes stay in torch.

    A size that does have one (batch norm's ``numel(conv) / (numel(conv) - 1)`` running
    variance correction, a view to a pooled tensor's sizes) is read from its expression
    inside the cluster; :func:`_absorb_size_chains` moves its computation into the
    cluster that produces the tensor."""
    tainted: set[torch.fx.Node] = set()
    readers: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or not is_sym_node(node) or _expressible(node):
            continue
        for src in node.all_input_nodes:
            if src in tainted or (src.op == "call_function" and not is_sym_node(src)):
                tainted.add(node)
    for node in gm.graph.nodes:
        if node.op == "call_function" and any(s in tainted for s in node.all_input_nodes):
            readers.add(node)
    return readers


def _expressible(node: torch.fx.Node) -> bool:
    """Is a size node's value an expression over backed size symbols (no data)?"""
    val = node.meta.get("val")
    if isinstance(val, (bool, int, float)):
        return True
    if not isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return False
    try:  # a SymInt converts whole; float and bool sizes need every symbol backed
        for part in [val] if isinstance(val, torch.SymInt) else val.node.expr.free_symbols:
            to_expr(part)
    except UnsupportedSize:
        return False
    return True


def _absorb_size_chains(gm: torch.fx.GraphModule,
                        partitions: list[dict[torch.fx.Node, None]]) -> None:
    """Copy into each partition the size computations that read its own tensors.

    ``sym_numel(conv)`` outside a cluster that both produces ``conv`` and uses the size
    would make the cluster's input depend on its output (a cycle). The cluster needs only
    the expression (:meth:`Lowering.operand` reads sizes from their traced values), so
    the chain is copied in, where lowering skips it; users outside keep the original."""
    graph = gm.graph
    for part in partitions:
        inside: dict[torch.fx.Node, torch.fx.Node] = {}
        for node in list(graph.nodes):
            if (node.op != "call_function" or not is_sym_node(node) or node in part
                    or not any(s in part or s in inside for s in node.all_input_nodes)):
                continue
            with graph.inserting_after(node):
                copy = graph.node_copy(node, lambda a, inside=inside: inside.get(a, a))
            copy.meta = dict(node.meta)
            inside[node] = copy
        if not inside:
            continue
        for member in list(part):
            for original, copy in inside.items():
                member.replace_input_with(original, copy)
        for original, copy in reversed(list(inside.items())):
            if copy.users:
                part[copy] = None
            else:
                graph.erase_node(copy)
            if not original.users:
                graph.erase_node(original)


def _dependency_edges(nodes: list[torch.fx.Node], node_set: set[torch.fx.Node]
                      ) -> list[tuple[torch.fx.Node, torch.fx.Node]]:
    """(producer, consumer) between tensor nodes, including dependencies that pass through
    size nodes (``sym_size(x, 2)`` feeding an ``expand``): clustering sees only tensor
    nodes, and a cluster holding both ends of such a path would need its own output first
    (the partition would have a cycle)."""
    memo: dict[torch.fx.Node, set[torch.fx.Node]] = {}

    def sources(node: torch.fx.Node) -> set[torch.fx.Node]:
        if node in memo:
            return memo[node]
        out: set[torch.fx.Node] = set()
        for src in node.all_input_nodes:
            if src in node_set:
                out.add(src)
            elif src.op == "call_function":
                out |= sources(src)
        memo[node] = out
        return out

    return [(src, n) for n in nodes for src in sources(n)]


def _user_visible_outputs(role: str) -> int | None:
    """How many leading outputs of the graph reach the user (None: assume all).

    aot_autograd orders forward outputs as mutated inputs, user outputs, intermediate bases,
    then what backward saves; only the first three may be regenerated as aliases. Backward
    outputs are gradients: never aliases of anything the caller holds."""
    if role == "backward":
        return 0
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None)
    if meta is None:
        return None
    return meta.num_mutated_inp_runtime_indices + meta.num_outputs + meta.num_intermediate_bases


def _storages(node: torch.fx.Node) -> set[Any]:
    """The (fake) storages a node's traced value lives in: one per tensor it holds, views
    sharing their base's. Empty when the node has no traced tensor value."""
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    out = set()
    for v in vals:
        if isinstance(v, torch.Tensor):
            try:
                out.add(StorageWeakRef(v.untyped_storage()))
            except Exception:  # a tensor subclass without a storage: nothing to alias
                continue
    return out


def _returned_input_views(gm: torch.fx.GraphModule, visible: int | None) -> set[torch.fx.Node]:
    """The nodes that make a view of a graph input which the graph returns to the user,
    from the input to the result (``x[n:]``, a ``split`` chunk, ``x.t()``): aot_autograd
    regenerates such outputs as aliases of the input from the compiled output's size,
    strides and storage offset, so they must stay real torch views (a DISC buffer would
    give offset 0 and its own strides). A view that is only read (saved for backward,
    consumed by other ops) may be computed by DISC. Aliasing is read from the traced fake
    tensors aot_autograd's graphs carry (views share their base's storage), so every view
    op is covered."""
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    results = out_node.args[0] if isinstance(out_node.args[0], (list, tuple)) else [
        out_node.args[0]]
    inputs: set[Any] = set()
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            inputs |= _storages(n)
    found: set[torch.fx.Node] = set()
    for r in results[:visible] if visible is not None else results:
        if not isinstance(r, torch.fx.Node) or r.op != "call_function":
            continue
        shared = _storages(r) & inputs
        stack = [r] if shared else []
        while stack:  # back from the result along the nodes holding the input's storage
            n = stack.pop()
            if n not in found and n.op == "call_function" and _storages(n) & shared:
                found.add(n)
                stack.extend(n.all_input_nodes)
    return found


def record_failed_graph(gm: torch.fx.GraphModule, role: str, detail: str) -> Any:
    """Report a graph that runs eagerly because partitioning it failed: every op falls
    back, with the failure as the reason. Returns the graph's recorder."""
    name = f"{role}_{next(_graph_ids)}"
    nodes = [n for n in gm.graph.nodes if is_tensor_node(n)]
    verdicts = {n: Support(False, detail, code=ReasonCode.COMPILE_ERROR) for n in nodes}
    return _report(name, nodes, find_clusters(nodes, [], verdicts), verdicts)


def _report(name: str, nodes: list[torch.fx.Node], clustering: Any,
            verdicts: dict[torch.fx.Node, Support]) -> Any:
    """Add a graph's coverage report; returns its recorder."""
    report = graph_report(name, nodes, clustering, op_type=op_type, support=verdicts,
                          node_name=lambda n: n.name, flops=estimate_flops)
    return get_collector().add_graph(report, framework="torch",
                                     framework_version=torch.__version__)


def partition_and_compile(gm: torch.fx.GraphModule, config: DiscConfig, compiler: Any,
                          role: str) -> PartitionedGraph:
    name = f"{role}_{next(_graph_ids)}"
    nodes = [n for n in gm.graph.nodes if is_tensor_node(n)]
    node_set = set(nodes)
    verdicts: dict[torch.fx.Node, Support] = {}
    never: set[torch.fx.Node] = set()
    size_readers = _intermediate_sizes(gm)
    visible = _user_visible_outputs(role)
    returned_views = _returned_input_views(gm, visible)
    for n in nodes:
        if config.excludes(op_type(n)) or config.excludes(str(n.target)):
            never.add(n)
            verdicts[n] = Support(False, "excluded by the user", code=ReasonCode.EXCLUDED_BY_USER)
        elif n.target is operator.getitem:
            verdicts[n] = getitem_support(n, verdicts.get(n.args[0]))
        elif n in size_readers:
            verdicts[n] = Support(False, "reads a size computed from an intermediate tensor",
                                  code=ReasonCode.DATA_DEPENDENT_SHAPE)
        elif n in returned_views:
            verdicts[n] = Support(False, "a view of a graph input that the graph returns "
                                  "(aot_autograd regenerates it as an alias)",
                                  code=ReasonCode.UNSUPPORTED_ATTRIBUTE)
        else:
            verdicts[n] = node_support(n)
    edges = _dependency_edges(nodes, node_set)
    clustering = find_clusters(nodes, edges, verdicts, min_cluster_size=config.min_cluster_size,
                               never_cluster=never)
    recorder = _report(name, nodes, clustering, verdicts)
    clock = Clock()
    if not clustering.clusters:
        # its inputs may still come from another graph's clusters (tensors a forward
        # saved for this backward)
        if restore_layouts(gm, lambda n: False, visible):
            gm.recompile()
        return PartitionedGraph(gm, [], recorder, clock)

    ids = [c.id for c in clustering.clusters]
    partitions = [{n: None for n in c.nodes} for c in clustering.clusters]
    prefix = "disc_cluster_"
    _absorb_size_chains(gm, partitions)
    gm = fuse_by_partitions(gm, partitions, prefix=prefix, always_return_tuple=True)
    sites = SymbolSites(gm)  # after fusing: it may rebuild the graph's nodes
    calls = {n.target: n for n in gm.graph.nodes if n.op == "call_module"}
    modules: list[ClusterModule] = []
    lowered: list[LoweredCluster | None] = []
    for index, cluster_id in enumerate(ids):
        sub = getattr(gm, f"{prefix}{index}")
        module = ClusterModule(sub, cluster_id, recorder, clock, single_output=False,
                               accuracy_check=config.accuracy_policy(),
                               profile=config.profile)
        setattr(gm, f"{prefix}{index}", module)
        modules.append(module)
        extras: list[torch.fx.Node] = []
        try:
            low = lower_graph(sub, f"{name}_c{cluster_id}", sites.locator(extras))
        except Exception as exc:
            module.fail(ReasonCode.COMPILE_ERROR, f"{type(exc).__name__}: {exc}")
            low = None
        if extras:  # a fresh call node: the graph's use lists stay consistent
            call = calls[f"{prefix}{index}"]
            with gm.graph.inserting_before(call):
                new = gm.graph.call_module(call.target, tuple(call.args) + tuple(extras))
            new.meta = call.meta
            call.replace_all_uses_with(new)
            gm.graph.erase_node(call)
        lowered.append(low)
    _compile_all(modules, lowered, compiler)
    cluster_calls = {n for n in gm.graph.nodes if n.op == "call_module"
                     and n.target.startswith(prefix)}
    restore_layouts(gm, lambda n: n.target is operator.getitem
                    and n.args[0] in cluster_calls, visible)
    gm.recompile()
    return PartitionedGraph(gm, modules, recorder, clock)


class SymbolSites:
    """Where each size symbol of a graph can be read at run time: a graph input's dim, or
    a SymInt input. Dynamo creates every backed symbol from an input, so this is total."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.sites: dict[str, tuple[torch.fx.Node, int | None]] = {}
        placeholders = [p for p in gm.graph.nodes if p.op == "placeholder"]
        # tensor dims first: a SymInt input may be passed as None when the graph that
        # received it does not read it
        for p in placeholders:
            meta = p.meta.get("val")
            if isinstance(meta, torch.Tensor):
                for axis, d in enumerate(meta.shape):
                    self._add(p, axis, d)
        for p in placeholders:
            meta = p.meta.get("val")
            if isinstance(meta, torch.SymInt) and p.users:
                self._add(p, None, meta)
        # last, SymInt inputs no node reads: aot_autograd passes them as ints (a backward
        # graph's sizes, e.g. of a symbol that appears only in products such as s38*s97);
        # one that came as None would fail the cluster's call, which then runs eagerly
        for p in placeholders:
            meta = p.meta.get("val")
            if isinstance(meta, torch.SymInt) and not p.users:
                self._add(p, None, meta)

    def _add(self, node: torch.fx.Node, axis: int | None, size: Any) -> None:
        try:
            e = to_expr(size)
        except UnsupportedSize:
            return
        if e.is_symbol:
            self.sites.setdefault(e.symbol_name, (node, axis))

    def locator(self, extras: list[torch.fx.Node]):
        """A ``locate`` for lower_graph that appends the graph inputs it needs to ``extras``."""

        def locate(symbol: str) -> tuple | None:
            site = self.sites.get(symbol)
            if site is None:
                return None
            node, axis = site
            if node not in extras:
                extras.append(node)
            return ("extra", extras.index(node), axis)

        return locate


def _compile_all(modules: list[ClusterModule], lowered: list[LoweredCluster | None],
                 compiler: Any) -> None:
    """Start compiling every lowered cluster in the background; each module waits for its
    own build on its first call.

    aot_autograd compiles the forward graph, then traces and compiles the backward, then
    dynamo runs the forward: building in the background overlaps the forward's C compiler
    run (a subprocess, seconds) with the backward's tracing and with the other builds.

    This thread waits while a build does its own Python work (passes, fusion, C
    emission; a few hundred ms), up to the C compiler's start: both need the GIL, and
    run side by side each took two to three times as long, delaying the compiler's start.
    """

    def build(module: ClusterModule, low: LoweredCluster, handed_off: threading.Event
              ) -> None:
        start = time.perf_counter()
        try:
            exe, source = compiler.compile_traced(low.graph, compiling=handed_off.set)
        except Exception as exc:
            module.fail(ReasonCode.COMPILE_ERROR, f"{type(exc).__name__}: {exc}")
            return
        finally:
            handed_off.set()  # a cache hit or a failure never reaches the C compiler
        if module.built(exe, source, time.perf_counter() - start, compiler.target):
            module.attach(low, exe)

    for module, low in zip(modules, lowered):
        if low is not None:
            handed_off = threading.Event()
            module.building(low, _submit_build(build, module, low, handed_off))
            handed_off.wait()


_builder: ThreadPoolExecutor | None = None
_in_flight: set[Future] = set()
_in_flight_lock = threading.Lock()


def _submit_build(fn: Any, *args: Any) -> Future:
    global _builder
    with _in_flight_lock:
        if _builder is None:
            # Enough threads that a build never queues: _compile_all waits for each
            # build to start its C compiler, and the threads mostly wait on compilers.
            _builder = ThreadPoolExecutor(max_workers=32, thread_name_prefix="disc-build")
        future = _builder.submit(fn, *args)
        _in_flight.add(future)
    future.add_done_callback(_finished)
    return future


def _finished(future: Future) -> None:
    with _in_flight_lock:
        _in_flight.discard(future)


def wait_for_builds() -> None:
    """Block until every cluster build started so far has finished (report, counters)."""
    with _in_flight_lock:
        pending = list(_in_flight)
    futures_wait(pending)
