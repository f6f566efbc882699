"""A compiled cluster as an nn.Module inside the partitioned FX graph.

It owns the cluster's original FX submodule (the eager fallback) and, when compilation
succeeded, a disc-runtime executable. Tensors go in by address (or as zero-copy numpy
views), outputs are allocated as torch tensors, so what comes back is torch memory written
by the native module, no copy. Any failure inside DISC turns
the cluster into its eager fallback for good, warns once, and is recorded in the report.
"""

from __future__ import annotations

import dataclasses
import time
import weakref
from concurrent.futures import Future
from typing import Any

import numpy as np
import torch

from disc_core.bridge import selection
from disc_core.bridge.accuracy import AccuracyPolicy, compare_outputs
from disc_core.bridge.attempts import engine_of
from disc_core.dtypes import DType
from disc_core.native import fusion_count, launch_counts
from disc_core.report import KernelTime, ReasonCode, get_collector
from disc_core.symbolic import parse_expr, solve_linear

from . import frozen_weights
from .context import TORCH_DTYPES
from .fallback import NOTICE, DiscFallbackWarning, warn_once
from .lowering import LoweredCluster

__all__ = ["Clock", "ClusterModule", "DiscFallbackWarning", "warn_once"]

_now = time.perf_counter  # a module global: the per-call path reads the clock twice


def _torch_empty_strided(shape: tuple[int, ...], strides: tuple[int, ...],
                         dtype: torch.dtype) -> torch.Tensor:
    return torch.empty_strided(shape, strides, dtype=dtype)


#: a CPU tensor of these sizes, strides and dtype, uninitialized: Inductor's own allocator
#: for its outputs where this torch has it (about half of ``torch.empty``'s cost, whose
#: argument parsing handles every device and option), torch's public call where not
_empty_strided = getattr(getattr(getattr(torch._C, "_dynamo", None), "guards", None),
                         "_empty_strided_cpu", _torch_empty_strided)

#: numpy dtype name of a DISC output -> the torch dtype its tensor is allocated with
_NP_NAME_TO_TORCH = {dt.np_name: t for t, dt in TORCH_DTYPES.items() if dt is not DType.BF16}

def _as_numpy(t: torch.Tensor) -> np.ndarray:
    if t.requires_grad:
        t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.numpy()


#: clusters whose executables are profiling (config ``profile``): a report snapshot
#: brings their step times in through the collector's flush hook
_profiled: weakref.WeakSet[ClusterModule] = weakref.WeakSet()


def _flush_profiles() -> None:
    for module in list(_profiled):
        module.flush_profile()


class Clock:
    """Seconds spent in DISC calls, shared by a graph's clusters: the graph's fallback time
    is its wall time minus this, with no per-call loop over clusters."""

    __slots__ = ("seconds",)

    def __init__(self) -> None:
        self.seconds = 0.0


