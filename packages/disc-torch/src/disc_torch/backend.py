"""The TorchDynamo backend: ``torch.compile(model, backend="disc")``.

Dynamo captures a graph; aot_autograd traces its forward and backward with torch's
decompositions (:mod:`disc_torch.decompositions`); each of those ATen graphs is
partitioned into DISC clusters and eager ops (:mod:`disc_torch.partition`). The backend is
declared under the ``torch_dynamo_backends`` entry point, so torch finds it by name.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.exc import PackageError, TorchRuntimeError
from torch._functorch import config as functorch_config
from torch._functorch.aot_autograd import SerializableAOTDispatchCompiler, make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._subclasses.fake_tensor import disable_fake_tensor_cache

from disc_core.report import configure as configure_report

from .attention_rewrite import rewrite_causal_attention
from .cluster import Clock
from .compilers import get_compiler
from .config import DiscConfig
from .decompositions import decomposition_table
from .fallback import warn_once
from .identity import PinError
from .joint_cse import cse_joint_graph
from .partition import PartitionedGraph, partition_and_compile, record_failed_graph
from .precompile import (
    DiscOutputCode,
    GraphPackage,
    NotCacheable,
    caching_active,
    forward_of,
)
from .saved_views import save_permute_bases
from .trace_scope import asking

__all__ = ["disc_backend", "get_compiler", "optimize"]

def _graph_compiler(config: DiscConfig, role: str, serializable: bool) -> Callable[..., Any]:
    """aot_autograd's compiler of one role. ``serializable``: return every graph as a
    :class:`~disc_torch.precompile.DiscOutputCode`, which aot_autograd bundles into
    dynamo's precompile package (:mod:`disc_torch.precompile`)."""

    def compile_graph(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        try:
            graph = partition_and_compile(gm, config, get_compiler(config.target), role)
        except Exception as exc:  # DISC must never break the user's program
            detail = f"partitioning the graph failed ({type(exc).__name__}: {exc})"
            warn_once(f"DISC: a {role} graph runs eagerly: {detail}")
            recorder = record_failed_graph(gm, role, detail)
            if not serializable:
                return make_boxed_func(gm)  # aot_autograd calls compiled graphs boxed
            graph = PartitionedGraph(gm, [], recorder, Clock())
        return DiscOutputCode(graph=graph, target=config.target) if serializable else graph

    if serializable:
        return SerializableAOTDispatchCompiler(DiscOutputCode, compile_graph)
    return compile_graph


def partition_joint_graph(joint_module: torch.fx.GraphModule, joint_inputs: Any,
                          **kwargs: Any) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """torch's min-cut partitioner after DISC's own CSE of the joint graph
    (:mod:`disc_torch.joint_cse`) in place of torch's, which imports most of Inductor;
    saved permutes then cross as their bases (:mod:`disc_torch.saved_views`)."""
    cse_joint_graph(joint_module.graph)  # min-cut recompiles the module first thing
    with functorch_config.patch(cse=False):
        fw, bw = min_cut_rematerialization_partition(joint_module, joint_inputs, **kwargs)
    save_permute_bases(fw, bw)
    return fw, bw


def _dynamo_control_flow() -> tuple[type[BaseException], ...]:
    import torch._dynamo.exc as dynamo_exc

    names = ("RestartAnalysis", "TensorifyScalarRestartAnalysis", "SkipFrame")
    return tuple(getattr(dynamo_exc, n) for n in names if hasattr(dynamo_exc, n))


_DYNAMO_CONTROL_FLOW = _dynamo_control_flow()


def disc_backend(gm: torch.fx.GraphModule, example_inputs: list[Any],
                 options: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """Dynamo backend entry point; ``options`` are :class:`DiscConfig` fields."""
    config = DiscConfig.resolve({**(options or {}), **kwargs})
    if config.report_path:
        configure_report(config.report_path)
    # dynamo keeps this graph in disc_torch.optimize's package: compile it into a form
    # the package can hold
    serializable = caching_active() and config.cache_graphs
    backend = aot_autograd(
        fw_compiler=_graph_compiler(config, "forward", serializable),
        bw_compiler=_graph_compiler(config, "backward", serializable),
        inference_compiler=_graph_compiler(config, "inference", serializable),
        decompositions=decomposition_table(config.eager_random),
        keep_inference_input_mutations=True,
        # Like Inductor: the forward saves few tensors and the backward recomputes cheap,
        # fusible ones (views, elementwise chains) inside its own clusters, which costs no
        # extra kernel there and saves writing and re-reading every saved intermediate. A
        # view such as the t(weight) of every linear layer is then read in place by the
        # backward's GEMM rather than copied out of the forward.
        partition_fn=partition_joint_graph,
    )
    fake_mode = torch._guards.detect_fake_mode(example_inputs)
    try:
        rewrite_causal_attention(gm)  # forward and backward become the fused ops
        # aot_autograd traces without fake-tensor caching too (see
        # trace_scope.tracing_config), also when the graph came from
        # torch.compile(backend="disc")
        with (disable_fake_tensor_cache(fake_mode) if fake_mode is not None
              else contextlib.nullcontext()):
            return backend(gm, example_inputs)
    except _DYNAMO_CONTROL_FLOW:
        raise  # dynamo restarting its analysis is not a failure
    except Exception as exc:  # DISC must never break the user's program: run it eagerly
        detail = (f"tracing it for DISC failed ({type(exc).__name__}: "
                  f"{str(exc).splitlines()[0] if str(exc) else ''})")
        warn_once(f"DISC: a captured graph of {len(gm.graph.nodes)} nodes runs eagerly: "
                  f"{detail}")
        try:
            record_failed_graph(gm, "captured", detail)  # every op falls back, with why
        except Exception:  # the report must not break the fallback either
            pass
        return gm.forward


def optimize(model_or_fn: Any, **options: Any) -> Any:
    """``torch.compile`` with the DISC backend and dynamic shapes; the one-line way in.

    Keyword arguments are :class:`DiscConfig` fields (``min_cluster_size``,
    ``excluded_ops``, ``report_path``, ``accuracy_check``, ...). Sizes 0 and 1 are traced
    like other sizes, so a stream of shapes of one rank compiles once (see
    :func:`~disc_torch.trace_scope.tracing_config`). What it traces is kept on disk
    (``cache_graphs``, see :mod:`disc_torch.precompile`): a new process with the same model
    and code runs it without tracing or compiling.
    """
    config = DiscConfig.resolve(options)
    package = _open_package(model_or_fn, config)
    compiled = _dynamo(model_or_fn, options, config, package)

    def without_package(reason: str) -> None:
        nonlocal package, compiled
        warn_once(f"DISC: the traced-graph cache is off for this callable ({reason}); "
                  "it is traced again with all of dynamo's guards")
        package.forget_loaded()
        package = None
        compiled = _dynamo(model_or_fn, options, config, None)

    def call(*args: Any, **kwargs: Any) -> Any:
        if package is not None:
            try:
                package.pins.check(args, kwargs)
            except PinError as exc:
                without_package(str(exc))
        try:
            with asking(True, config.specialize_floats, package is not None,
                        config.skip_logging_calls):
                out = compiled(*args, **kwargs)
        except PackageError as exc:
            if package is None:
                raise
            # dynamo's package bookkeeping failed while compiling a frame (before that
            # frame ran): the cache is never a reason to fail a call, so the call runs
            # again without it (frames of it that already ran, before a graph break, run
            # twice: no tensor they made is kept)
            without_package(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            return call(*args, **kwargs)
        if package is not None:
            package.save_if_grown()
        return out

    @functools.wraps(forward_of(model_or_fn))
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except TorchRuntimeError as exc:
            # torch's own shape reasoning can fail where sizes 0 and 1 are treated like any
            # other (torch 2.13: an integer tensor with an empty middle dim promoted to
            # float); trace this call with torch's 0/1 rules instead, which costs one more
            # graph for such shapes. A genuine error in the program raises again here.
            warn_once(f"DISC: tracing with sizes 0 and 1 treated like other sizes failed "
                      f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); that call "
                      "is traced with torch's own rules for them")
            with asking(False, False, package is not None, config.skip_logging_calls):
                return compiled(*args, **kwargs)

    if isinstance(model_or_fn, torch.nn.Module):
        return _OptimizedModule(model_or_fn, compiled, run)
    return run


def _dynamo(model_or_fn: Any, options: dict[str, Any], config: DiscConfig,
            package: GraphPackage | None) -> Any:
    """dynamo over ``model_or_fn`` with the DISC backend: with ``package``, recording
    into it, identity guards left to its pins; without, every guard. A new backend
    function each time: dynamo's cache entries made for one never match another (those
    made for a package lack the identity guards)."""

    def disc(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        return disc_backend(gm, example_inputs, options=dict(options))

    if package is None:
        return torch._dynamo.optimize(backend=disc, dynamic=config.dynamic)(model_or_fn)
    return torch._dynamo.optimize(backend=disc, dynamic=config.dynamic,
                                  package=package.package,
                                  guard_filter_fn=package.pins.filter)(model_or_fn)


def _open_package(model_or_fn: Any, config: DiscConfig) -> GraphPackage | None:
    """The traced-graph package of this callable (``cache_graphs``), loaded when a
    previous process left one; None when off or when it cannot be opened."""
    if not config.cache_graphs:
        return None
    try:
        return GraphPackage(model_or_fn, config, get_compiler(config.target).cache.directory)
    except NotCacheable:
        return None
    except Exception as exc:  # never a reason to fail: trace as without the cache
        warn_once(f"DISC: the traced-graph cache is off for this callable "
                  f"({type(exc).__name__}: {exc})")
        return None


class _OptimizedModule(torch.nn.Module):
    """The user's module with forward going through DISC (parameters shared, not copied)."""

    def __init__(self, original: torch.nn.Module, compiled: Any, run: Callable[..., Any]):
        super().__init__()
        self._orig_mod = original
        # not registered as submodules: the parameters live once, in _orig_mod
        object.__setattr__(self, "_compiled", compiled)
        object.__setattr__(self, "_run", run)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._run(*args, **kwargs)
