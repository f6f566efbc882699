"""Replace each compiled cluster of a function's GraphDef by one launch op and rebuild the
function from the rewritten GraphDef with its captures (variables) intact.

A launch is either the ``DiscLaunch`` custom op (:mod:`disc_tf.custom_op`), which carries
the cluster's original ops as a fallback function, or a ``tf.numpy_function`` that calls the
disc-runtime executable from Python and runs the original ops when DISC fails.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, function_pb2, graph_pb2, node_def_pb2
from tensorflow.python.eager import wrap_function
from tensorflow.python.framework import graph_to_function_def

from disc_runtime.abi import ABI_VERSION, MODULE_FILE
from disc_runtime.native import module_load_path

from .gradients import mark_differentiable
from .partition import LoweredCluster

__all__ = ["Launch", "rebuild_function"]

_launch_ids = itertools.count()


def gd_name(tensor_name: str) -> str:
    """``op:0`` -> ``op`` (GraphDef's spelling), ``op:1`` stays."""
    op, idx = tensor_name.rsplit(":", 1)
    return op if idx == "0" else tensor_name


@dataclass
class Launch:
    """One cluster to replace: what it reads, what it produces, how it runs."""

    cluster_id: int
    lowered: LoweredCluster
    executable: Any
    key: str
    extra_inputs: list[tf.Tensor]  # read by the fallback only (constants, known shapes)
    #: the accuracy guard's policy (disc_core.bridge.accuracy.AccuracyPolicy), None: off
    accuracy: Any = None

    @property
    def all_inputs(self) -> list[tf.Tensor]:
        return self.lowered.inputs + self.extra_inputs

    def output_tensors(self) -> list[tf.Tensor]:
        """The TF tensor each distinct graph output stands for."""
        out: list[tf.Tensor | None] = [None] * len(self.lowered.graph.outputs)
        for t, j in zip(self.lowered.outputs, self.lowered.output_index):
            if j is not None and out[j] is None:
                out[j] = t
        return out  # type: ignore[return-value]


def _fallback_graph_def(graph_def: graph_pb2.GraphDef, launch: Launch
                        ) -> tuple[graph_pb2.GraphDef, list[str], list[str]]:
    """A GraphDef of the cluster's own ops fed by placeholders; (graph, inputs, outputs)."""
    nodes = {n.name: n for n in graph_def.node}
    members = {op.name for op in launch.lowered.members}
    sub = graph_pb2.GraphDef()
    sub.versions.CopyFrom(graph_def.versions)
    renames: dict[str, str] = {}
    feeds: list[str] = []
    for i, t in enumerate(launch.all_inputs):
        name = f"disc_arg_{i}"
        ph = sub.node.add()
        ph.name, ph.op = name, "Placeholder"
        ph.attr["dtype"].type = t.dtype.as_datatype_enum
        ph.attr["shape"].shape.CopyFrom(t.shape.as_proto())
        renames[gd_name(t.name)] = name
        feeds.append(f"{name}:0")
    for op in launch.lowered.members:
        node = node_def_pb2.NodeDef()
        node.CopyFrom(nodes[op.name])
        _drop_colocation(node)
        del node.input[:]
        for inp in nodes[op.name].input:
            if inp.startswith("^"):
                if inp[1:] in members:
                    node.input.append(inp)
                continue
            node.input.append(inp if inp.split(":")[0] in members else renames[inp])
        sub.node.append(node)
    outputs = [t.name for t in launch.output_tensors()]
    return sub, feeds, outputs


def _function_def(sub: graph_pb2.GraphDef, feeds: list[str], outs: list[str], name: str
                  ) -> function_pb2.FunctionDef:
    """The fallback subgraph as a FunctionDef: imported into a scratch graph and converted
    directly (the subgraph is already exactly the function body, so none of
    ``function_from_graph_def``'s pruning and lifting, which cost ~0.2 s per cluster)."""
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(sub, name="")
    fdef = graph_to_function_def.graph_to_function_def(
        g, g.get_operations(), [g.get_tensor_by_name(f) for f in feeds],
        [g.get_tensor_by_name(o) for o in outs])
    fdef.signature.name = name
    return fdef


def _shape_attr(t: tf.Tensor) -> Any:
    return t.shape.as_proto()


def _launch_node(launch: Launch, name: str, fallback_name: str, module_path: str,
                 control: list[str], device: str) -> node_def_pb2.NodeDef:
    node = node_def_pb2.NodeDef()
    node.name, node.op, node.device = name, "DiscLaunch", device
    node.input.extend(gd_name(t.name) for t in launch.all_inputs)
    node.input.extend(f"^{c}" for c in control)
    outs = launch.output_tensors()
    node.attr["Tin"].list.type.extend(t.dtype.as_datatype_enum for t in launch.all_inputs)
    node.attr["Tout"].list.type.extend(t.dtype.as_datatype_enum for t in outs)
    node.attr["output_shapes"].list.shape.extend(_shape_attr(t) for t in outs)
    node.attr["module_path"].s = module_path.encode()
    node.attr["abi_version"].i = ABI_VERSION
    node.attr["cluster_key"].s = launch.key.encode()
    node.attr["num_module_inputs"].i = len(launch.lowered.inputs)
    node.attr["input_ranks"].list.i.extend(v.rank for v in launch.lowered.graph.inputs)
    node.attr["fallback"].func.CopyFrom(attr_value_pb2.NameAttrList(name=fallback_name))
    policy = launch.accuracy
    if policy is not None:  # the guard: which calls to compare, each output's tolerances
        node.attr["check_first"].i = policy.first
        node.attr["check_every"].i = policy.every
        bounds = [policy.bounds(v.dtype.value) for v in launch.lowered.graph.outputs]
        node.attr["check_rtol"].list.f.extend(r for r, _ in bounds)
        node.attr["check_atol"].list.f.extend(a for _, a in bounds)
    return node


def _numpy_launch_node(launch: Launch, name: str, run: Callable[..., Any],
                       keepalive: list[Any], control: list[str], device: str
                       ) -> node_def_pb2.NodeDef:
    """A ``tf.numpy_function`` node calling ``run``: traced once in a scratch graph (kept
    alive: TF's py_func registry forgets a function when its graph dies) and copied."""
    scratch = tf.Graph()
    with scratch.as_default():
        phs = [tf.compat.v1.placeholder(t.dtype, t.shape) for t in launch.all_inputs]
        outs = launch.output_tensors()
        tf.numpy_function(run, phs, [t.dtype for t in outs], stateful=False, name="launch")
    keepalive.append(scratch)
    node = node_def_pb2.NodeDef()
    node.CopyFrom(scratch.get_operation_by_name("launch").node_def)
    node.name, node.device = name, device
    del node.input[:]
    node.input.extend(gd_name(t.name) for t in launch.all_inputs)
    node.input.extend(f"^{c}" for c in control)
    return node


def rebuild_function(cf: Any, launches: list[Launch], mode: str,
                     numpy_runner: Callable[..., Callable[..., Any]] | None = None,
                     keepalive: list[Any] | None = None,
                     dead: set[str] = frozenset()) -> Any:  # type: ignore[assignment]
    """The concrete function ``cf`` with every launch's cluster replaced. ``dead``: names
    of ops nothing reads, dropped (a cluster need not output what only they read)."""
    graph_def = cf.graph.as_graph_def()
    nodes = {n.name: n for n in graph_def.node}
    remap: dict[str, str] = {}  # GraphDef tensor name -> replacement
    control_remap: dict[str, str] = {}
    dropped: set[str] = set()
    new_nodes: list[node_def_pb2.NodeDef] = []
    for launch in launches:
        members = {op.name for op in launch.lowered.members}
        name = f"disc_launch_{launch.cluster_id}_{next(_launch_ids)}"
        control: list[str] = []
        for m in launch.lowered.members:
            for inp in nodes[m.name].input:
                if inp.startswith("^") and inp[1:] not in members and inp[1:] not in control:
                    control.append(inp[1:])
        device = launch.lowered.members[0].device
        sub, feeds, outs = _fallback_graph_def(graph_def, launch)
        if mode == "custom_op":
            fdef = _function_def(sub, feeds, outs, f"disc_fallback_{name}")
            graph_def.library.function.add().CopyFrom(fdef)
            # by file identity: a cache entry rebuilt in this process loads anew
            module = module_load_path(launch.executable.artifact.path(MODULE_FILE))
            node = _launch_node(launch, name, fdef.signature.name, module, control, device)
        else:
            assert numpy_runner is not None and keepalive is not None
            run = numpy_runner(launch, sub, feeds, outs)
            node = _numpy_launch_node(launch, name, run, keepalive, control,
                                      device)
        mark_differentiable(node, sub, feeds, outs)
        new_nodes.append(node)
        for i, (t, j) in enumerate(zip(launch.lowered.outputs, launch.lowered.output_index)):
            if j is None:
                remap[gd_name(t.name)] = gd_name(launch.lowered.passthrough[i].name)
            else:
                remap[gd_name(t.name)] = name if j == 0 else f"{name}:{j}"
        for m in members:
            control_remap[m] = name
        dropped |= members
    def resolve(inp: str) -> str:
        """Follow the remap to a tensor that survives: a launch output may pass an input
        through, and that input may itself be another launch's output."""
        seen: set[str] = set()
        while inp not in seen:
            seen.add(inp)
            nxt = remap.get(inp, remap.get(inp[:-2], inp) if inp.endswith(":0") else inp)
            if nxt == inp:
                break
            inp = nxt
        return inp

    # members whose outputs nobody outside reads still order the launch: keep their
    # control successors waiting on it
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    for n in graph_def.node:
        if n.name in dropped or n.name in dead:
            continue
        node = node_def_pb2.NodeDef()
        node.CopyFrom(n)
        _drop_colocation(node)
        del node.input[:]
        seen_ctrl: set[str] = set()
        for inp in n.input:
            if inp.startswith("^"):
                if n.op == "Const" and inp[1:] in dropped:
                    continue  # orders nothing, and a launch may read it (see analyze)
                target = control_remap.get(inp[1:], inp[1:])
                if target not in seen_ctrl:
                    seen_ctrl.add(target)
                    node.input.append("^" + target)
            else:
                node.input.append(resolve(inp))
        out.node.append(node)
    for node in new_nodes:  # a launch may read another launch's results
        inputs = list(node.input)
        del node.input[:]
        for inp in inputs:
            if inp.startswith("^"):
                node.input.append("^" + control_remap.get(inp[1:], inp[1:]))
            else:
                node.input.append(resolve(inp))
    out.node.extend(new_nodes)
    captures = {internal.name.split(":")[0]: external
                for external, internal in cf.graph.captures}
    call_time = _call_time_captures(cf.graph)
    for c in call_time:  # after the by-value captures, as in the original's inputs
        captures.update(zip(c.names, c.stand_ins))
    outputs = [_tensor_name(resolve(gd_name(t.name))) for t in cf.outputs]
    new = wrap_function.function_from_graph_def(out, [t.name for t in cf.inputs], outputs,
                                                captures)
    _restore_call_time_captures(cf, new, call_time)
    _keep_gradient_functions(cf.graph, new.graph, dropped)
    new._function_type = cf.function_type  # noqa: SLF001  (as TF-TRT's converter does)
    new.graph.structured_input_signature = cf.structured_input_signature
    # a call marks these variables as read, so a GradientTape around it watches them
    # (trainable variables are watched automatically; without this their gradients are None)
    new.graph.variables = cf.graph.variables
    return new


@dataclass
class _CallTimeCapture:
    """A value the original function captured *by reference*: ``closure`` runs at every
    call (``FuncGraph.capture_call_time_value``) and feeds ``names``' placeholders."""

    key: Any
    closure: Any
    tracetype: Any
    structure: Any  # the nest of the original's placeholders
    names: list[str]  # their ops' names, flat
    stand_ins: list[tf.Tensor]  # captured by value while rebuilding, then replaced


def _call_time_captures(graph: Any) -> list[_CallTimeCapture]:
    """The original's call-time captures, each with stand-in tensors of its placeholders'
    types.

    tf.distribute's collectives take their instance key this way (a fresh key per call,
    ``CollectiveReplicaLauncher._next_instance_key``): a GraphDef keeps the placeholders
    but not the closures, so the rebuilt function would wait for them as arguments. The
    stand-ins are captured by value while it is rebuilt, which puts the placeholders after
    the other captures, where the original has them; then they become call-time captures
    again (:func:`_restore_call_time_captures`)."""
    fc = graph.function_captures
    found: list[_CallTimeCapture] = []
    for key, internal in fc.by_ref_internal.items():
        flat = tf.nest.flatten(internal, expand_composites=True)
        with tf.init_scope():  # eager values: never read, only typed
            stand_ins = [tf.zeros([d or 0 for d in p.shape.as_list()]
                                  if p.shape.rank is not None else [], p.dtype)
                         for p in flat]
        found.append(_CallTimeCapture(key, fc.by_ref_external[key],
                                      fc.by_ref_tracetype.get(key), internal,
                                      [p.op.name for p in flat], stand_ins))
    return found


def _restore_call_time_captures(cf: Any, new: Any, call_time: list[_CallTimeCapture]
                                ) -> None:
    """Turn the stand-in captures of :func:`_call_time_captures` back into call-time
    captures of the rebuilt function: the same closures, run at each call, in the
    original's order (its inputs are the arguments, the by-value captures, then these)."""
    if not call_time:
        return
    fc = new.graph.function_captures
    internal_of = {id(ext): internal for ext, internal in new.graph.captures}
    for c in call_time:
        placeholders = [internal_of[id(s)] for s in c.stand_ins]
        for s in c.stand_ins:
            fc.pop(id(s), is_by_ref=False)
        fc.add_or_replace(key=c.key, external=c.closure,
                          internal=tf.nest.pack_sequence_as(c.structure, placeholders,
                                                            expand_composites=True),
                          tracetype=c.tracetype, is_by_ref=True)
    # what a call passes after its arguments: the original's own list (by-value tensors,
    # then the closures), which the placeholders above now follow in the same order
    new.set_external_captures(list(cf._captured_inputs))  # noqa: SLF001


def _keep_gradient_functions(old: tf.Graph, new: tf.Graph, dropped: set[str]) -> None:
    """Give the rebuilt graph's ops the gradient functions TensorFlow attached to the
    original ones in Python, which a GraphDef does not carry. A call of another
    tf.function gets its gradient that way while it is traced (Keras convolves through
    one, ``_conv_xla``, when the input's feature dim is unknown, as in a trace with
    every dim relaxed); without it, a GradientTape around the rebuilt function falls back
    to ``SymbolicGradient``, which fails on the callee's resource (variable) inputs."""
    for op in old.get_operations():
        fn = op._gradient_function  # noqa: SLF001
        if fn is None or op.name in dropped:
            continue
        try:
            target = new.get_operation_by_name(op.name)
        except (KeyError, ValueError):
            continue  # pruned: nothing reads it
        target._gradient_function = fn  # noqa: SLF001


def _drop_colocation(node: node_def_pb2.NodeDef) -> None:
    """Colocation hints (``_class: loc:@op``) may name ops a cluster replaced; everything
    here runs on one CPU device, so they carry nothing."""
    if "_class" in node.attr:
        del node.attr["_class"]


def _tensor_name(gd: str) -> str:
    return gd if ":" in gd else f"{gd}:0"