class ClusterModule(torch.nn.Module):
    """Runs one cluster through DISC, or its FX submodule when DISC cannot."""

    def __init__(self, fallback: torch.fx.GraphModule, cluster_id: int, recorder: Any,
                 clock: Clock, *, single_output: bool,
                 accuracy_check: AccuracyPolicy | None = None, profile: bool = False,
                 arity: tuple[int, int] | None = None):
        """``arity``: (arguments, ops) of ``fallback`` when it is not an FX GraphModule
        (a cluster thawed from the graph cache, :mod:`disc_torch.frozen`)."""
        super().__init__()
        self.fallback = fallback
        self.cluster_id = cluster_id
        self._recorder = recorder
        self._single = single_output
        self._exe: Any = None
        self._clock = clock
        #: this cluster's calls and seconds in DISC, per thread (read by the report)
        self._tally = recorder.cluster_tally(cluster_id)
        self._tally_cell = self._tally.local  # the per-call path reads its cell here
        self._sources: list[tuple[str, tuple]] = []
        #: the accuracy guard's policy (None: off) and the calls it has seen
        self._check = accuracy_check
        self._calls = 0
        #: arguments of the cluster itself; more may follow that only bind size symbols
        if arity is None:
            nodes = fallback.graph.nodes
            arity = (sum(1 for n in nodes if n.op == "placeholder"),
                     sum(1 for n in nodes if n.op == "call_function"))
        self.n_own, self.n_ops = arity
        self._build: Future | None = None
        self._lowered: LoweredCluster | None = None
        self._source_text: tuple[str, list] | None = None
        self._profile = profile
        self._dump_key: str | None = None
        self._pointer: Any = None  # the executable's raw-address call (attach_frozen)
        self._pack_args: list[tuple[int, int]] = []
        self._last_plan: tuple[list[int], Any] = ([], None)

    def building(self, lowered: LoweredCluster, future: Future) -> None:
        """The background build of ``lowered`` that will attach the executable (or fail
        the cluster)."""
        self._lowered = lowered
        self._build = future

    def _settle(self) -> None:
        build = self._build
        if build is None:
            return
        try:
            build.result()
        except Exception as exc:  # the build records its own failures; this is a bug net
            self.fail(ReasonCode.COMPILE_ERROR, f"{type(exc).__name__}: {exc}")
        self._build = None

    @property
    def compiled(self) -> bool:
        self._settle()
        return self._exe is not None

    def built(self, executable: Any, source: str, seconds: float, target: str) -> bool:
        """Record a finished build (or compile-cache load) of this cluster in the report;
        False, with the cluster failed, when it has no native code on a native target, or
        left out when ``DISC_BISECT_CLUSTERS`` does not list its key."""
        if not selection.admit(self._recorder, self.cluster_id, executable.artifact.key):
            self._exe = None
            return False
        native = executable.artifact.metadata.get("native")
        if native is None and target != "reference":
            self.fail(ReasonCode.COMPILE_ERROR, "no native code: " + str(
                executable.artifact.metadata.get("native_fallback", "unknown reason")))
            return False
        counts = launch_counts(native)  # generated kernels and GEMM calls, apart
        kernels, library_calls = counts if counts else (None, None)
        self._recorder.cluster_compiled(
            self.cluster_id, seconds=seconds, cache_hit=source != "miss", kernels=kernels,
            fusions=fusion_count(native), library_calls=library_calls,
            engine=engine_of(executable, NOTICE))
        return True

    def attach(self, lowered: LoweredCluster, executable: Any) -> None:
        self._lowered = lowered  # frozen_state keeps its text
        self.attach_frozen(lowered.tensor_args, lowered.symbol_sources, executable)

    def attach_frozen(self, tensor_args: list[int], symbol_sources: list[tuple[str, tuple]],
                      executable: Any, source: tuple[str, list] | None = None) -> None:
        """Run ``executable`` from now on, fed as :class:`LoweredCluster` says; ``source``
        is its core graph's (text, input types) when there is no lowered graph."""
        self._source_text = source
        self._tensor_args = list(tensor_args)
        self._raw_sources = list(symbol_sources)
        self._sources = [(name, _prepare(src)) for name, src in symbol_sources]
        self._exe = executable
        self._pointer, self._pointer_specs, self._out_dtypes = _pointer_path(
            executable, self._tensor_args, len(self._sources))
        #: (module input, argument position) of the weights its GEMMs may keep packed
        #: while frozen (:mod:`disc_torch.frozen_weights`)
        self._pack_args = [(j, self._pointer_specs[j][0]) for j in
                           getattr(self._pointer, "pack_inputs", ())
                           if j < len(self._pointer_specs)]
        self._last_plan = ([], None)  # a plan of another executable would not fit
        #: its key while its first call's inputs are still to be saved (DISC_BISECT_DUMP)
        self._dump_key = executable.artifact.key if selection.dump_dir() else None
        if self._profile and executable.can_profile:
            executable.start_profiling()
            _profiled.add(self)
            get_collector().add_flush_hook(_flush_profiles)  # registered once, whoever asks

    def frozen_state(self) -> dict[str, Any]:
        """What :mod:`disc_torch.frozen` keeps of this cluster: its core graph as text
        (the compile-cache key) and how its inputs are fed; or that it runs eagerly.

        It does not wait for a build in flight (aot_autograd serializes the forward while
        the backward's clusters still build): a build that then fails is tried again, and
        fails again, when the cache is loaded."""
        state: dict[str, Any] = {
            "cluster_id": self.cluster_id, "single_output": self._single,
            "check": None if self._check is None else dataclasses.asdict(self._check),
            "profile": self._profile,
            "arity": (self.n_own, self.n_ops)}
        lowered = self._lowered
        settled_failed = self._build is None and self._exe is None
        if settled_failed or (lowered is None and self._source_text is None):
            state["failed"] = True  # runs eagerly, with its reason in the report
            return state
        if lowered is not None:  # compiled in this process
            graph = lowered.graph
            text, types = str(graph), [(v.dtype.np_name, v.rank) for v in graph.inputs]
            tensor_args, sources = lowered.tensor_args, lowered.symbol_sources
        else:  # thawed: kept as it was loaded
            (text, types), tensor_args, sources = (self._source_text, self._tensor_args,
                                                   self._raw_sources)
        state.update(graph_text=text, input_types=[list(t) for t in types],
                     tensor_args=list(tensor_args), symbol_sources=list(sources))
        return state

    def flush_profile(self) -> None:
        """Bring this cluster's step times into its report record (at snapshot time)."""
        exe = self._exe
        steps = exe.profile() if exe is not None else None
        if steps:
            self._recorder.cluster_profile(self.cluster_id, [KernelTime(**s) for s in steps])

    def fail(self, code: ReasonCode, detail: str) -> None:
        """From now on this cluster runs eagerly; say so once and record why."""
        self._exe = None
        NOTICE.cluster_failed(self._recorder, self.cluster_id, f"a cluster of {self.n_ops} ops",
                              code, detail, stacklevel=2)

    def forward(self, *args: Any) -> Any:
        if self._build is not None:
            self._settle()
        if self._exe is None:
            return self.fallback(*args[:self.n_own])
        start = _now()
        try:
            outs = self._run(args)
        except Exception as exc:  # DISC must never break the user's program
            self.fail(ReasonCode.RUNTIME_ERROR, f"{type(exc).__name__}: {exc}")
            return self.fallback(*args[:self.n_own])
        elapsed = _now() - start
        self._clock.seconds += elapsed
        try:
            cell = self._tally_cell.cell
        except AttributeError:
            cell = self._tally.cell()
        cell[0] += 1
        cell[1] += elapsed
        if self._check is not None:
            self._calls += 1
            if self._check.due(self._calls - 1):
                expected = self.fallback(*args[:self.n_own])
                expected = [expected] if self._single else list(expected)
                mismatch = self._compare(outs, expected)
                if mismatch:
                    self.fail(ReasonCode.ACCURACY_MISMATCH, f"accuracy check failed: {mismatch}")
                    return expected[0] if self._single else tuple(expected)
        return outs[0] if self._single else tuple(outs)

    #: the partitioned graph's code calls clusters directly: ``nn.Module.__call__``'s hook
    #: machinery (nobody hooks a cluster) cost about as much as a small cluster's native
    #: call, and every Python frame on this path counts double inside a compiled model,
    #: where dynamo's and aot_autograd's wrappers have just evicted it from the caches
    __call__ = forward

    def _run(self, args: tuple[Any, ...]) -> list[torch.Tensor]:
        """The cluster's outputs, torch tensors the native module wrote.

        The usual call hands the tensors' addresses straight to the module
        (:class:`~disc_runtime.native.PointerCall`), after the checks the runtime's numpy
        path would make: dtype, rank, CPU memory (a non-contiguous input is copied), with
        the outputs allocated in the shapes the module plans for these dims, new dims
        included. Anything else takes that path (:meth:`_run_arrays`): an input of another
        dtype, rank or device (the runtime's error), a module without plans (built before
        ``disc_output_dims``, or outputs whose shapes depend on values), a reproducer dump.
        One function, not one per step: this path is kept to few Python frames."""
        call = self._pointer
        if call is not None and self._dump_key is None:
            addresses: list[int] = []
            dims: list[int] = []
            copies: list[torch.Tensor] = []  # contiguous copies, alive until the call ends
            nonnull = call.nonnull
            for i, dtype, rank in self._pointer_specs:
                t = args[i]
                if t.dtype is not dtype or t.dim() != rank or not t.is_cpu:
                    return self._run_arrays(args)  # raises the runtime's error, or copes
                if not t.is_contiguous():
                    # a view (``tokens[:, :-1]``, the usual shift of a language model's
                    # batch) is copied, as the numpy path would, and the call stays here:
                    # that path's per-output callbacks cost a training step milliseconds
                    t = t.contiguous()
                    copies.append(t)
                addresses.append(t.data_ptr() or nonnull)
                dims += t.shape
            for _name, source in self._sources:  # a size symbol: a [value, 0] input
                addresses.append(nonnull)
                dims += (_symbol_value(source, args, self.n_own), 0)
            last = self._last_plan  # (dims, plan) of the last call: one read, so atomic
            if dims == last[0]:
                plan = last[1]
            else:
                plan = call.plan(tuple(dims))
                if plan is not None:
                    self._last_plan = (dims, plan)
            stamps = None
            if self._pack_args and frozen_weights.any_frozen():
                stamps = [0] * len(addresses)
                for j, i in self._pack_args:
                    stamps[j] = frozen_weights.stamp(args[i])
            if plan is not None:  # output shapes known for these dims
                outs: list[torch.Tensor] = []
                out_addresses: list[int] = []
                for shape, strides, dtype in zip(plan.shapes, plan.strides, self._out_dtypes):
                    out = _empty_strided(shape, strides, dtype)
                    outs.append(out)
                    out_addresses.append(out.data_ptr() or nonnull)
                if call(plan, addresses, dims, out_addresses, stamps):
                    return outs
                self._last_plan = ([], None)  # the module plans no more (value-dependent)
        return self._run_arrays(args)

    def _run_arrays(self, args: tuple[Any, ...]) -> list[torch.Tensor]:
        """The cluster's outputs through the runtime's checked numpy path: inputs as numpy
        views (zero copy; a non-contiguous one copied), outputs allocated as torch tensors
        by the ``allocate_output`` hook."""
        arrays = [_as_numpy(args[i]) for i in self._tensor_args]
        for _name, source in self._sources:
            arrays.append(np.empty((_symbol_value(source, args, self.n_own), 0), np.uint8))
        if self._dump_key is not None:
            self._dump(arrays, args)
        allocated: dict[int, torch.Tensor] = {}

        def allocate(index: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
            t = torch.empty(*shape, dtype=_NP_NAME_TO_TORCH[dtype]) if shape else torch.empty(
                (), dtype=_NP_NAME_TO_TORCH[dtype])
            allocated[index] = t
            return t.numpy()

        results = self._exe.run(arrays, allocate_output=allocate)
        return [allocated[i] if i in allocated else torch.from_numpy(np.asarray(r))
                for i, r in enumerate(results)]

    def _dump(self, arrays: list[np.ndarray], args: tuple[Any, ...]) -> None:
        """Save this first call's inputs and eager torch's outputs for a reproducer."""
        key, self._dump_key = self._dump_key, None

        def eager() -> list[np.ndarray]:
            with torch.no_grad():
                out = self.fallback(*args[:self.n_own])
            return [_as_numpy(t) for t in ([out] if self._single else out)]

        selection.dump_inputs(key, arrays, eager)

    def _compare(self, outs: list[torch.Tensor], expected: list[Any]) -> str | None:
        """The accuracy guard's verdict on one call (None: the outputs match eager's)."""
        if len(outs) != len(expected):
            return f"{len(outs)} outputs, eager gives {len(expected)}"
        for i, (got, want) in enumerate(zip(outs, expected)):
            if not isinstance(want, torch.Tensor) or got.dtype != want.dtype:
                return f"output #{i} is a {got.dtype} tensor, eager gives {want!r:.80}"
        return compare_outputs([_as_numpy(t) for t in outs],
                               [_as_numpy(t) for t in expected], self._check)


def _pointer_path(executable: Any, tensor_args: list[int], n_symbols: int
                  ) -> tuple[Any, list[tuple[int, torch.dtype, int]], list[torch.dtype]]:
    """The executable's raw-address call with, per tensor argument, (argument position,
    torch dtype, rank) it must have, and the torch dtype of each output; (None, [], [])
    when it has no such call or a dtype has no torch counterpart."""
    call = getattr(executable, "pointer_call", None)
    if call is None or len(call.in_specs) != len(tensor_args) + n_symbols:
        return None, [], []
    try:
        specs = [(i, _NP_NAME_TO_TORCH[dtype.name], rank)
                 for i, (dtype, rank) in zip(tensor_args, call.in_specs)]
        out_dtypes = [_NP_NAME_TO_TORCH[dtype.name] for dtype in call.out_dtypes]
    except KeyError:
        return None, [], []
    return call, specs, out_dtypes


def _prepare(source: tuple) -> tuple:
    if source[0] == "dim":
        return ("dim", source[1], source[2], parse_expr(source[3]))
    return source


def _symbol_value(source: tuple, args: tuple[Any, ...], n_own: int) -> int:
    if source[0] == "arg":
        return int(args[source[1]])
    if source[0] == "extra":
        value = args[n_own + source[1]]
        return int(value) if source[2] is None else int(value.shape[source[2]])
    _, pos, axis, expr = source
    solved = solve_linear(expr, int(args[pos].shape[axis]), {})
    if solved is None:
        raise ValueError(f"cannot solve {expr} = {args[pos].shape[axis]}")
    return solved[1]
