"""Guards on a decorated function kept in a graph package.

dynamo serializes the locals of the frame it traced with the guards it builds, so that a
new process can build its guard checks against them. A function among them is written as a
reference (its module and qualified name), unless that name does not lead back to it:
then dynamo writes a placeholder. That is the case of every function a decorator wraps
(transformers decorates most models' ``forward``): the class attribute holds the wrapper,
and the original is a closure variable of it (``func``). The placeholder was kept, and
loading the package failed on the first guard that reads it (``L['func'].__name__``), so
such a model was traced again in every process.

While DISC writes a package (:func:`~disc_torch.precompile.caching_graphs`), such a
function is written by value instead (code, its globals' module, names, defaults, closure,
attributes), as dynamo already writes functions defined inside other functions. The
rebuilt function only serves to build the guard checks; they run on the live frame.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import types
from collections.abc import Iterator
from typing import Any

__all__ = ["globals_module", "keeping_wrapped_functions", "rebuild_function"]


def globals_module(fn: Any) -> str | None:
    """The name of the module whose globals ``fn`` runs in. Not ``fn.__module__``, which
    ``functools.wraps`` copies from the function a wrapper wraps."""
    inner = getattr(fn, "__func__", fn)
    return getattr(inner, "__globals__", {}).get("__name__")


def rebuild_function(code: types.CodeType, module: str, name: str, qualname: str,
                     defaults: tuple[Any, ...] | None, kwdefaults: dict[str, Any] | None,
                     closure: tuple[types.CellType, ...] | None,
                     attributes: dict[str, Any]) -> types.FunctionType:
    """The function :func:`keeping_wrapped_functions` wrote, made again in this process."""
    fn = types.FunctionType(code, importlib.import_module(module).__dict__, name, defaults,
                            closure)
    fn.__qualname__ = qualname
    fn.__kwdefaults__ = kwdefaults
    fn.__dict__.update(attributes)
    return fn


@contextlib.contextmanager
def keeping_wrapped_functions(enabled: bool) -> Iterator[None]:
    """Within it (when ``enabled``), dynamo's guard serialization writes a function its
    qualified name does not lead back to by value, not as a placeholder. A no-op on a
    torch without that serializer."""
    from torch._dynamo import guards

    pickler = getattr(guards, "GuardsStatePickler", None)
    missing = getattr(guards, "_Missing", None)
    if not enabled or pickler is None or missing is None:
        yield
        return
    original = pickler.__dict__.get("reducer_override")
    if original is None:
        yield
        return

    def reducer_override(self: Any, obj: Any) -> Any:
        reduced = original(self, obj)
        if (inspect.isfunction(obj) and type(reduced) is tuple and reduced[0] is missing
                and reduced[1] == ("fqn mismatch",)):
            return rebuild_function, (obj.__code__, globals_module(obj), obj.__name__,
                                      obj.__qualname__, obj.__defaults__, obj.__kwdefaults__,
                                      obj.__closure__, dict(obj.__dict__))
        return reduced

    pickler.reducer_override = reducer_override
    try:
        yield
    finally:
        pickler.reducer_override = original
