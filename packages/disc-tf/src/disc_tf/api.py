"""``disc_tf.function``, ``enable()`` and ``disable()``: tf.function with DISC clusters.

A :class:`DiscFunction` wraps the user's Python function in a plain ``tf.function``. On a
call it traces a concrete function with every unpinned input dim relaxed to unknown (so one
trace and one compilation serve every shape of a rank), clusters and compiles it
(:mod:`disc_tf.partition`), rebuilds it with launch ops (:mod:`disc_tf.rewrite`) and calls
the rebuilt function. Any failure before the first call (conversion, compilation, the
rewrite itself) keeps the affected clusters, or the whole function, in TensorFlow with one
warning and a report entry; failures while running are handled by the launch op itself.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import record
from tensorflow.python.eager.polymorphic_function import autograph_util, function_type_utils
from tensorflow.python.framework.composite_tensor import CompositeTensor
from tensorflow.python.framework.ops import EagerTensor

from disc_core.bridge import fallback
from disc_core.bridge.accuracy import failure_reason
from disc_core.bridge.attempts import Attempt, compile_clusters, record_outcome, split_clustering
from disc_core.bridge.compilers import CompilerRegistry
from disc_core.bridge.launch import flush_cluster_calls
from disc_core.compiler import Compiler
from disc_core.report import KernelTime, ReasonCode, configure, get_collector, graph_report

from .config import DiscConfig
from .partition import Analysis, analyze, compile_cluster, lower_cluster, overrides_gradient
from .rewrite import Launch, rebuild_function

__all__ = ["DiscFallbackWarning", "DiscFunction", "compile_count", "disable", "enable",
           "function", "get_compiler", "is_enabled"]

_ORIGINAL_FUNCTION = tf.function
#: this bridge's process-wide compilers (compile counts are TF's own)
COMPILERS = CompilerRegistry()
_enabled: DiscConfig | None = None
#: cluster key -> (recorder, cluster id, description): where runtime failures are reported
_launch_owners: dict[str, tuple[Any, int, str]] = {}


class _Tracing(threading.local):
    """Per thread: how many DiscFunctions are being traced (calls of others are inlined
    while > 0), how many calls were inlined so far, and whether inlining is switched off
    (> 0: a retry of a trace that failed with calls inlined)."""

    depth = 0
    inlined = 0
    blocked = 0


_tracing = _Tracing()


class DiscFallbackWarning(fallback.DiscFallbackWarning):
    """Part of a program runs in TensorFlow instead of DISC (results are unaffected)."""


NOTICE = fallback.FallbackNotice(DiscFallbackWarning, "in TensorFlow")
#: warn once per distinct message (a bound method: the warning points at the caller's caller)
warn_once = NOTICE.warn


def get_compiler(target: str = "auto") -> Compiler:
    """The process-wide DISC compiler of a target (its stats count compilations)."""
    return COMPILERS.get(target)


def compile_count(target: str = "auto") -> int:
    """How many DISC compilations (cache misses) this process did for TF clusters."""
    return COMPILERS.compile_count(target)


def _op_library() -> Any:
    from .custom_op import load_library

    return load_library()


def _relax(x: Any) -> Any:
    """A tensor argument as a TensorSpec with every dim unknown; anything else as is."""
    if isinstance(x, tf.Variable):
        return x
    if isinstance(x, (tf.Tensor, np.ndarray)) and not isinstance(x, tf.RaggedTensor):
        shape = x.shape
        rank = len(shape) if isinstance(x, np.ndarray) else shape.rank
        if rank is None:
            return tf.TensorSpec(None, tf.as_dtype(x.dtype))
        return tf.TensorSpec([None] * rank, tf.as_dtype(x.dtype))
    return x


def _key_of(x: Any) -> Any:
    if isinstance(x, tf.TensorSpec):
        return ("T", x.dtype.name, x.shape.rank)
    if isinstance(x, CompositeTensor) and not isinstance(x, tf.Variable):
        # by type, as tf.function keys it: Keras's fit passes a new dataset iterator
        # (a tf.data or tf.distribute iterator) every epoch, and keyed by identity each
        # epoch traced, analyzed and rebuilt the train function again
        return ("C", type(x).__name__, x._type_spec)  # noqa: SLF001
    try:
        hash(x)
    except TypeError:
        return ("id", id(x))
    return ("v", type(x).__name__, x) if isinstance(x, (int, float, str, bool, type(None))) \
        else ("id", id(x))


def _exact_key_of(x: Any) -> Any:
    """Like :func:`_key_of` with the concrete shape (per-shape tracing)."""
    if isinstance(x, (tf.Tensor, np.ndarray)) and not isinstance(x, tf.RaggedTensor):
        return ("S", tf.as_dtype(x.dtype).name, tuple(x.shape))
    return _key_of(x)


@dataclass
class _Entry:
    """One traced signature: the rebuilt function (None: run the plain tf.function)."""

    original: Any
    rebuilt: Any = None
    launches: list[Launch] = field(default_factory=list)
    recorder: Any = None
    keepalive: list[Any] = field(default_factory=list)
    # False when the function holds custom gradients (tf.custom_gradient, tf.nn.swish):
    # their gradient functions close over the original graph's tensors, so TensorFlow can
    # differentiate the original function but not the rebuilt one
    rebuilt_differentiable: bool = True
    name: str = ""
    #: (i, a, j, b): the rebuilt function assumes dim a of flat input i equals dim b of
    #: flat input j (partition.analyze's equal_dims); a call breaking one runs the original
    equal_dims: list[tuple[int, int, int, int]] = field(default_factory=list)

    def fits(self, flat: list[Any]) -> bool:
        """Whether these flat inputs satisfy :attr:`equal_dims` (static shapes; a dim
        unknown in a graph-mode call does not)."""
        for i, a, j, b in self.equal_dims:
            da, db = flat[i].shape[a], flat[j].shape[b]
            if da is None or da != db:
                return False
        return True


class DiscFunction:
    """A tf.function whose supported subgraphs run as DISC-compiled clusters."""

    def __init__(self, python_function: Callable[..., Any], config: DiscConfig | None = None,
                 *, from_enable: bool = False, **tf_kwargs: Any):
        if not callable(python_function):
            raise TypeError(f"disc_tf.function needs a callable, got "
                            f"{type(python_function).__name__}")
        self._config = config or DiscConfig.resolve()
        self._from_enable = from_enable
        jit = tf_kwargs.pop("jit_compile", None)
        self._xla = bool(jit) and not self._config.override_xla
        if self._xla:
            tf_kwargs["jit_compile"] = True  # the user keeps XLA: DISC stays out
        self._pinned = tf_kwargs.get("input_signature") is not None
        self._tf = _ORIGINAL_FUNCTION(python_function, **tf_kwargs)
        self._tf_args = (python_function, dict(tf_kwargs))
        self._traced = False  # whether self._tf has completed a trace
        self._entries: dict[str, _Entry] = {}
        self._static_keys: set[str] = set()
        # fast-path signature -> (entry, positions of the arguments its flat inputs are)
        self._fast: dict[tuple[Any, ...], tuple[_Entry, list[int]]] = {}
        self._signature = _flat_signature(tf_kwargs.get("input_signature"))
        self._entry_lock = threading.Lock()
        functools.update_wrapper(self, python_function)
        self._instance: Any = None

    # -- tf.function compatibility -------------------------------------------------------
    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        bound = functools.partial(self.__call__, instance)
        return bound

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.__dict__["_tf"], name)

    @property
    def python_function(self) -> Callable[..., Any]:
        return self._tf.python_function

    def coverage(self) -> Any:
        """The coverage report (``disc_core.report.GraphReport``) of the most recently
        traced signature, or None before the first call."""
        _flush_cluster_calls()
        for entry in reversed(list(self._entries.values())):
            if entry.recorder is not None:
                return entry.recorder.graph
        return None

    def uses_disc(self) -> bool:
        """Whether the most recently traced signature runs any DISC cluster."""
        entries = list(self._entries.values())
        return bool(entries) and entries[-1].rebuilt is not None

    # -- calls -----------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._xla or (self._from_enable and _enabled is None):
            return self._tf(*args, **kwargs)
        if _tracing.depth and not _tracing.blocked and not self._pinned and \
                not tf.executing_eagerly():
            _tracing.inlined += 1
            return self._inline(*args, **kwargs)
        # the per-call fast path: positional tensors (and scalars) of a signature seen before
        fast = None if kwargs else _fast_key(args)
        if fast is not None and self._pinned and not self._fits_signature(args):
            fast = None  # the general path raises TensorFlow's error for the mismatch
        hit = self._fast.get(fast) if fast is not None else None
        if hit is None:
            entry, exact = self._entry_for(args, kwargs)
        else:
            entry, exact = hit[0], False
        if entry.rebuilt is None:
            start = time.perf_counter()
            out = self._tf(*args, **kwargs)
            if tf.executing_eagerly() and _launch_owners:
                self._after_call(entry, time.perf_counter() - start)
            return out
        cf = entry.original
        if hit is not None:  # the flat inputs are the tensor arguments, in order
            flat = [args[i] for i in hit[1]]
        else:
            bound = function_type_utils.canonicalize_function_inputs(args, kwargs,
                                                                     cf.function_type)
            flat = cf.function_type.unpack_inputs(bound)
            if fast is not None and not exact:
                tensors = [i for i, a in enumerate(args) if type(a) is EagerTensor]
                if len(flat) == len(tensors) and all(
                        f is args[i] for f, i in zip(flat, tensors)):
                    self._fast[fast] = (entry, tensors)
        if entry.equal_dims and not entry.fits(flat):
            self._warn_unfit(entry, flat)
            return self._tf(*args, **kwargs)
        start = time.perf_counter()
        try:
            if entry.rebuilt_differentiable:
                out = entry.rebuilt._call_flat(flat, entry.rebuilt.captured_inputs)  # noqa: SLF001
            else:
                out = self._call_keeping_gradient(entry, flat)
        except Exception:
            # a cluster that failed in this call (its fallback then raised TensorFlow's
            # error for bad input) is reported now, not at some later call of any function
            if tf.executing_eagerly():
                _check_launches()
            raise
        # the rebuilt function returns a flat list: restore the Python function's structure
        out = cf.function_type.pack_output(tf.nest.flatten(out, expand_composites=True))
        if tf.executing_eagerly():
            self._after_call(entry, time.perf_counter() - start)
        return out

    def _warn_unfit(self, entry: _Entry, flat: list[Any]) -> None:
        warn_once(f"DISC: function {getattr(self, '__name__', 'a function')}: a call whose "
                  "argument shapes break what its clusters assume (dims the gradient of a "
                  "broadcast between arguments takes as equal, "
                  f"{[(i, a, j, b) for i, a, j, b in entry.equal_dims]} as (argument, "
                  "axis) pairs) runs in TensorFlow")

    def _inline(self, *args: Any, **kwargs: Any) -> Any:
        """Trace the Python function straight into the graph another DiscFunction is
        tracing, as tf.function would trace it into its own graph (autograph included).

        A call of a nested function is a call op the enclosing function's clusters cannot
        take in: every such call splits them, and the callee is traced, clustered and
        compiled on its own. Keras convolves through a nested ``tf.function``
        (``_conv_xla``) whenever the input's channel dim is unknown, as it is in a trace
        with every dim relaxed: in MobileNetV3 that was one more cluster boundary in
        predict and two in a train step. Inlined, the callee's ops join the caller's
        clusters (the caller's automatic control dependencies order its stateful ops)."""
        fn = self._tf.python_function
        tf_kwargs = self._tf_args[1]
        if tf_kwargs.get("autograph", True):
            fn = autograph_util.py_func_from_autograph(
                fn, tf_kwargs.get("experimental_autograph_options"))
        return fn(*args, **kwargs)

    @staticmethod
    def _call_keeping_gradient(entry: _Entry, flat: list[Any]) -> Any:
        """Call a rebuilt function TensorFlow cannot differentiate (it held custom
        gradients) so that any gradient taken is the original function's. Under a tape
        (eager, or inside a function being traced) the original runs: the tape records
        its gradient. Otherwise the rebuilt one runs; traced into another function, its
        call op gets the original's gradient for ``tf.gradients`` (TensorFlow's delayed
        rewrite: if the outer graph is differentiated through this call, the call becomes
        the original's forward, so that forward runs in TensorFlow)."""
        cf, rebuilt = entry.original, entry.rebuilt
        if record.could_possibly_record():
            warn_once(f"DISC: function {entry.name} runs in TensorFlow under a "
                      "GradientTape: it has custom gradients (tf.custom_gradient, e.g. "
                      "tf.nn.swish), which TensorFlow cannot take through the function DISC "
                      "rebuilt (a train step traced whole, as Keras fit does, keeps DISC)")
            return cf._call_flat(flat, cf.captured_inputs)  # noqa: SLF001
        if tf.executing_eagerly():
            return rebuilt._call_flat(flat, rebuilt.captured_inputs)  # noqa: SLF001
        graph = tf.compat.v1.get_default_graph()
        before = len(graph.get_operations())
        out = rebuilt._call_flat(flat, rebuilt.captured_inputs)  # noqa: SLF001
        name = rebuilt.name.decode() if isinstance(rebuilt.name, bytes) else str(rebuilt.name)
        for op in graph.get_operations()[before:]:
            if op.type in ("PartitionedCall", "StatefulPartitionedCall") and \
                    op.get_attr("f").name == name:
                op._gradient_function = cf._get_gradient_function()  # noqa: SLF001
        return out

    def _fits_signature(self, args: tuple[Any, ...]) -> bool:
        """Whether these tensors (the fast path's arguments) fit the pinned signature."""
        sig = self._signature
        if sig is None or len(sig) != len(args):
            return False
        for a, (dtype, dims) in zip(args, sig):
            if a.dtype != dtype:
                return False
            if dims is not None:
                shape = a.shape.as_list()
                if len(shape) != len(dims) or any(
                        d is not None and d != n for d, n in zip(dims, shape)):
                    return False
        return True

    def _entry_for(self, args: Any, kwargs: Any) -> tuple[_Entry, bool]:
        """The traced signature for these arguments, traced and compiled on first sight;
        and whether it is an exact-shape one (the function could not be traced relaxed)."""
        r_args = tf.nest.map_structure(_relax, args)
        r_kwargs = tf.nest.map_structure(_relax, kwargs)
        key = repr(tf.nest.map_structure(_key_of, (r_args, r_kwargs)))
        if self._pinned:  # the input_signature fixes the traced shapes
            r_args, r_kwargs = args, kwargs
        exact = key in self._static_keys
        if exact:  # relaxing failed for this signature before
            key = repr(tf.nest.map_structure(_exact_key_of, (args, kwargs)))
            r_args, r_kwargs = args, kwargs
        entry = self._entries.get(key)
        if entry is not None:
            return entry, exact
        with self._entry_lock:
            entry = self._entries.get(key)
            if entry is not None:
                return entry, exact
            try:
                entry = self._build(r_args, r_kwargs)
            except Exception as exc:
                if self._pinned or r_args is args:
                    raise
                # the Python function needs some dim static (a Keras layer building its
                # weights from the feature dim): trace with the call's shapes, one
                # compilation per shape
                warn_once(f"DISC: tracing {getattr(self, '__name__', 'a function')} "
                          f"with every dim dynamic failed ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:200]}); it is traced per shape "
                          "instead (pin the dynamic dims with input_signature)")
                self._static_keys.add(key)
                exact = True
                key = repr(tf.nest.map_structure(_exact_key_of, (args, kwargs)))
                entry = self._build(args, kwargs)
            self._entries[key] = entry
        return entry, exact

    def _after_call(self, entry: _Entry, seconds: float) -> None:
        """Per eager call: new runtime failures become warnings and report entries now, and
        the graph's call is recorded with the time its fallback ops took (the call's time
        less the time spent in DISC modules meanwhile, by this function or any it called).
        Per-cluster call counts are gathered lazily, when a report is read."""
        in_disc = _check_launches()
        if entry.recorder is not None:
            entry.recorder.graph_call(max(seconds - in_disc, 0.0))

    def get_concrete_function(self, *args: Any, **kwargs: Any) -> Any:
        """The rebuilt concrete function for these arguments (relaxed as calls are)."""
        r_args = tf.nest.map_structure(_relax, args)
        r_kwargs = tf.nest.map_structure(_relax, kwargs)
        key = repr(tf.nest.map_structure(_key_of, (r_args, r_kwargs)))
        if self._pinned:
            r_args, r_kwargs = args, kwargs
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = self._build(r_args, r_kwargs)
        return entry.rebuilt if entry.rebuilt is not None else entry.original

    # -- building --------------------------------------------------------------------------
    def _mode(self) -> str:
        mode = self._config.execution
        compiler = get_compiler(self._config.target)
        if mode == "numpy_function":
            return mode
        if compiler.target == "reference":
            if mode == "custom_op":
                raise RuntimeError("execution='custom_op' needs native code (target "
                                   "'native' and a C compiler)")
            return "numpy_function"
        try:
            _op_library()
        except Exception as exc:
            if mode == "custom_op":
                raise
            warn_once(f"DISC: the DiscLaunch custom op is unavailable ({exc}); clusters run "
                      "through tf.numpy_function instead")
            return "numpy_function"
        return "custom_op"

    def _fresh_after_failed_trace(self) -> None:
        """TensorFlow lets only a tf.function's first trace create variables (a Keras
        optimizer's slots, built in the train step), and a first trace that raised leaves
        it unable to create any: a retry would fail. A fresh tf.function makes the next
        trace the first again."""
        if not self._traced:
            self._tf = _ORIGINAL_FUNCTION(self._tf_args[0], **self._tf_args[1])

    def _trace(self, args: Any, kwargs: Any) -> Any:
        """The concrete function, DISC functions called meanwhile traced into it; if that
        trace fails after inlining any, it is retried with them called as functions
        (inlining must never be what breaks a program)."""
        inlined = _tracing.inlined
        _tracing.depth += 1
        try:
            return self._tf.get_concrete_function(*args, **kwargs)
        except Exception as exc:
            if _tracing.inlined == inlined or _tracing.blocked:
                raise
            self._fresh_after_failed_trace()
            warn_once(f"DISC: tracing {getattr(self, '__name__', 'a function')} with the "
                      f"functions it calls traced into it failed ({type(exc).__name__}: "
                      f"{str(exc).splitlines()[0][:200] if str(exc) else ''}); they are "
                      "called as functions instead")
            _tracing.blocked += 1
            try:
                return self._tf.get_concrete_function(*args, **kwargs)
            finally:
                _tracing.blocked -= 1
        finally:
            _tracing.depth -= 1

    def _build(self, args: Any, kwargs: Any) -> _Entry:
        try:
            cf = self._trace(args, kwargs)
        except Exception:
            self._fresh_after_failed_trace()
            raise
        self._traced = True
        entry = _Entry(cf)
        config = self._config
        if config.report_path:
            configure(config.report_path)
        name = getattr(self._tf, "__name__", None) or cf.name.decode() \
            if isinstance(cf.name, bytes) else str(cf.name)
        try:
            arguments = _argument_names(cf)
            analysis = analyze(cf.graph, min_cluster_size=config.min_cluster_size,
                               excluded_ops=config.excluded_ops,
                               outputs=[t.name for t in cf.outputs], arguments=arguments)
            position = {name: i for i, name in enumerate(arguments)}
            entry.equal_dims = [(position[ta], a, position[tb], b)
                                for (ta, a), (tb, b) in analysis.equal_dims]
        except Exception as exc:  # DISC must never break the user's program
            warn_once(f"DISC: function {name} runs in TensorFlow: analyzing its graph failed "
                      f"({type(exc).__name__}: {exc})")
            return entry
        mode_error: Exception | None = None
        attempts: list[Attempt] = []
        if analysis.clustering.clusters:
            try:
                mode = self._mode()
            except Exception as exc:
                mode_error = exc
            else:
                attempts = self._compile(cf, analysis, mode == "custom_op")
                analysis.clustering = split_clustering(analysis.clustering, attempts)
        report = graph_report(name, analysis.nodes, analysis.clustering,
                              op_type=lambda op: op.type, support=analysis.verdicts,
                              node_name=lambda op: op.name)
        recorder = get_collector().add_graph(report, framework="tensorflow",
                                             framework_version=tf.__version__)
        entry.recorder = recorder
        if not analysis.clustering.clusters:
            return entry
        if mode_error is not None:
            for c in analysis.clustering.clusters:
                recorder.cluster_failed(c.id, ReasonCode.COMPILE_ERROR, str(mode_error))
            warn_once(f"DISC: function {name} runs in TensorFlow: {mode_error}")
            return entry
        launches = self._record(cf, attempts, recorder)
        if not launches:
            return entry
        if self._config.profile:
            _start_profiling(launches, recorder, mode)
        try:
            entry.rebuilt = rebuild_function(
                cf, launches, mode, numpy_runner=_numpy_runner, keepalive=entry.keepalive,
                dead={op.name for op in analysis.dead})
        except Exception as exc:
            for launch in launches:
                recorder.cluster_failed(launch.cluster_id, ReasonCode.COMPILE_ERROR,
                                        f"rebuilding the function failed: {exc}")
            warn_once(f"DISC: function {name} runs in TensorFlow: rebuilding it with DISC "
                      f"clusters failed ({type(exc).__name__}: {exc})")
            entry.rebuilt = None
            return entry
        entry.launches = launches
        if any(overrides_gradient(op) for op in cf.graph.get_operations()):
            # by identity of what is captured (a call-time capture is its closure)
            if [id(t) for t in entry.rebuilt._captured_inputs] != \
                    [id(t) for t in cf._captured_inputs]:  # noqa: SLF001
                # the original's gradient could not be attached to a call of the rebuilt
                # function (its inputs differ): this function stays in TensorFlow
                warn_once(f"DISC: function {name} runs in TensorFlow: it has custom "
                          "gradients and its rebuilt form captures other inputs")
                entry.rebuilt = None
                return entry
            entry.rebuilt_differentiable = False
            entry.name = name
        _flush_cluster_calls()  # calls so far of a shared cluster key go to its old owner
        for launch in launches:
            _launch_owners[launch.key] = (recorder, launch.cluster_id,
                                          f"{len(launch.lowered.members)} ops of {name}")
        return entry

    def _compile(self, cf: Any, analysis: Analysis, native: bool) -> list[Attempt]:
        """Lower and compile every cluster (the bridge kit's ``compile_clusters``: in
        parallel, a cluster the native engine refuses halved and retried)."""
        readers: dict[str, set[tf.Operation]] = {}
        for op in analysis.order:
            if op in analysis.dead:
                continue
            for t in op.inputs:
                readers.setdefault(t.name, set()).add(op)
        outputs = {t.name for t in cf.outputs}
        compiler = get_compiler(self._config.target)

        def lower(members: list[tf.Operation]) -> Any:
            member_set = set(members)
            outside = {t.name: t.name in outputs or any(r not in member_set
                                                        for r in readers.get(t.name, ()))
                       for op in members for t in op.outputs}
            try:
                return lower_cluster(analysis, members, outside, "disc_cluster")
            except Exception:  # e.g. a broadcast between unrelated fresh sizes
                return lower_cluster(analysis, members, outside, "disc_cluster",
                                     bind_sizes=True)

        return compile_clusters(
            [list(c.nodes) for c in analysis.clustering.clusters], lower, compiler,
            need_native=native, min_size=self._config.min_cluster_size,
            compile=lambda low: compile_cluster(compiler, low, native),
            thread_prefix="disc-tf-build")

    def _record(self, cf: Any, attempts: list[Attempt], recorder: Any) -> list[Launch]:
        """Report each attempt (the clustering already lists them) and make launches."""
        launches: list[Launch] = []
        for cid, a in enumerate(attempts):
            if not record_outcome(recorder, cid, a, NOTICE):  # failed, or excluded
                continue
            low = a.lowered
            member_set = set(a.members)
            fed = {t.name for t in low.inputs}
            extra: list[tf.Tensor] = []
            seen: set[str] = set(fed)
            for op in a.members:
                for t in op.inputs:
                    if t.op not in member_set and t.name not in seen:
                        seen.add(t.name)
                        extra.append(t)
            key = f"{low.key}-{id(cf)}-{cid}"
            launches.append(Launch(cid, low, a.exe, key, extra,
                                   accuracy=self._config.accuracy_check))
        return launches


def _argument_names(cf: Any) -> list[str]:
    """The names of ``cf``'s argument placeholders, in the order of its flat inputs (they
    come before the captures). From the graph's capture records, not
    ``cf.captured_inputs``, which runs the call-time captures' closures."""
    fc = cf.graph.function_captures
    captured = {id(t) for t in fc.by_val_internal.values()}
    for internal in fc.by_ref_internal.values():
        captured |= {id(t) for t in tf.nest.flatten(internal, expand_composites=True)}
    return [t.name for t in cf.inputs if id(t) not in captured]


def _fail(recorder: Any, cluster_id: int, what: str, code: ReasonCode, detail: str) -> None:
    NOTICE.cluster_failed(recorder, cluster_id, what, code, detail, stacklevel=2)


def _check_launches() -> float:
    """Seconds spent in DISC modules since the last check (over every launch op); runtime
    failures recorded meanwhile are turned into warnings and report entries now. One C
    call per loaded op library: this runs after every eager call."""
    from . import custom_op

    libs = list(custom_op._loaded.values())  # noqa: SLF001
    failures, seconds = 0, 0.0
    for lib in libs:
        f, secs = lib.totals()
        failures += f
        seconds += secs
    with _totals_lock:
        new_failures = failures != _totals_seen[0]
        in_disc = seconds - _totals_seen[1]
        _totals_seen[0], _totals_seen[1] = failures, seconds
    if new_failures:
        for lib in libs:
            for key, message in lib.take_failures():
                owner = _launch_owners.get(key)
                if owner is not None:
                    _fail(owner[0], owner[1], owner[2], *failure_reason(message))
    return max(in_disc, 0.0)


_totals_lock = threading.Lock()
_totals_seen: list[Any] = [0, 0.0]  # failures and seconds in DISC at the last check


def _flush_cluster_calls() -> None:
    """Bring every cluster's call count and time in DISC, as the launch ops counted them,
    into the report (run before a report is read, not per call)."""
    from . import custom_op

    libs = list(custom_op._loaded.values())  # noqa: SLF001
    if not libs:
        return
    with _totals_lock:
        flush_cluster_calls(libs, [(key, recorder, cluster_id) for key, (recorder, cluster_id, _w)
                                   in list(_launch_owners.items())], _seen)


_seen: dict[str, tuple[int, float]] = {}
get_collector().add_flush_hook(_flush_cluster_calls)

#: (recorder, cluster id, executable) of every launch whose steps are timed (``profile``)
_profiled: list[tuple[Any, int, Any]] = []


def _start_profiling(launches: list[Launch], recorder: Any, mode: str) -> None:
    """Time every step of these launches' modules from their first call: the executable
    keeps the slots, which the numpy_function path fills through the executable and the
    DiscLaunch op through the address registered for its cluster key (read when TF makes
    the op, after this). A report snapshot brings the totals in (:func:`_flush_profiles`)."""
    lib = _op_library() if mode == "custom_op" else None
    for launch in launches:
        exe = launch.executable
        if not exe.can_profile:
            continue
        exe.start_profiling()
        if lib is not None:
            lib.set_profile(launch.key, exe.profile_address)
        _profiled.append((recorder, launch.cluster_id, exe))
    get_collector().add_flush_hook(_flush_profiles)  # registered once, whoever asks


def _flush_profiles() -> None:
    for recorder, cluster_id, exe in list(_profiled):
        steps = exe.profile()
        if steps:
            recorder.cluster_profile(cluster_id, [KernelTime(**s) for s in steps])


def _flat_signature(signature: Any) -> list[tuple[Any, list[Any] | None]] | None:
    """(dtype, dims or None for any rank) per input of a flat signature of TensorSpecs (the
    fast path's check); None for any other signature."""
    if signature is None or not isinstance(signature, (list, tuple)):
        return None
    out = []
    for spec in signature:
        if type(spec) is not tf.TensorSpec:
            return None
        dims = spec.shape.as_list() if spec.shape.rank is not None else None
        out.append((spec.dtype, dims))
    return out


def _fast_key(args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """A cheap signature key for positional arguments that are eager tensors or Python
    scalars (what a training or serving loop passes); None sends the call down the general
    path, which handles nested structures, arrays and keyword arguments."""
    key: list[Any] = []
    for a in args:
        if type(a) is EagerTensor:
            key.append((a.dtype, a.shape.rank))
        elif type(a) in (int, float, bool, str, type(None)):
            key.append((type(a), a))
        else:
            return None
    return tuple(key)


def _numpy_runner(launch: Launch, sub: Any, feeds: list[str], outs: list[str]
                  ) -> Callable[..., Any]:
    """The Python function a numpy_function launch calls: the executable, and on any
    failure the cluster's original ops (``sub`` fed at ``feeds``, the GraphDef the rewrite
    made, as a TF function) from then on."""
    from tensorflow.python.eager import wrap_function

    n = len(launch.lowered.inputs)
    state: dict[str, Any] = {"failed": False, "fallback": None}
    if launch.accuracy is not None:
        # Running the cluster's TF ops from inside a numpy_function blocks an inter-op
        # thread on a nested TF call; two clusters doing so at once deadlock a 2-thread
        # pool (seen on 2 cores), so the guard lives in the DiscLaunch kernel only.
        warn_once("DISC: the accuracy guard runs in the DiscLaunch custom op only; with "
                  "execution='numpy_function' clusters are not checked")

    def fallback(arrays: tuple[np.ndarray, ...]) -> list[np.ndarray]:
        if state["fallback"] is None:
            state["fallback"] = wrap_function.function_from_graph_def(sub, feeds, outs)
        res = state["fallback"](*[tf.constant(a) for a in arrays])
        return [np.asarray(r) for r in res]

    def run(*arrays: np.ndarray) -> list[np.ndarray]:
        if not state["failed"]:
            try:
                start = time.perf_counter()
                # as they come: the executable copies a strided input itself, and
                # np.ascontiguousarray would turn a rank-0 input into shape (1,)
                results = launch.executable.run(list(arrays[:n]))
                owner = _launch_owners.get(launch.key)
                if owner is not None:
                    owner[0].cluster_call(owner[1], time.perf_counter() - start)
                return results
            except Exception as exc:  # DISC must never break the user's program
                state["failed"] = True
                owner = _launch_owners.get(launch.key)
                if owner is not None:
                    _fail(owner[0], owner[1], owner[2], ReasonCode.RUNTIME_ERROR,
                          f"{type(exc).__name__}: {exc}")
        return fallback(arrays)

    return run


# -- public entry points -----------------------------------------------------------------

def function(func: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``tf.function`` with DISC: ``@disc_tf.function`` or ``@disc_tf.function(...)``.

    Keyword arguments are ``tf.function``'s (``input_signature``, ``reduce_retracing``,
    ``jit_compile``, ...) and :class:`~disc_tf.config.DiscConfig` fields
    (``min_cluster_size``, ``excluded_ops``, ``execution``, ...).
    """
    disc_fields = set(DiscConfig.__dataclass_fields__)
    disc_opts = {k: v for k, v in options.items() if k in disc_fields}
    tf_opts = {k: v for k, v in options.items() if k not in disc_fields}
    config = DiscConfig.resolve(disc_opts)

    def wrap(fn: Callable[..., Any]) -> DiscFunction:
        return DiscFunction(fn, config, **tf_opts)

    return wrap(func) if func is not None else wrap


def enable(**options: Any) -> None:
    """Route every ``tf.function`` created from now on through DISC (Keras's train, test and
    predict functions included). Options are :class:`~disc_tf.config.DiscConfig` fields."""
    global _enabled
    config = DiscConfig.resolve(options)
    _enabled = config

    def patched(func: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
        if _enabled is None:
            return _ORIGINAL_FUNCTION(func, **kwargs) if func is not None \
                else _ORIGINAL_FUNCTION(**kwargs)

        def wrap(fn: Callable[..., Any]) -> DiscFunction:
            return DiscFunction(fn, _enabled, from_enable=True, **kwargs)

        return wrap(func) if func is not None else wrap

    patched.__doc__ = _ORIGINAL_FUNCTION.__doc__
    tf.function = patched


def disable() -> None:
    """Undo :func:`enable`: new tf.functions are plain again, and functions created while
    enabled run as plain tf.functions from now on."""
    global _enabled
    _enabled = None
    tf.function = _ORIGINAL_FUNCTION


def is_enabled() -> bool:
    return _enabled is not None

