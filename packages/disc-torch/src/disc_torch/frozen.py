"""A compiled, partitioned graph as plain data, and back: what the disk cache of traced
graphs (:mod:`disc_torch.precompile`) keeps, so that a new process runs the same graphs
without dynamo, aot_autograd or DISC's lowering running again.

A graph is kept as its generated Python source, the few globals that source names (by
module name or by pickled reference, never by value of live objects), its tensor
attributes, and per cluster: the core graph's text (the compile-cache key of its native
module), how its inputs are fed, and its eager fallback graph. Nothing here needs traced
metadata (fake tensors, shape environments) to run: thawing only loads native modules,
which are in DISC's compile cache already, or rebuilds them from the text when not.
"""

from __future__ import annotations

import pickle
import time
import types
from typing import Any

import torch
from torch.fx.graph_module import _forward_from_src

from disc_core.report import GraphReport, ReasonCode, get_collector

from .cluster import Clock, ClusterModule

__all__ = ["FreezeError", "SourceModule", "freeze_graph", "thaw_graph"]


class FreezeError(Exception):
    """The graph holds something that cannot be kept as data (it is then not cached)."""


class SourceModule(torch.nn.Module):
    """An FX graph's generated forward, run from its source with its attributes set."""

    def __init__(self, src: str, global_refs: dict[str, Any],
                 attrs: dict[str, Any], modules: dict[str, torch.nn.Module]):
        super().__init__()
        for name, value in attrs.items():
            setattr(self, name, value)
        for name, module in modules.items():
            setattr(self, name, module)
        self._forward = _forward_from_src(src, _resolve_globals(global_refs))

    def forward(self, *args: Any) -> Any:
        return self._forward(self, *args)


def _freeze_source(gm: torch.fx.GraphModule, skip_modules: set[str] = frozenset()
                   ) -> dict[str, Any]:
    code = gm.graph.python_code(root_module="self")
    refs: dict[str, Any] = {}
    for name, value in code.globals.items():
        if isinstance(value, types.ModuleType):
            refs[name] = ("module", value.__name__)
            continue
        try:
            refs[name] = ("pickle", pickle.dumps(value))
        except Exception as exc:
            raise FreezeError(f"the graph's source names {name!r} ({type(value).__name__}), "
                              f"which does not pickle: {exc}") from exc
    attrs: dict[str, Any] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = getattr(gm, node.target)
            if not isinstance(value, torch.Tensor):
                raise FreezeError(f"attribute {node.target!r} is a {type(value).__name__}")
            attrs[node.target] = value.detach().clone()
        elif node.op == "call_module" and node.target not in skip_modules:
            raise FreezeError(f"the graph calls module {node.target!r}")
    return {"src": code.src, "globals": refs, "attrs": attrs}


def _resolve_globals(refs: dict[str, Any]) -> dict[str, Any]:
    import importlib

    out: dict[str, Any] = {}
    for name, (kind, value) in refs.items():
        out[name] = importlib.import_module(value) if kind == "module" else pickle.loads(value)
    return out


def _thaw_source(state: dict[str, Any], modules: dict[str, torch.nn.Module] | None = None
                 ) -> SourceModule:
    return SourceModule(state["src"], state["globals"], state["attrs"], modules or {})


def freeze_graph(graph: Any) -> dict[str, Any]:
    """A :class:`~disc_torch.partition.PartitionedGraph` as plain, picklable data. Waits
    for its clusters' background builds (their outcome is part of what is kept)."""
    clusters = []
    names = {}
    for name, module in graph.gm.named_children():
        if isinstance(module, ClusterModule):
            names[module] = name
    for module in graph.clusters:
        state = module.frozen_state()
        state["fallback"] = _freeze_source(module.fallback)
        state["name"] = names[module]
        clusters.append(state)
    report = graph.recorder.graph.to_dict()
    report.update(calls=0)
    report.pop("fallback_seconds", None)
    for c in report["clusters"]:
        for key in ("compile_seconds", "seconds", "profile"):
            c.pop(key, None)
        c.update(cache_hits=0, cache_misses=0, calls=0)
    return {"top": _freeze_source(graph.gm, set(names.values())), "clusters": clusters,
            "report": report, "has_fallback_ops": graph.has_fallback_ops}


def _policy(kept: Any) -> Any:
    """The accuracy policy a frozen cluster kept (None: the guard was off)."""
    from disc_core.bridge.accuracy import AccuracyPolicy

    return None if kept is None else AccuracyPolicy(**kept)


def thaw_graph(state: dict[str, Any], compiler: Any) -> Any:
    """The callable :func:`freeze_graph` kept, with its report added to the collector.
    A cluster whose native module cannot be loaded or rebuilt runs its eager fallback
    (warned once and recorded, as at compile time)."""
    from .partition import PartitionedGraph

    report = GraphReport.from_dict(state["report"])
    recorder = get_collector().add_graph(report, framework="torch",
                                         framework_version=torch.__version__)
    clock = Clock()
    modules: dict[str, ClusterModule] = {}
    ordered = []
    for c in state["clusters"]:
        module = ClusterModule(_thaw_source(c["fallback"]), c["cluster_id"], recorder, clock,
                               single_output=c["single_output"],
                               accuracy_check=_policy(c["check"]),
                               profile=c["profile"], arity=tuple(c["arity"]))
        modules[c["name"]] = module
        ordered.append(module)
        if c.get("failed"):
            continue  # it ran eagerly at compile time, with its reason in the report
        start = time.perf_counter()
        try:
            exe, source = compiler.compile_text(c["graph_text"], c["input_types"])
        except Exception as exc:
            module.fail(ReasonCode.COMPILE_ERROR, f"{type(exc).__name__}: {exc}")
            continue
        if module.built(exe, source, time.perf_counter() - start, compiler.target):
            module.attach_frozen(c["tensor_args"], c["symbol_sources"], exe,
                                 (c["graph_text"], c["input_types"]))
    gm = _thaw_source(state["top"], modules)
    # a package written before the flag was kept: time the graph's calls, as then
    return PartitionedGraph(gm, ordered, recorder, clock,
                            has_fallback_ops=state.get("has_fallback_ops", True))
