"""Identity guards that survive a process: what dynamo cannot keep in a package, DISC
checks itself, on every call.

dynamo guards the objects a traced frame relied on by identity: the function passed as an
argument, ``self.act``, a closure's callee, ``torch.nn.functional`` itself. Object ids mean
nothing in another process, so dynamo cannot serialize those guards; its own precompile
mode (``caching_precompile``) simply drops them, which is unsound even in the process that
traced: after ``f(x, torch.sin)`` is compiled, ``f(x, torch.cos)`` runs the sine graph.

DISC drops the same guards from what dynamo builds (its package could not be written
otherwise) and *pins* each object instead: its source expression (``op``, ``s.act``,
``G['torch'].nn.functional.gelu``) and a description that is stable across processes (a
module's name, a function's module, qualified name and definition site, an object's
type). Before every call the pins are evaluated against the call's arguments, closure and
globals: the same object ids as last time pass at once; other objects pass when their
description matches. A pin that does not match, or cannot be evaluated (a resume frame's
locals after a graph break, a dict whose *contents* dynamo guarded), turns the traced-graph
cache off for that callable: it is compiled again with dynamo's full guards, which is
always correct.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import types
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["IdentityPins", "describe"]

#: guards dynamo cannot serialize (torch 2.13's CheckFunctionManager list): dropped from
#: what dynamo builds and pinned by DISC instead
UNSERIALIZABLE = ("ID_MATCH", "FUNCTION_MATCH", "CLASS_MATCH", "MODULE_MATCH",
                  "CLOSURE_MATCH", "BUILTIN_MATCH", "NN_MODULE", "WEAKREF_ALIVE",
                  "DICT_VERSION")
#: of those, guards on something other than an object's identity: no description can
#: stand in for them (a dict's version changes with its contents)
NOT_PINNABLE = ("DICT_VERSION",)
_BUILTIN_NAMES = frozenset(dir(builtins))


def describe(obj: Any) -> tuple:
    """What an object is, in terms another process can check (JSON-able tuple)."""
    if isinstance(obj, types.ModuleType):
        return ("module", obj.__name__)
    if isinstance(obj, type):
        return ("type", obj.__module__, obj.__qualname__)
    if isinstance(obj, types.FunctionType):
        code = obj.__code__
        return ("function", obj.__module__, obj.__qualname__, code.co_filename,
                code.co_firstlineno)
    if isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        owner = getattr(obj, "__self__", None)
        bound = None if owner is None or isinstance(owner, types.ModuleType) else describe(
            type(owner))
        return ("builtin", getattr(obj, "__module__", None),
                getattr(obj, "__qualname__", obj.__name__), bound)
    if isinstance(obj, types.MethodType):
        return ("method", describe(obj.__func__), describe(type(obj.__self__)))
    cls = type(obj)
    return ("object", cls.__module__, cls.__qualname__)


class PinError(Exception):
    """A pin cannot be checked, or no longer holds: the callable leaves the cache."""


class IdentityPins:
    """The pinned objects of one optimized callable (see the module docstring)."""

    def __init__(self, fn: Callable[..., Any]):
        self._fn = fn
        self.pins: dict[str, tuple] = {}  # source expression -> description
        #: every pin's expression in one tuple: one eval per call, not one per pin
        self._all: Any = None
        #: whether some pin reads the call's arguments or closure (else: _global_scope)
        self._needs_locals = False
        self._last_ids: tuple[int, ...] | None = None
        self.unsafe: str | None = None
        inner = getattr(fn, "__func__", fn)
        self._globals = _FrameGlobals(getattr(inner, "__globals__", {}))
        self._global_scope = {"G": self._globals, "__builtins__": __builtins__}
        self._self = getattr(fn, "__self__", None)
        # the parameters of the frame dynamo traces, which a decorator's wrapper
        # (``wrapper(self, *args, **kwargs)``, as transformers decorates forward) names
        # itself: its guards read ``args``, not the wrapped function's parameters
        self._signature = inspect.signature(inner, follow_wrapped=False)
        params = list(self._signature.parameters.values())
        # positional calls bind by zipping names (Signature.bind costs ~5 us a call)
        self._positional = None if any(
            p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params
        ) else [p.name for p in params]

    # -- while dynamo builds guards ------------------------------------------------------

    def filter(self, guards: Sequence[Any]) -> list[bool]:
        """dynamo's ``guard_filter_fn``: keep what it can serialize, pin the rest."""
        keep = []
        for g in guards:
            kinds = (g.guard_type, *(g.derived_guard_types or ()))
            local_type = (g.guard_type == "TYPE_MATCH" and g.has_value
                          and type(g.value).__qualname__ != type(g.value).__name__)
            if not local_type and not any(k in UNSERIALIZABLE for k in kinds):
                keep.append(True)
                continue
            keep.append(False)
            try:
                self._pin(g, kinds, local_type)
            except Exception as exc:  # never break dynamo's guard building: leave the cache
                self.unsafe = self.unsafe or f"cannot pin {g.name} ({type(exc).__name__})"
        return keep

    def _pin(self, g: Any, kinds: tuple[str, ...], local_type: bool) -> None:
        """Pin what guard ``g`` checked, or mark the callable unsafe to cache."""
        if any(k in NOT_PINNABLE for k in kinds):
            self.unsafe = self.unsafe or f"dynamo guards the contents of {g.name}"
        elif not g.has_value:
            self.unsafe = self.unsafe or f"dynamo guards {g.name} without its value"
        else:
            value = type(g.value) if local_type else g.value
            self.add(f"type({g.name})" if local_type else g.name, describe(value))

    def add(self, expression: str, description: tuple) -> None:
        """Pin the object ``expression`` names (dynamo's source syntax) to ``description``."""
        try:
            names = {n.id for n in ast.walk(ast.parse(expression, mode="eval"))
                     if isinstance(n, ast.Name)}
        except SyntaxError:
            self.unsafe = self.unsafe or f"cannot evaluate dynamo's guard on {expression}"
            return
        self.pins[expression] = tuple(description)
        self._last_ids = None
        self._all = compile("(" + ", ".join(f"({e})" for e in self.pins) + ",)",
                            "<dynamo guards>", "eval")
        if names - {"G"} - _BUILTIN_NAMES:
            self._needs_locals = True

    # -- on every call -------------------------------------------------------------------

    def check(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Raise :class:`PinError` unless every pinned object is what it was."""
        if self.unsafe:
            raise PinError(self.unsafe)
        if not self.pins:
            return
        # only a pin on an argument or a closure variable needs this call's locals; the
        # usual pins (``G['torch'].nn.functional.gelu``) read globals alone
        scope = self._scope(args, kwargs) if self._needs_locals else self._global_scope
        try:
            objects = eval(self._all, scope)  # noqa: S307
        except Exception as exc:
            raise PinError(f"cannot evaluate a pinned guard ({type(exc).__name__}: {exc})"
                           ) from None
        ids = tuple(map(id, objects))
        if ids == self._last_ids:
            return
        for (expression, want), obj in zip(self.pins.items(), objects):
            got = describe(obj)
            if got != want:
                raise PinError(f"{expression} is {got[:3]}, traced with {want[:3]}")
        self._last_ids = ids

    def _scope(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if self._self is not None:
            args = (self._self, *args)
        names = self._positional
        if names is not None and not kwargs and len(args) == len(names):
            local = dict(zip(names, args))
        else:
            local = dict(self._signature.bind(*args, **kwargs).arguments)
        inner = getattr(self._fn, "__func__", self._fn)
        code = getattr(inner, "__code__", None)
        if code is not None and inner.__closure__:
            for name, cell in zip(code.co_freevars, inner.__closure__):
                try:
                    local[name] = cell.cell_contents
                except ValueError:  # an empty cell
                    continue
        return {**local, "G": self._globals, "L": local, "__builtins__": __builtins__}


class _FrameGlobals:
    """A function's globals as dynamo's guard expressions read them (``G[...]``), plus the
    names dynamo installs into the globals of the frame it traces, which need not be the
    function's own module (for an ``nn.Conv2d`` the alias of its module was not in its
    ``forward``'s globals): ``__import_<module>`` aliases and its builtins dict."""

    __slots__ = ("_globals",)

    def __init__(self, globals_: dict[str, Any]):
        self._globals = globals_

    def __getitem__(self, name: str) -> Any:
        try:
            return self._globals[name]
        except KeyError:
            if name.startswith("__import_"):
                return importlib.import_module(name[len("__import_"):].replace("_dot_", "."))
            if name.startswith("__builtins_dict__"):
                return builtins.__dict__
            raise
