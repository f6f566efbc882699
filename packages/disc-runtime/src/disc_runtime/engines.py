"""Engine registry: maps an artifact's ``engine`` name to the code that can run it.

Engines live in other packages (the numpy reference interpreter in disc-core, a native
ctypes engine later), and the runtime must not import them. They are found in two ways:

* programmatically, with :func:`register_engine` (tests, embedding applications);
* through the ``disc_runtime.engines`` entry-point group, resolved lazily by
  :func:`get_engine` the first time an artifact needs the engine. disc-core declares::

      [project.entry-points."disc_runtime.engines"]
      reference = "disc_core.engine:load_reference_engine"

Engine protocol. An engine is a *loader*: ``loader(artifact) -> run``, called once per
:class:`~disc_runtime.executable.Executable`. It receives the loaded, verified
:class:`~disc_runtime.artifact.Artifact` and reads whatever it needs
(``artifact.read_text("graph.disc")``, ``artifact.path("native/module.so")``,
``artifact.signature``, ``artifact.metadata``). ``run(inputs: list[np.ndarray]) ->
list[np.ndarray]`` is then called once per execution, possibly from several threads at once,
so it must not mutate shared state without its own locking. Inputs are already validated
(count, dtype, rank, static dims, shared symbols) and may be non-contiguous views of caller
memory: engines must treat them as read-only and make them contiguous themselves if needed.
A ``run`` that declares a keyword parameter named ``allocate_output`` also receives the
output-allocation hook (see :class:`~disc_runtime.executable.Executable`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from importlib import metadata
from typing import TYPE_CHECKING, Any

from .errors import EngineNotFoundError

if TYPE_CHECKING:
    import numpy as np

    from .artifact import Artifact

__all__ = [
    "ENTRY_POINT_GROUP",
    "KNOWN_ENGINE_PROVIDERS",
    "Loader",
    "RunFn",
    "available_engines",
    "get_engine",
    "register_engine",
    "unregister_engine",
]

ENTRY_POINT_GROUP = "disc_runtime.engines"

#: Engines that are part of disc-runtime itself, loaded on first use.
BUILTIN_ENGINES: frozenset[str] = frozenset({"native"})

#: Engine name -> the pip package that provides it, used only for the install hint.
KNOWN_ENGINE_PROVIDERS: dict[str, str] = {"reference": "disc-core"}

RunFn = Callable[..., "list[np.ndarray]"]
Loader = Callable[["Artifact"], RunFn]

_lock = threading.Lock()
_registry: dict[str, Loader] = {}


def register_engine(name: str, loader: Loader, *, replace: bool = False) -> None:
    """Register ``loader`` under ``name``; takes precedence over entry points.

    Registering the same loader again is a no-op; a different loader under a taken name
    raises ``ValueError`` unless ``replace=True``.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"engine name must be a non-empty string, got {name!r}")
    if not callable(loader):
        raise TypeError(f"engine loader for {name!r} must be callable, got {loader!r}")
    with _lock:
        current = _registry.get(name)
        if current is not None and current is not loader and not replace:
            raise ValueError(
                f"engine {name!r} is already registered ({current!r}); pass replace=True"
            )
        _registry[name] = loader


def unregister_engine(name: str) -> bool:
    """Forget a registered (or cached entry-point) engine; True if it was there."""
    with _lock:
        return _registry.pop(name, None) is not None


def _entry_points() -> list[Any]:
    return list(metadata.entry_points(group=ENTRY_POINT_GROUP))


def available_engines() -> list[str]:
    """Names of registered engines and of engines installed packages declare (not loaded)."""
    with _lock:
        names = set(_registry)
    names.update(ep.name for ep in _entry_points())
    return sorted(names)


def get_engine(name: str) -> Loader:
    """The loader for engine ``name``: registry first, then the entry-point group.

    Raises :class:`EngineNotFoundError` with an install hint when nothing provides it, or
    when the providing package is installed but fails to import.
    """
    with _lock:
        loader = _registry.get(name)
    if loader is not None:
        return loader
    if name in BUILTIN_ENGINES:  # engines that ship with disc-runtime itself
        from .native import load_native_engine

        with _lock:
            return _registry.setdefault(name, load_native_engine)
    for ep in _entry_points():
        if ep.name != name:
            continue
        dist = getattr(ep, "dist", None)
        provider = f"{dist.name} {dist.version}" if dist is not None else "an installed package"
        try:
            loaded = ep.load()
        except Exception as exc:  # any import-time failure of a plugin
            raise EngineNotFoundError(
                f"engine {name!r} is declared by {provider} ({ep.value}), but loading it "
                f"failed: {type(exc).__name__}: {exc}"
            ) from exc
        if not callable(loaded):
            raise EngineNotFoundError(
                f"engine {name!r} from {provider} ({ep.value}) is not callable"
            )
        with _lock:
            return _registry.setdefault(name, loaded)
    hint = KNOWN_ENGINE_PROVIDERS.get(name)
    if hint is not None:
        detail = f"it comes with {hint}: pip install {hint}"
    else:
        detail = "available engines: " + (", ".join(available_engines()) or "none")
    raise EngineNotFoundError(
        f"artifact needs engine {name!r}, which no installed package provides ({detail})"
    )
