"""``disc_paddle.compile``, ``disc_paddle.to_static``, ``enable()`` and ``disable()``.

A :class:`DiscFunction` wraps the user's function (or a layer's ``forward``) in Paddle's
own ``paddle.jit.to_static``, marked for DISC (:mod:`disc_paddle.capture`). Unless the
user pins an ``input_spec``, each call's signature (the rank and dtype of every tensor
argument) gets its own static function whose input spec leaves every dim unknown, so one
trace and one DISC compilation serve every shape of a rank. Paddle traces, appends the
backward and splits the programs; DISC rewrites them (:mod:`disc_paddle.backend`).

A cluster that fails at run time (its launch op records why and raises) makes the call
fail inside Paddle's executor; the wrapper catches that, marks the cluster failed (one
warning, a report entry), drops the function's programs so Paddle rebuilds them without
it, and calls again: the user gets Paddle's result. A failure in a backward program,
inside ``loss.backward()``, is handled by :mod:`disc_paddle.backward_retry`.

With the accuracy guard on, the wrapper counts the calls of each signature and, on those
the policy picks, runs the guarded programs, whose launches compare with the clusters'
Paddle ops (:mod:`disc_paddle.backend`); a mismatch is one more run-time failure above.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from . import backend, backward_retry, capture
from .backend import COMPILERS, DiscFallbackWarning, FunctionState
from .config import DiscConfig

__all__ = ["DiscFallbackWarning", "DiscFunction", "compile", "compile_count", "disable",
           "enable", "is_enabled", "to_static"]

_ORIGINAL_TO_STATIC: Any = None
_enabled: DiscConfig | None = None


def _install() -> None:
    capture.install(backend.rewrite_program)


def compile_count(target: str = "auto") -> int:
    """How many DISC compilations (cache misses) this process did for Paddle clusters."""
    return COMPILERS.compile_count("native" if target == "auto" else target)


def _to_static() -> Any:
    import paddle

    return _ORIGINAL_TO_STATIC or paddle.jit.to_static


def _spec_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
    """The signature of a call whose arguments are all tensors (rank and dtype each);
    None for any other call (Paddle's own input handling then applies)."""
    import paddle

    if kwargs:
        return None
    key = []
    for a in args:
        if not isinstance(a, paddle.Tensor):
            return None
        key.append((len(a.shape), str(a.dtype)))
    return tuple(key)


class DiscFunction:
    """A function (or a layer's bound ``forward``) run through ``paddle.jit.to_static``
    with DISC (see the module docstring)."""

    def __init__(self, fn: Callable[..., Any], config: DiscConfig, *,
                 input_spec: Any = None, full_graph: bool = True,
                 build_strategy: Any = None, backend_name: Any = None, name: str | None = None):
        _install()
        if config.report_path:
            from disc_core.report import configure

            configure(config.report_path)
        self._fn = fn
        self._config = config
        self._input_spec = input_spec
        self._full_graph = full_graph
        self._build_strategy = build_strategy
        self._backend = backend_name
        self.state = FunctionState(config, name or getattr(fn, "__qualname__",
                                                           type(fn).__name__))
        self._statics: dict[Any, Any] = {}
        self._calls: dict[Any, int] = {}  # per signature: calls so far (accuracy guard)
        self._bound: dict[int, DiscFunction] = {}
        functools.update_wrapper(self, fn, updated=())

    def _static(self, key: Any, specs: Any) -> Any:
        st = self._statics.get(key)
        if st is None:
            st = _to_static()(self._fn, input_spec=specs, build_strategy=self._build_strategy,
                              backend=self._backend, full_graph=self._full_graph)
            capture.manage(st, self.state)
            self._statics[key] = st
        return st

    def _pick(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        """(signature key, its static function)."""
        from paddle.static import InputSpec

        if self._input_spec is not None:
            return "pinned", self._static("pinned", self._input_spec)
        key = _spec_key(args, kwargs)
        if key is None or not self._full_graph:  # SOT takes no input spec: it has its own
            # handling of dynamic dims (it specializes, then retraces with them dynamic)
            return "per-call", self._static("per-call", None)
        specs = [InputSpec([None] * rank, dtype.removeprefix("paddle."))
                 for rank, dtype in key]
        return key, self._static(key, specs)

    def _guard(self, key: Any) -> None:
        """The accuracy guard: whether this call of signature ``key`` runs the guarded
        programs (the policy's first calls, then every Kth) or the plain ones."""
        policy = self.state.config.accuracy_check
        if policy is None:
            return
        call = self._calls.get(key, 0)
        self._calls[key] = call + 1
        self.state.use_variant(policy.due(call))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import paddle

        key, st = self._pick(args, kwargs)
        self._guard(key)
        result = self._run(st, args, kwargs)
        if paddle.is_grad_enabled():
            backward_retry.install()
            backward_retry.watch(self, args, kwargs, result)
        return result

    def call_static(self, *args: Any, **kwargs: Any) -> Any:
        """The call through the static function of its signature, with the programs the
        last call ran (guarded or not: a redone call is not a new one for the guard); a DISC
        cluster that fails on the way is dropped and the call made again (see the module
        docstring)."""
        return self._run(self._pick(args, kwargs)[1], args, kwargs)

    def _run(self, st: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        for _ in range(64):  # one retry per cluster that can fail, at most
            try:
                with capture.owning(self.state):
                    return st(*args, **kwargs)
            except Exception:
                if not backend.check_launches():
                    raise  # not DISC's failure: the user's error, as Paddle raised it
                self.state.drop_programs()
        return st(*args, **kwargs)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        """Decorating a method: bind per instance (each instance its own programs)."""
        if instance is None:
            return self
        bound = self._bound.get(id(instance))
        if bound is None:
            bound = DiscFunction(self._fn.__get__(instance, owner), self._config,
                                 input_spec=self._input_spec, full_graph=self._full_graph,
                                 build_strategy=self._build_strategy,
                                 backend_name=self._backend, name=self.state.name)
            self._bound[id(instance)] = bound
        return bound

    @property
    def rewrites(self) -> dict[str, int]:
        """How many programs DISC rewrote, per role (forward, backward, infer)."""
        return dict(self.state.rewrites)

    def statics(self) -> list[Any]:
        """The ``paddle.jit.to_static`` functions behind this one (one per signature)."""
        return list(self._statics.values())


def _inner_layer(target: Any) -> Any:
    """The layer that computes: ``paddle.DataParallel(layer)``'s ``layer``, else ``target``.

    ``DataParallel.forward`` calls its layer and then, eagerly, prepares its reducer for
    the backward (which parameters' gradients to all-reduce): traced into a program, that
    step would be lost (Paddle's own ``to_static`` refuses a ``DataParallel`` outright). So
    DISC compiles the wrapped layer's ``forward`` and leaves the wrapper as it is; the
    gradients are all-reduced by Paddle, outside DISC's programs."""
    import paddle

    while isinstance(target, paddle.DataParallel):
        target = target._layers  # noqa: SLF001
    return target


def compile(model: Any = None, input_spec: Any = None, *, full_graph: bool = True,
            **options: Any) -> Any:
    """DISC for a Paddle layer or function: ``model = disc_paddle.compile(model)``.

    A layer is returned with its ``forward`` run through DISC (training included: the
    backward program's clusters are compiled too); a ``paddle.DataParallel`` is returned
    with its wrapped layer's ``forward`` run through DISC (see :func:`_inner_layer`); a
    function is returned wrapped. Unless
    ``input_spec`` pins them, every dim is dynamic: one compilation per rank and dtype.
    ``full_graph=False`` uses Paddle's SOT bytecode capture (Python it cannot capture runs
    eagerly). Options are :class:`~disc_paddle.config.DiscConfig` fields."""
    import paddle

    config = DiscConfig.resolve(options)

    def wrap(target: Any) -> Any:
        if isinstance(target, paddle.nn.Layer):
            layer = _inner_layer(target)
            forward = layer.forward
            if isinstance(forward, DiscFunction):
                return target
            layer.forward = DiscFunction(forward, config, input_spec=input_spec,
                                         full_graph=full_graph, name=type(layer).__name__)
            return target
        if not callable(target):
            raise TypeError(f"disc_paddle.compile expects a paddle.nn.Layer or a function, "
                            f"got {type(target).__name__}")
        return DiscFunction(target, config, input_spec=input_spec, full_graph=full_graph)

    return wrap(model) if model is not None else wrap


def to_static(function: Any = None, input_spec: Any = None, build_strategy: Any = None,
              backend: Any = None, **kwargs: Any) -> Any:
    """``paddle.jit.to_static`` with DISC (same arguments; DISC options as keywords too)."""
    import paddle

    full_graph = kwargs.pop("full_graph", True)
    disc_fields = set(DiscConfig.__dataclass_fields__)
    config = DiscConfig.resolve({k: kwargs.pop(k) for k in list(kwargs) if k in disc_fields})
    if kwargs:
        raise TypeError(f"unexpected arguments {sorted(kwargs)}")

    def wrap(target: Any) -> Any:
        if isinstance(target, paddle.nn.Layer):
            layer = _inner_layer(target)  # a DataParallel: its layer (see _inner_layer)
            layer.forward = DiscFunction(layer.forward, config, input_spec=input_spec,
                                         full_graph=full_graph,
                                         build_strategy=build_strategy,
                                         backend_name=backend, name=type(layer).__name__)
            return target
        return DiscFunction(target, config, input_spec=input_spec, full_graph=full_graph,
                            build_strategy=build_strategy, backend_name=backend)

    return wrap(function) if function is not None else wrap


def enable(**options: Any) -> None:
    """Route ``paddle.jit.to_static`` through DISC from now on (scripts that already call
    it need no other change). Options are :class:`~disc_paddle.config.DiscConfig` fields."""
    import paddle

    global _ORIGINAL_TO_STATIC, _enabled
    config = DiscConfig.resolve(options)
    _enabled = config
    if _ORIGINAL_TO_STATIC is None:
        _ORIGINAL_TO_STATIC = paddle.jit.to_static

    def patched(function: Any = None, input_spec: Any = None, build_strategy: Any = None,
                backend: Any = None, **kwargs: Any) -> Any:
        if _enabled is None:
            return _ORIGINAL_TO_STATIC(function, input_spec=input_spec,
                                       build_strategy=build_strategy, backend=backend,
                                       **kwargs)
        opts = {f: getattr(_enabled, f) for f in DiscConfig.__dataclass_fields__}
        return to_static(function, input_spec=input_spec, build_strategy=build_strategy,
                         backend=backend, **{**opts, **kwargs})

    patched.__doc__ = _ORIGINAL_TO_STATIC.__doc__
    paddle.jit.to_static = patched


def disable() -> None:
    """Undo :func:`enable`: ``paddle.jit.to_static`` is Paddle's own again (functions made
    while enabled keep running through DISC)."""
    import paddle

    global _enabled
    _enabled = None
    if _ORIGINAL_TO_STATIC is not None:
        paddle.jit.to_static = _ORIGINAL_TO_STATIC


def is_enabled() -> bool:
    return _enabled is not None
