"""Traced graphs on disk: a new process with the same model and code skips tracing.

Tracing dominates a warm start (dynamo's bytecode analysis, aot_autograd's joint trace and
partition, DISC's lowering: about 2.5 s of a 3.3 s first pass over the GPT stream, where
the native modules themselves come from the compile cache in milliseconds). torch keeps a
compiled function across processes through dynamo's *precompile* packages: the transformed
bytecode and its guards, plus one serialized artifact per backend graph. DISC plugs into it
as a serializable aot_autograd compiler: every compiled graph is a :class:`DiscOutputCode`,
which aot_autograd bundles with its own runtime metadata (input mutations, aliased
outputs, saved tensors), so the reloaded callable is torch's own wrapper around the same
partitioned graphs. :mod:`disc_torch.frozen` turns those into plain data.

One package per optimized callable lives under the compile cache's directory, in
``torch-graphs-v1/<key>.pkl``. The key covers the function's source file and qualified
name, the module's structure (``repr``, and the source files of every submodule's class),
the DISC options, the torch, DISC and Python versions and the hashed sources of disc-torch
and disc-core. dynamo's guards, kept in the package, check the rest
(shapes, dtypes, grad mode, constants) on every call as usual, and a miss traces and adds
to the package. Guards on object identities cannot be kept: DISC drops them from what
dynamo builds and checks those objects itself on every call (:mod:`disc_torch.identity`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib
import inspect
import itertools
import logging
import os
import pickle
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch._dynamo.exc import PackageError
from torch._dynamo.package import CompilePackage, PrecompileCacheEntry
from torch._dynamo.precompile_context import PrecompileContext
from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache
from torch._inductor.output_code import OutputCode

from disc_core.bridge import selection

from ._version_check import BRIDGE_VERSION
from .compilers import get_compiler
from .fallback import warn_once
from .frozen import FreezeError, freeze_graph, thaw_graph
from .identity import IdentityPins
from .wrapped_functions import globals_module, keeping_wrapped_functions

__all__ = ["DiscOutputCode", "GraphPackage", "NotCacheable", "caching_active", "caching_graphs",
           "forward_of"]

LAYOUT = "torch-graphs-v1"


@dataclasses.dataclass
class DiscOutputCode(OutputCode):
    """A DISC-partitioned graph as aot_autograd's serializable compiled-graph type.

    Live, it holds the :class:`~disc_torch.partition.PartitionedGraph`; prepared for
    serialization (on a copy, by aot_autograd), it holds the frozen data instead; after
    loading, ``post_compile`` thaws it with the process's DISC compiler."""

    graph: Any = None
    frozen: dict[str, Any] | None = None
    target: str = "auto"

    def __post_init__(self) -> None:
        # called with one list of arguments, which it may clear; an instance attribute, so
        # that the wrappers aot_autograd puts around a backward (functools.wraps) copy it
        self._boxed_call = True

    def __call__(self, inputs: Any) -> Any:
        return self.graph(inputs)

    def prepare_for_serialization(self) -> None:
        try:
            self.frozen = freeze_graph(self.graph)
        except FreezeError as exc:  # torch then keeps no package entry for this graph
            raise BypassAOTAutogradCache(f"DISC: {exc}") from exc
        self.graph = None

    def post_compile(self, example_inputs: Any, constants: Any, graph_kwargs: Any) -> None:
        if self.graph is None:
            self.graph = thaw_graph(self.frozen, get_compiler(self.target))

    def set_triton_bundle(self, triton_bundle: Any) -> None:
        pass  # no Triton kernels


