"""Build the native module of a graph: lower, plan fusion, emit C, compile.

The native half of the compile stages (``disc_core.pipeline``), one function each so that
each can be run and inspected alone: :func:`lower_native` (the ``lower`` stage),
``plan_fusion`` (``fuse``), :func:`emit_native` (``emit``), :func:`compile_native`
(``build``); :func:`build_native` runs all four and returns the files and metadata an
artifact stores.
"""

from __future__ import annotations

import os  # noqa: F401  (tests patch os.sched_getaffinity through this module)
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from disc_runtime.abi import ABI_VERSION, MODULE_FILE

from ..ir import Graph
from ..opdef import Fusion, get_op
from ..options import CORE_OPTIONS
from .emit import ModuleInfo, emit_module
from .fusion import FusionPlan, NativeUnsupported, plan_fusion
from .gemm_epilogue import fuse_gemm_epilogues
from .gemm_prologue import fuse_gemm_prologues
from .helper_objects import HelperObjects
from .lower import backend_lowering
from .toolchain import (
    CompilerNotFound,
    LinkFailed,
    find_toolchain,
    running_compilers,
    usable_cpus,
)

NATIVE_ENGINE = "native"
_warned = False


@dataclass
class NativeBuild:
    files: dict[str, bytes]
    metadata: dict[str, Any]


@dataclass
class CompiledModule:
    """What the ``build`` stage made: the shared object at ``path`` and how it was built."""

    path: Path
    cc_seconds: float
    compiler: str
    vector_report: str = ""


def native_target() -> str:
    """The cache target for native code, or "reference" (warned once) without a compiler."""
    global _warned
    try:
        return find_toolchain().target
    except CompilerNotFound as exc:
        if not _warned:
            warnings.warn(str(exc), RuntimeWarning, stacklevel=3)
            _warned = True
        return "reference"


