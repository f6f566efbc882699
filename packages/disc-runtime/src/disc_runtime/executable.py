"""The executable protocol every framework bridge uses to run a compiled graph.

:class:`Executable` pairs a loaded :class:`~disc_runtime.artifact.Artifact` with the ``run``
function its engine produced and puts the user-facing guarantees in ONE place, so that each
bridge (torch, TF, paddle, ``disc-run``) gets identical behaviour:

* inputs are converted with :func:`~disc_runtime.arrays.as_numpy` - zero copy;
* they are validated against the signature before the engine sees them, with messages that
  name the input (engines can assume validated inputs);
* the engine's outputs are checked (count always; dtype, rank and dims by default), so an
  engine bug surfaces here rather than as a confusing error deep inside a framework.

Executables hold no per-call mutable state (only per-thread counters), so one instance may be
called from many threads concurrently, provided the engine's ``run`` is thread-safe (the
engine protocol requires it).
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .arrays import as_numpy
from .artifact import Artifact
from .dtypes import numpy_dtype
from .engines import RunFn, get_engine
from .errors import DiscRuntimeError, EngineError, FastPathMiss, InputError
from .signature import Signature
from .thread_counters import ThreadCounters

__all__ = ["AllocateOutput", "Executable", "ExecutableStats"]

_now = time.perf_counter  # a module global: the per-call path reads the clock twice

#: ``allocate_output(index, shape, dtype_name) -> array``: supplies the buffer for output
#: ``index``; the returned object may be any array :func:`as_numpy` can view (e.g. a torch
#: tensor), and the engine writes the result into it.
AllocateOutput = Callable[[int, tuple[int, ...], str], Any]


class ExecutableStats(ThreadCounters):
    """Counters of one executable, read via :meth:`snapshot` or the properties: [calls,
    input_errors, engine_errors, engine_seconds], each thread counting into a cell of its
    own (:class:`~disc_runtime.thread_counters.ThreadCounters`)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(4)

    def _total(self, index: int) -> float:
        return self.totals()[index]

    calls = property(lambda self: int(self._total(0)),
                     doc="run() invocations, including rejected ones.")
    input_errors = property(lambda self: int(self._total(1)),
                            doc="Calls rejected before the engine ran (bad inputs).")
    engine_errors = property(lambda self: int(self._total(2)),
                             doc="Calls where the engine raised or broke the protocol.")
    engine_seconds = property(lambda self: float(self._total(3)),
                              doc="Total wall time spent inside the engine.")

    def snapshot(self) -> dict[str, float]:
        totals = self.totals()
        return {"calls": int(totals[0]), "input_errors": int(totals[1]),
                "engine_errors": int(totals[2]), "engine_seconds": float(totals[3])}

    def __repr__(self) -> str:
        return f"ExecutableStats({self.snapshot()})"

    def _count(self, *, seconds: float = 0.0, input_errors: int = 0,
               engine_errors: int = 0) -> None:
        """One call (the error paths; the hot path updates its cell itself)."""
        cell = self.cell()
        cell[0] += 1
        cell[1] += input_errors
        cell[2] += engine_errors
        cell[3] += seconds


def _accepts_allocate_output(run_fn: RunFn) -> bool:
    flag = getattr(run_fn, "accepts_allocate_output", None)
    if flag is not None:
        return bool(flag)
    try:
        params = inspect.signature(run_fn).parameters
    except (TypeError, ValueError):  # builtins / C callables without a signature
        return False
    param = params.get("allocate_output")
    return param is not None and param.kind in (
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    )