@functools.cache
def _file_digest(path: str, stat: tuple[int, int]) -> str:
    """Cached per (path, size and modification time): a file edited while the process
    runs (a notebook's autoreload) is hashed again."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _module_digest(module_name: str) -> str:
    """The source file of a module, hashed (any edit of it changes the key: cheaper and
    stricter than locating one class's source, which parses the whole file). Code with no
    file (``python -c``, a notebook cell) is not cached: an edit could not be seen."""
    path = getattr(sys.modules.get(module_name), "__file__", None)
    try:
        st = os.stat(path) if path else None
    except OSError:
        st = None
    if st is None:
        raise NotCacheable(f"module {module_name!r} has no source file to key the cache by")
    return _file_digest(path, (st.st_size, st.st_mtime_ns))


def forward_of(model_or_fn: Any) -> Any:
    """The function dynamo traces for ``model_or_fn``: a module's bound ``forward``."""
    return model_or_fn.forward if isinstance(model_or_fn, torch.nn.Module) else model_or_fn


class NotCacheable(Exception):
    """The callable has nothing dynamo can keep (a builtin, say): it traces as usual."""


def _stable_repr(value: Any) -> str:
    """repr with sets sorted (a set of strings prints in a per-process hash order)."""
    return repr(sorted(value)) if isinstance(value, (set, frozenset)) else repr(value)


@functools.cache
def _bridge_fingerprint() -> str:
    """disc-torch's own source, hashed: a changed bridge (converters, partitioning, this
    format) never loads packages an older one wrote. disc-core's is in
    :func:`~disc_core.compiler.compiler_fingerprint`."""
    from disc_core.compiler import source_fingerprint

    return source_fingerprint(Path(__file__).parent)


def package_key(model_or_fn: Any, config: Any) -> str:
    """What a cached package is valid for (see the module docstring)."""
    from torch._dynamo.eval_frame import innermost_fn

    from disc_core import __version__ as core_version
    from disc_core.compiler import compiler_fingerprint

    if isinstance(model_or_fn, torch.nn.parallel.DistributedDataParallel):
        # dynamo traces DDP's own forward, whose identity guards (torch 2.13: a local of
        # its inner frames) DISC cannot pin, and splits the graph per gradient bucket:
        # packaging it made every rank trace each step twice. Traced anew in every process;
        # the compiled clusters still come from the shared compile cache.
        raise NotCacheable("DistributedDataParallel's forward is not kept on disk")
    inner = innermost_fn(forward_of(model_or_fn))
    inner = getattr(inner, "__func__", inner)
    if not hasattr(inner, "__code__"):
        raise NotCacheable(f"{type(inner).__name__} has no Python code for dynamo to keep")
    parts: list[str] = [
        inner.__module__, inner.__qualname__, str(inner.__code__.co_firstlineno),
        _module_digest(inner.__module__), torch.__version__, BRIDGE_VERSION, core_version,
        _bridge_fingerprint(), compiler_fingerprint(), sys.version,
        # the resolved options (environment overrides included), not the keywords
        repr(sorted((f.name, _stable_repr(getattr(config, f.name)))
                    for f in dataclasses.fields(config) if f.name != "report_path")),
    ]
    if isinstance(model_or_fn, torch.nn.Module):
        parts.append(repr(model_or_fn))
        for cls in sorted({type(m) for m in model_or_fn.modules()}, key=repr):
            parts.append(f"{cls.__module__}.{cls.__qualname__}:{_module_digest(cls.__module__)}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:40]


class GraphPackage:
    """The dynamo package of one optimized callable, read from and written to disk."""

    def __init__(self, model_or_fn: Any, config: Any, directory: Path):
        fn = forward_of(model_or_fn)
        self.path = directory / LAYOUT / f"{package_key(model_or_fn, config)}.pkl"
        self.pins = IdentityPins(fn)
        self._code = getattr(getattr(fn, "__func__", fn), "__code__", None)
        self._saved: set[str] = set()
        self._loaded_bytes: bytes | None = None
        self._backends_seen = 0
        self.loaded = False
        #: why this callable's package is neither loaded nor written (None: it is)
        self.unusable: str | None = None
        self.unusable_marker = self.path.with_suffix(".unusable")
        self.package = self._load(fn)
        _record_unnamed_frames(self.package)

    def _load(self, fn: Any) -> CompilePackage:
        if self.unusable_marker.exists():
            self.unusable = _read_reason(self.unusable_marker)
            _warn_unusable(fn, f"an earlier process found: {self.unusable}")
            return _compile_package(fn, None)
        if not self.path.exists():
            return _compile_package(fn, None)
        package = None
        try:
            data = self.path.read_bytes()
            entry, pins, module_globals = pickle.loads(data)
            if not isinstance(entry, PrecompileCacheEntry) or not isinstance(pins, dict):
                raise TypeError("not a (PrecompileCacheEntry, pins, modules) triple")
            for expression, description in pins.items():
                self.pins.add(expression, description)
            # the bytes are kept for when the package grows: installing thaws the graphs
            # inside these artifacts in place, and a deep copy costs more than a re-read
            self._loaded_bytes = data
            scopes = _global_scopes(entry)
            before = [set(scope) for scope in scopes]
            package = _compile_package(fn, entry.dynamo)
            _install_module_globals(module_globals)
            with _guard_errors_unlogged():  # a failure is DISC's warning below, once
                package.install(entry.backends)
            _skip_installed_names(package)
        except Exception as exc:  # a stale or damaged entry costs a trace, never the run
            installing = package is not None
            if installing:
                # what was installed before the failure (a resume function, a builtins
                # dict under dynamo's global names) would collide with the next trace
                _uninstall(package, scopes, before)
            self._loaded_bytes = None
            self.pins = IdentityPins(fn)
            reason = f"{type(exc).__name__}: {str(exc)[:200]}"
            if installing:
                # read back whole, it still does not install: this process would only
                # write the same again, so none writes it for this key
                self.unusable = reason
                _write_reason(self.unusable_marker, reason)
                _warn_unusable(fn, reason)
            else:
                warn_once(f"DISC: the traced-graph cache entry {self.path} cannot be used "
                          f"({reason}); tracing again")
            return _compile_package(fn, None)
        self._saved = set(entry.backends)
        self.loaded = True
        return package

    def forget_loaded(self) -> None:
        """Stop dynamo from using what was loaded (its entries lack identity guards)."""
        if self.loaded:
            from torch._C._dynamo.eval_frame import _reset_precompile_entries

            _reset_precompile_entries(self._code)

    def save_if_grown(self) -> None:
        """Write the package when this process added graphs to it. A graph whose backend
        artifact torch did not keep (its reason is in torch's logs) leaves the package
        unwritten: a partial package would trace again anyway. Never raises: the user's
        call has already run. Cheap when nothing was added (every call asks).

        Nor under a cluster selection (``DISC_BISECT_CLUSTERS``): its clusters left out
        would be kept as failed, and every later process, whatever it selects, would run
        them eagerly."""
        seen = len(self.package.cached_backends)
        if seen == self._backends_seen:
            return
        self._backends_seen = seen
        if selection.allowed_keys() is not None or self.unusable is not None:
            return
        try:
            self._save()
        except Exception as exc:
            warn_once(f"DISC: writing the traced-graph cache entry {self.path} failed "
                      f"({type(exc).__name__}: {exc}); the next process traces again")

    def _save(self) -> None:
        package = self.package
        if not package.is_initialized() or package._current_entry is not None:
            return
        entry = package.cache_entry()
        # a bypassed frame's graphs are never installed from the package: not kept
        ids = {str(b) for code in entry.codes if not code.bypassed for b in code.backend_ids}
        if not ids or ids <= self._saved:
            return
        if self.pins.unsafe:
            return
        loaded = pickle.loads(self._loaded_bytes)[0].backends if self._loaded_bytes else {}
        backends = {}
        for backend_id in ids:
            artifact = PrecompileContext.serialize_artifact_by_key(backend_id)
            if artifact is None:
                artifact = loaded.get(backend_id)
            if artifact is None:
                self._saved = ids  # not again for the same graphs
                return
            backends[backend_id] = artifact
        self._saved = ids
        data = pickle.dumps((PrecompileCacheEntry(entry, backends), dict(self.pins.pins),
                             _module_globals(entry.codes)))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self.path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


def _compile_package(fn: Any, dynamo: Any) -> CompilePackage:
    """dynamo's package for ``fn``, its traced frame filed under the module whose globals
    that frame runs in.

    dynamo files it under ``fn.__module__`` and installs the compiled graphs into that
    module's globals. A decorator's wrapper (transformers decorates most ``forward``
    methods) has the module of the function it wraps (``functools.wraps`` copies it) and
    the globals of the decorator's own: a package loaded so installed its graphs where
    the frame does not look, and the first call failed (``NameError``)."""
    package = CompilePackage(fn, dynamo)
    module = globals_module(fn)
    entry = package._codes.get(getattr(getattr(fn, "__func__", fn), "__code__", None))
    if entry is not None and module in sys.modules and entry.python_module != module:
        entry.python_module = module
    return package


def _record_unnamed_frames(package: CompilePackage) -> None:
    """Let ``package`` meet frames it cannot name without failing the call.

    dynamo records every frame it compiles under a package by a dotted path a new process
    can look the code up by. Some frames have none: a property's getter that dynamo could
    not inline (a graph break inside it; transformers' ``loss_function`` under GPT-2 with
    labels), a function made inside another. dynamo then raises ``PackageError`` out of
    the user's call. Here such a frame gets an entry without a name, marked bypassed as
    dynamo marks the frames whose guards it cannot save: it is compiled and runs as usual,
    and the package keeps nothing of it, so a new process traces it again (its other
    frames still load)."""
    original = package.code_context

    @contextlib.contextmanager
    def code_context(code: Any) -> Iterator[None]:
        if code not in package._codes:
            try:
                package._add_user_function(code)
            except PackageError:
                module = inspect.getmodule(code) or sys.modules[_innermost_module(package)]
                package._add_function(code, module.__name__)
                package._codes[code].bypassed = True
        with original(code):
            yield

    package.code_context = code_context


@contextlib.contextmanager
def _guard_errors_unlogged() -> Iterator[None]:
    """torch logs a traceback at ERROR level for every guard it fails to build (about 20
    lines under a transformers model whose package does not install) before the error
    reaches :meth:`GraphPackage._load`, which reports it as one warning."""
    guards_log = logging.getLogger("torch._guards")
    previous = guards_log.disabled
    guards_log.disabled = True
    try:
        yield
    finally:
        guards_log.disabled = previous


#: globals by which dynamo's generated code loads a module object it has no other name
#: for (``___module_collections_<id>_c0``: codegen's ``create_load_python_module``, when
#: the code rebuilds an output such as transformers' ``ModelOutput``); its package does not
#: record them, so DISC's does
_MODULE_GLOBAL = "___module_"


def _module_globals(codes: Any) -> dict[str, dict[str, str]]:
    """{frame module: {global name: name of the module it holds}} of those globals."""
    out: dict[str, dict[str, str]] = {}
    for code in codes:
        module = sys.modules.get(code.python_module)
        for name, value in list(vars(module).items()) if module is not None else ():
            if name.startswith(_MODULE_GLOBAL) and inspect.ismodule(value):
                out.setdefault(code.python_module, {})[name] = value.__name__
    return out


def _install_module_globals(module_globals: dict[str, dict[str, str]]) -> None:
    """Put the globals :func:`_module_globals` recorded back (before ``install``)."""
    for frame_module, names in module_globals.items():
        scope = vars(sys.modules[frame_module])
        for name, module_name in names.items():
            scope.setdefault(name, importlib.import_module(module_name))


def _global_scopes(entry: PrecompileCacheEntry) -> list[dict[str, Any]]:
    """The global dicts a package's ``install`` writes into (its frames' modules)."""
    names = {code.python_module for code in entry.dynamo.codes}
    return [vars(sys.modules[n]) for n in sorted(names) if n in sys.modules]


def _uninstall(package: CompilePackage, scopes: list[dict[str, Any]],
               before: list[set[str]]) -> None:
    """Undo a partial ``install``: the globals it put in modules (``scopes``, whose names
    were ``before``; dynamo's builtins dict is not in the package's own list) and the
    compiled entries it attached to live code objects (the callable's own, and those
    found by name)."""
    from torch._C._dynamo.eval_frame import _reset_precompile_entries
    from torch._dynamo.package import _lookup_code

    with contextlib.suppress(Exception):
        package.uninstall()
    for scope, names in zip(scopes, before, strict=True):
        for name in [n for n in scope if n not in names and n.startswith("__")]:
            del scope[name]
    for entry in package._codes.values():
        if entry.code_source:
            with contextlib.suppress(Exception):
                _reset_precompile_entries(_lookup_code(entry))


def _warn_unusable(fn: Any, reason: str) -> None:
    inner = getattr(fn, "__func__", fn)
    name = getattr(inner, "__qualname__", type(inner).__name__)
    warn_once(f"DISC: what dynamo traced for {name} cannot be kept on disk ({reason}); it "
              "is traced in every process (its compiled clusters still come from the "
              "compile cache)")


def _write_reason(path: Path, reason: str) -> None:
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(reason + "\n")


def _read_reason(path: Path) -> str:
    try:
        return path.read_text().strip() or "no reason recorded"
    except OSError as exc:
        return f"unreadable marker: {exc}"


def _innermost_module(package: CompilePackage) -> str:
    """The module of the function ``package`` was made for (where an unnamed frame's
    entry is filed when its own module cannot be found)."""
    return package._innermost_fn.__module__


def _skip_installed_names(package: CompilePackage) -> None:
    """Move dynamo's global name counter past the names the package installed.

    dynamo names the globals of a traced frame (``__builtins_dict___0``,
    ``__compiled_fn_1_...``) from one process-wide counter, which starts at 0 in a new
    process; tracing a new frame (another grad mode, say) after installing a loaded
    package would then reuse an installed name and fail."""
    import torch._dynamo.bytecode_transformation as bytecode

    top = -1
    for code in package._codes.values():
        module = sys.modules.get(code.python_module)
        for name in vars(module) if module is not None else ():
            if name.startswith("__") and not name.startswith(_MODULE_GLOBAL):  # (an id)
                top = max([top, *(int(n) for n in re.findall(r"_(\d+)(?=_|$)", name))])
    current = next(bytecode._unique_id_counter)
    bytecode._unique_id_counter = itertools.count(max(current, top + 1))


@contextlib.contextmanager
def caching_graphs(enabled: bool) -> Iterator[None]:
    """On while an optimized callable with a package runs: aot_autograd then bundles its
    result for the package, and the backend compiles serializable graphs. (Not dynamo's
    ``caching_precompile``, which would drop identity guards: see
    :mod:`disc_torch.identity`.)"""
    import torch._functorch.config as functorch_config

    global _active
    previous = functorch_config.bundled_autograd_cache, _active
    functorch_config.bundled_autograd_cache = enabled or previous[0]
    _active = enabled or previous[1]
    try:
        with keeping_wrapped_functions(enabled):
            yield
    finally:
        functorch_config.bundled_autograd_cache, _active = previous


_active = False


def caching_active() -> bool:
    """Is an optimized callable with a package running (see :func:`caching_graphs`)?"""
    return _active