def launch_counts(native: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """(kernels, library calls) one call of a native artifact launches, from its
    ``metadata["native"]``; None for an artifact without native code (nothing counted).

    Kernels are the code DISC generated: fused kernels plus the serial scatter and scan
    loops (a kernel fused into a GEMM as its prologue or epilogue is generated code too,
    run by the library call on its blocks: counted, and a fusion); library calls are the
    GEMMs (``librarycall`` in the fusion summary). Coverage reports show both (``kernels``
    and ``library_calls`` of a cluster): counting only the generated kernels made a
    GEMM-heavy cluster look like less work than it launches.
    """
    if not native:
        return None
    steps = native.get("fusion", {})
    kernels = len(native.get("kernels", [])) + steps.get("scattercall", 0) + steps.get(
        "scancall", 0)
    return kernels, steps.get("librarycall", 0)


def _no_work(name: str) -> bool:
    """Ops that only name a value or index one inside a kernel (no pass of their own): a
    kernel of one op plus these fuses nothing. Read from the op's declared role: values
    recomputed where read (constants, iotas, dim sizes), zero-copy aliases (reshape) and
    broadcasts."""
    opdef = get_op(name)
    return opdef.fusion in (Fusion.DUPLICABLE, Fusion.ALIAS) or opdef.has_trait("broadcast")


def fusion_count(native: Mapping[str, Any] | None) -> int | None:
    """Fused groups in a native artifact (``metadata["native"]``): generated kernels that
    do the work of two or more ops. Aliases (zero-copy reshapes), GEMM calls and kernels of
    a single op are not fusions. None for an artifact without native code.

    Counted when the module is built and kept in its metadata: counting reads every
    kernel op's declaration, which imports the whole op registry (about 4 ms), on a warm
    start that otherwise needs none of it; an artifact without the count is counted now."""
    if not native:
        return None
    kept = native.get("fusions")
    return kept if isinstance(kept, int) else _count_fusions(native)


def _count_fusions(native: Mapping[str, Any]) -> int:
    return sum(1 for k in native.get("kernels", [])
               if sum(not _no_work(op) for op in k.get("ops", ()))
               >= (1 if k.get("gemm_epilogue") or k.get("gemm_prologue") else 2))


def lower_native(graph: Graph) -> Graph:
    """The ``lower`` stage: the backend rewrites (``native.lower``), in place."""
    backend_lowering().run(graph)
    return graph


def emit_native(graph: Graph, plan: FusionPlan, *, caller_busy: bool = False) -> ModuleInfo:
    """The ``emit`` stage: the C source of ``plan``, split into as many translation units
    as :func:`compile_units` allows."""
    return emit_module(graph, plan, max_units=compile_units(caller_busy=caller_busy))


def compile_native(info: ModuleInfo, directory: Path, *, vector_report: bool = False,
                   compiling: Callable[[], None] | None = None) -> CompiledModule:
    """The ``build`` stage: compile ``info``'s sources into ``directory/module.so``.

    A module that calls GEMMs needs an ILP64 BLAS at load time: without one the graph
    cannot run natively, said here (NativeUnsupported) before the C compiler spends
    seconds on it. ``compiling`` is called when the C compiler starts."""
    if info.needs_blas:
        from disc_runtime.native import find_blas

        if not all(find_blas()):
            raise NativeUnsupported("dot_general needs an ILP64 BLAS and none was found")
    tc = find_toolchain()
    if compiling is not None:
        compiling()
    so = Path(directory) / "module.so"
    with tempfile.TemporaryDirectory(prefix="disc-helpers-") as tmp, \
            HelperObjects(tc, info.helper_units, Path(tmp)) as helpers:
        try:
            cc_seconds, report = tc.compile(
                info.sources, so, vector_report=vector_report, objects=helpers.paths,
                object_units=helpers.missing,
                before_link=helpers.before_link if info.helper_units else None)
        except LinkFailed:
            if not helpers.cached:
                raise
            # a kept object that no longer links (another compiler's, a damaged file that
            # still matched its checksum): build this module's helpers afresh, once
            helpers.forget()
            cc_seconds, report = tc.compile(
                info.sources, so, vector_report=vector_report, objects=helpers.paths,
                object_units=list(zip(info.helper_units, helpers.paths)))
            helpers.cached = []
        helpers.keep()
    return CompiledModule(so, cc_seconds, tc.version, report)


def native_build(info: ModuleInfo, plan: FusionPlan, module: CompiledModule, data: bytes,
                 seconds: float, *, vector_report: bool = False) -> NativeBuild:
    """The files and metadata an artifact keeps of a native module (``data``: the bytes of
    ``module.path``; ``seconds``: lowering to linking)."""
    meta = {
        "abi": ABI_VERSION, "counters": info.counters, "kernels": info.kernels,
        "profile": info.profile, "pack_inputs": info.pack_inputs,
        "units": len(info.sources), "helper_units": len(info.helper_units),
        "fusion": plan.summary(), "needs_blas": info.needs_blas,
        "cc_seconds": round(module.cc_seconds, 4), "build_seconds": round(seconds, 4),
        "compiler": module.compiler,
    }
    meta["fusions"] = _count_fusions(meta)  # once here: a warm start reads it (fusion_count)
    if vector_report:
        meta["vector_report"] = module.vector_report
    sources = {f"native/module{'.' + str(i) if i else ''}.c": text.encode()
               for i, text in enumerate(info.sources)}
    sources.update({f"native/helper{i}.c": text.encode()
                    for i, text in enumerate(info.helper_units)})
    return NativeBuild({MODULE_FILE: data, **sources}, meta)


def native_plan(graph: Graph) -> FusionPlan:
    """The fusion plan of a lowered graph: kernels and library calls, with GEMM prologues
    and epilogues folded into their GEMMs unless ``DISC_GEMM_FUSION=0``."""
    plan = plan_fusion(graph)
    if not CORE_OPTIONS.value("gemm_fusion"):
        return plan
    return fuse_gemm_epilogues(fuse_gemm_prologues(plan, graph))


def build_native(graph: Graph, *, vector_report: bool = False,
                 compiling: Callable[[], None] | None = None) -> NativeBuild:
    """Lower, fuse, emit and compile ``graph``; ``compiling`` is called when the C
    compiler starts (see ``Compiler.compile_traced``)."""
    t0 = time.perf_counter()
    lower_native(graph)
    plan = native_plan(graph)
    info = emit_native(graph, plan, caller_busy=compiling is not None)
    with tempfile.TemporaryDirectory(prefix="disc-build-") as tmp:
        module = compile_native(info, Path(tmp), vector_report=vector_report,
                                compiling=compiling)
        data = module.path.read_bytes()
    return native_build(info, plan, module, data, time.perf_counter() - t0,
                        vector_report=vector_report)


def compile_units(caller_busy: bool = False) -> int:
    """How many translation units a large module may be split into: the CPUs this process
    may run on, less the C compilers this process is already running, less one when the
    caller goes on working while this module compiles (a bridge tracing its next graph:
    splitting there measured slower, the units and the caller's thread fighting over two
    cores). ``DISC_COMPILE_UNITS`` overrides; 1 turns splitting off."""
    env = CORE_OPTIONS.value("compile_units")
    if env is not None:
        return max(1, env)
    return max(1, usable_cpus() - running_compilers() - int(caller_busy))
