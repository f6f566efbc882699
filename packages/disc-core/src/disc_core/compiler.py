"""Compile a graph once per dtype/rank signature and run it through disc-runtime.

The cache key is the graph's text (symbolic dims, never the concrete sizes of a call), the
input dtypes and ranks, the DISC versions and the target: every shape of the same rank
reuses one artifact. ``jit`` is the entry point bridges and the demo use: it looks the
executable up on every call (a dict hit after the first) and counts compilations.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from disc_runtime import (
    Artifact,
    CompileCache,
    Executable,
    as_numpy,
    default_cache,
)

from . import engine
from .dtypes import load_bfloat16
from .fingerprint import compiler_fingerprint, source_fingerprint
from .ir import Graph
from .native.build import native_target
from .parser import parse_graph
from .pipeline import compile_graph, key_for, signature_of

__all__ = ["CompileStats", "Compiler", "JitFunction", "compiler_fingerprint", "jit",
           "signature_of", "source_fingerprint"]

engine.register()


@dataclass
class CompileStats:
    """What a compiler did: compilations (cache misses), hits, and time spent compiling."""

    compiles: int = 0
    memory_hits: int = 0
    disk_hits: int = 0
    compile_seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, source: str, seconds: float) -> None:
        with self._lock:
            if source == "miss":
                self.compiles += 1
                self.compile_seconds += seconds
            elif source == "memory":
                self.memory_hits += 1
            else:
                self.disk_hits += 1


class Compiler:
    """Optimizes graphs and turns them into cached disc-runtime executables."""

    def __init__(self, cache: CompileCache | None = None, *, target: str = "auto",
                 optimize: bool = True):
        """``target``: "native" (C codegen), "reference" (the interpreter) or "auto" (native
        when a C compiler exists, else the interpreter with a one-time warning)."""
        self.cache = cache if cache is not None else default_cache()
        self.target = native_target() if target in ("auto", "native") else target
        if target == "native" and self.target == "reference":
            raise RuntimeError("target='native' needs a C compiler; none was found")
        self.optimize = optimize
        # Hashed here, on the caller's thread: bridges build in background threads, where
        # reading ~60 files while the main thread holds the GIL took 0.5-0.9 s.
        compiler_fingerprint()
        self.stats = CompileStats()
        self._executables: dict[str, Executable] = {}
        self._lock = threading.Lock()

    def key(self, graph_text: str, input_types: Sequence[tuple[str, int]]) -> str:
        return key_for(graph_text, input_types, target=self.target, optimize=self.optimize)

    def compile(self, graph: Graph) -> Executable:
        """The executable for ``graph`` (one compilation per distinct graph and target)."""
        return self.compile_traced(graph)[0]

    def compile_traced(self, graph: Graph, *, compiling: Callable[[], None] | None = None
                       ) -> tuple[Executable, str]:
        """Like :meth:`compile`, plus where the executable came from: "miss" (compiled
        now), "memory" or "disk" (a cache hit). Bridges put this in the coverage report.

        ``compiling`` is called once the C compiler runs (a subprocess; what is left is
        seconds of waiting): a bridge building in a background thread waits for it before
        going on, so that its own Python work does not contend for the GIL with the
        build's passes and code generation."""
        text = str(graph)
        return self._lookup(text, [(v.dtype.np_name, v.rank) for v in graph.inputs], graph,
                            compiling)

    def compile_text(self, text: str, input_types: Sequence[Sequence[Any]]
                     ) -> tuple[Executable, str]:
        """Like :meth:`compile_traced` for a graph given as the text it prints, with its
        inputs' (numpy dtype name, rank): what a bridge keeps of a compiled graph. A
        cache hit never parses the text; a miss parses and builds it."""
        return self._lookup(text, [tuple(t) for t in input_types], None)

    def _get(self, text: str, input_types: Sequence[tuple[str, int]], graph: Graph
             ) -> Executable:
        return self._lookup(text, input_types, graph)[0]

    def _lookup(self, text: str, input_types: Sequence[tuple[str, int]], graph: Graph | None,
                compiling: Callable[[], None] | None = None) -> tuple[Executable, str]:
        """``text`` is what ``graph`` prints (the cache key); a build clones ``graph``
        (parses ``text`` when there is no graph)."""
        key = self.key(text, input_types)
        exe = self._executables.get(key)
        if exe is not None:
            self.stats.record("memory", 0.0)
            return exe, "memory"
        t0 = time.perf_counter()
        artifact, source = self.cache.get_or_build(
            key, lambda path: self._build(text, key, path, graph, compiling))
        exe = Executable.load(with_dtypes_loaded(artifact))
        self.stats.record(source, time.perf_counter() - t0)
        with self._lock:
            self._executables.setdefault(key, exe)
        return self._executables[key], source

    def _build(self, text: str, key: str, path: Path, source: Graph | None,
               compiling: Callable[[], None] | None) -> Artifact:
        """Every stage (``disc_core.pipeline``), packaged at ``path``."""
        # a private copy: passes mutate
        graph = source.clone() if source is not None else parse_graph(text)
        graph.verify()
        result = compile_graph(graph, source_text=text, target=self.target,
                               optimize_graph=self.optimize, key=key, artifact_path=path,
                               compiling=compiling)
        assert result.artifact is not None
        return result.artifact


class JitFunction:
    """A graph you can call: compiled on first use per dtype/rank signature, then reused."""

    def __init__(self, graph: Graph, compiler: Compiler | None = None):
        graph.verify()
        self.graph = graph
        self.compiler = compiler or Compiler()
        self._text = str(graph)
        self._snapshot = graph.clone()  # what builds start from, whatever the caller edits

    @property
    def stats(self) -> CompileStats:
        return self.compiler.stats

    def __call__(self, *inputs: Any) -> list[np.ndarray]:
        arrays = [as_numpy(x) for x in inputs]
        exe = self.compiler._get(self._text, [(a.dtype.name, a.ndim) for a in arrays],
                                 self._snapshot)
        return exe.run(arrays)


def jit(graph: Graph, *, cache: CompileCache | None = None, target: str = "auto"
        ) -> JitFunction:
    return JitFunction(graph, Compiler(cache, target=target))


def with_dtypes_loaded(artifact: Any) -> Any:
    """``artifact``, after registering numpy's bfloat16 when its signature names it:
    disc-runtime resolves that name only once someone has (``dtypes.load_bfloat16``)."""
    sig = artifact.signature
    if any(spec.dtype == "bfloat16" for spec in (*sig.inputs, *sig.outputs)):
        load_bfloat16()
    return artifact