class Executable:
    """A runnable compiled graph: ``exe.run([x, y])`` or ``exe(x, y)`` -> list of arrays.

    ``allocate_output(index, shape, dtype_name) -> array`` is the hook through which bridges
    will supply framework-allocated output buffers (so results land directly in, say, torch
    tensors without a copy). It is passed to the engine only if the engine's ``run`` declares
    a keyword parameter ``allocate_output`` (or sets ``run.accepts_allocate_output = True``);
    engines that do not support it - today the disc-core reference engine - simply ignore
    it and return freshly allocated numpy arrays, so bridges must not assume their buffers
    were used: always take the arrays that :meth:`run` returns. The engine receives a wrapped
    hook that returns a numpy view of the bridge's buffer and checks its shape and dtype.
    A per-call ``allocate_output`` overrides the constructor's.
    """

    def __init__(
        self,
        artifact: Artifact,
        run_fn: RunFn,
        *,
        allocate_output: AllocateOutput | None = None,
        check_outputs: bool = True,
    ) -> None:
        if not callable(run_fn):
            raise TypeError(f"run_fn must be callable, got {run_fn!r}")
        self._artifact = artifact
        self._signature = artifact.signature
        self._run_fn = run_fn
        self._allocate_output = allocate_output
        self._check_outputs = check_outputs
        self._engine_takes_alloc = _accepts_allocate_output(run_fn)
        # Engines that build their outputs from the signature themselves (the native module
        # allocates exactly the declared shapes) skip the per-call output re-check.
        self._engine_trusted = bool(getattr(run_fn, "trusted_outputs", False))
        # An engine's own hot path (the native engine's), which validates while it runs.
        self._run_checked = getattr(run_fn, "run_checked", None) if self._engine_trusted else None
        self.stats = ExecutableStats()
        self._stats_local = self.stats.local  # the hot path reads this thread's cell
        make_pointer_call = getattr(run_fn, "pointer_call", None)
        #: the engine's call on raw addresses, counted in :attr:`stats`, for a bridge that
        #: checks its inputs itself (:class:`~disc_runtime.native.PointerCall`; the native
        #: engine's), or None
        self.pointer_call: Any = (make_pointer_call(self.stats)
                                  if make_pointer_call is not None and self._engine_trusted
                                  else None)

    @classmethod
    def load(
        cls,
        source: str | os.PathLike[str] | Artifact,
        *,
        verify: bool = True,
        allocate_output: AllocateOutput | None = None,
        check_outputs: bool = True,
    ) -> Executable:
        """Load an artifact (path or :class:`Artifact`), find its engine, build the executable.

        The engine comes from the registry / ``disc_runtime.engines`` entry points
        (:func:`~disc_runtime.engines.get_engine`); its loader is called with the Artifact.
        """
        artifact = source if isinstance(source, Artifact) else Artifact.load(source, verify=verify)
        loader = get_engine(artifact.engine)
        run_fn = loader(artifact)
        if not callable(run_fn):
            raise EngineError(
                f"engine {artifact.engine!r} returned {type(run_fn).__name__} from its loader, "
                "expected a callable run(inputs) -> outputs"
            )
        return cls(artifact, run_fn, allocate_output=allocate_output, check_outputs=check_outputs)

    @property
    def artifact(self) -> Artifact:
        return self._artifact

    @property
    def signature(self) -> Signature:
        return self._signature

    @property
    def name(self) -> str:
        return self._artifact.name

    def __call__(self, *inputs: Any) -> list[np.ndarray]:
        return self.run(inputs)

    @property
    def can_profile(self) -> bool:
        """Whether the engine times its steps (the native engine does)."""
        return getattr(self._run_fn, "profiler", None) is not None

    def start_profiling(self) -> None:
        """Time each step of every later call (kernels, library calls, the engine's host
        work); :meth:`profile` reads the totals. Raises :class:`EngineError` for an engine
        without a profiler (check :attr:`can_profile`)."""
        profiler = getattr(self._run_fn, "profiler", None)
        if profiler is None:
            raise EngineError(f"engine {self._artifact.engine!r} cannot profile its steps; "
                              "the native engine can")
        profiler.start_profiling()

    @property
    def profile_address(self) -> int:
        """Where the engine's profile slots are (0: not profiling): a bridge's launch op
        that calls the compiled module directly passes it on, so its calls are timed."""
        profiler = getattr(self._run_fn, "profiler", None)
        return 0 if profiler is None else int(getattr(profiler, "profile_address", 0))

    def profile(self) -> list[dict[str, Any]] | None:
        """Per step since :meth:`start_profiling`: ``name``, ``kind`` (``host``,
        ``kernel``, ``library``, ``scatter``, ``scan``), ``ops``, ``shape``, ``calls`` and
        total ``seconds``; None when not profiling."""
        profiler = getattr(self._run_fn, "profiler", None)
        return None if profiler is None else profiler.profile()

    def run(
        self, inputs: Sequence[Any], *, allocate_output: AllocateOutput | None = None
    ) -> list[np.ndarray]:
        """Validate ``inputs`` (zero-copy), run the engine, check and return its outputs."""
        hook = allocate_output if allocate_output is not None else self._allocate_output
        fast = self._run_checked
        if fast is not None and type(inputs) in (list, tuple):
            # the common case, kept lean: per-call overhead matters on small tensors. The
            # engine checks count, dtype, rank and layout itself (FastPathMiss when they are
            # off), its C host code every dim, and what the allocate_output hook returns.
            start = _now()
            try:
                outputs = fast(inputs, hook)
            except FastPathMiss:
                pass  # the slow path below words the problem (or copies a strided input)
            except InputError:
                self._raise_input_error(inputs)  # the signature's wording when it applies
                self.stats._count(engine_errors=1, seconds=_now() - start)
                raise
            except BaseException:
                self.stats._count(engine_errors=1, seconds=_now() - start)
                raise
            else:
                try:
                    cell = self._stats_local.cell
                except AttributeError:
                    cell = self.stats.cell()
                cell[0] += 1
                cell[3] += _now() - start
                return outputs
        try:
            arrays = self._prepare(inputs)
            bindings = self._signature.validate(arrays)
        except DiscRuntimeError:
            self.stats._count(input_errors=1)
            raise
        start = _now()
        try:
            if hook is not None and self._engine_takes_alloc:
                raw = self._run_fn(arrays, allocate_output=self._wrap_hook(hook))
            else:
                raw = self._run_fn(arrays)
            outputs = self._finish(raw, bindings)
        except BaseException:
            self.stats._count(engine_errors=1, seconds=_now() - start)
            raise
        self.stats._count(seconds=_now() - start)
        return outputs

    def _raise_input_error(self, inputs: Sequence[Any]) -> None:
        """Raise the signature's InputError for ``inputs`` if they break it (counted as an
        input error); return when they satisfy it."""
        try:
            self._signature.validate(self._prepare(inputs))
        except DiscRuntimeError as exc:
            self.stats._count(input_errors=1)
            exc.__suppress_context__ = True  # the module's terser message adds nothing
            raise

    def _prepare(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        specs = self._signature.inputs
        if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
            raise InputError(f"inputs must be a sequence of arrays, got {type(inputs).__name__}")
        if len(inputs) != len(specs):
            names = ", ".join(s.name for s in specs)
            raise InputError(f"expected {len(specs)} inputs ({names}), got {len(inputs)}")
        return [
            x if type(x) is np.ndarray else as_numpy(x, what=f"input #{i} {spec.name!r}")
            for i, (x, spec) in enumerate(zip(inputs, specs, strict=True))
        ]

    def _finish(self, raw: Any, bindings: dict[str, int]) -> list[np.ndarray]:
        engine = self._artifact.engine
        if not isinstance(raw, (list, tuple)):
            raise EngineError(
                f"engine {engine!r} returned {type(raw).__name__}, expected a list of arrays"
            )
        specs = self._signature.outputs
        if len(raw) != len(specs):
            names = ", ".join(s.name for s in specs)
            raise EngineError(
                f"engine {engine!r} returned {len(raw)} outputs for {self.name!r}, "
                f"its signature declares {len(specs)} ({names})"
            )
        outputs: list[np.ndarray] = []
        for i, out in enumerate(raw):
            if type(out) is np.ndarray:
                outputs.append(out)
                continue
            try:
                outputs.append(as_numpy(out, what=f"output #{i}"))
            except InputError as exc:
                raise EngineError(f"engine {engine!r}: {exc}") from None
        if self._check_outputs and not self._engine_trusted:
            try:
                self._signature.check_outputs(outputs, bindings, error=EngineError)
            except EngineError as exc:
                raise EngineError(
                    f"engine {engine!r} broke the signature of {self.name!r}: {exc}"
                ) from None
        return outputs

    def _wrap_hook(self, hook: AllocateOutput) -> Callable[[int, tuple[int, ...], str], np.ndarray]:
        def allocate(index: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
            shape = tuple(int(d) for d in shape)
            buf = as_numpy(hook(index, shape, dtype), what=f"allocate_output for output #{index}")
            if buf.shape != shape or buf.dtype != numpy_dtype(dtype):
                raise DiscRuntimeError(
                    f"allocate_output for output #{index} returned {buf.dtype.name} "
                    f"{buf.shape}, expected {dtype} {shape}"
                )
            return buf

        return allocate

    def __repr__(self) -> str:
        return f"Executable(name={self.name!r}, engine={self._artifact.engine!r})"
