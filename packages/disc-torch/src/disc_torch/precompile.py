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
import itertools
import os
import pickle
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
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
        self.package = self._load(fn)

    def _load(self, fn: Any) -> CompilePackage:
        if not self.path.exists():
            return CompilePackage(fn, None)
        try:
            data = self.path.read_bytes()
            entry, pins = pickle.loads(data)
            if not isinstance(entry, PrecompileCacheEntry) or not isinstance(pins, dict):
                raise TypeError("not a (PrecompileCacheEntry, pins) pair")
            for expression, description in pins.items():
                self.pins.add(expression, description)
            # the bytes are kept for when the package grows: installing thaws the graphs
            # inside these artifacts in place, and a deep copy costs more than a re-read
            self._loaded_bytes = data
            package = CompilePackage(fn, entry.dynamo)
            package.install(entry.backends)
            _skip_installed_names(package)
        except Exception as exc:  # a stale or damaged entry costs a trace, never the run
            self._loaded_bytes = None
            self.pins = IdentityPins(fn)
            warn_once(f"DISC: the traced-graph cache entry {self.path} cannot be used "
                      f"({type(exc).__name__}: {str(exc)[:200]}); tracing again")
            return CompilePackage(fn, None)
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
        if selection.allowed_keys() is not None:
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
        ids = {str(b) for code in entry.codes for b in code.backend_ids}
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
        data = pickle.dumps((PrecompileCacheEntry(entry, backends), dict(self.pins.pins)))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self.path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


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
            if name.startswith("__"):
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
        yield
    finally:
        functorch_config.bundled_autograd_cache, _active = previous


_active = False


def caching_active() -> bool:
    """Is an optimized callable with a package running (see :func:`caching_graphs`)?"""
    return _active
