"""Build the native module of a graph: plan fusion, emit C, compile, package the files."""

from __future__ import annotations

import os
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from disc_runtime.native import ABI_VERSION, MODULE_FILE

from ..ir import Graph
from .emit import emit_module
from .fusion import NativeUnsupported, plan_fusion
from .lower import (
    canonicalize_dots,
    lower_convolutions,
    split_input_dilation,
    split_reductions,
)
from .toolchain import (
    CompilerNotFound,
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
    loops; library calls are the GEMMs (``librarycall`` in the fusion summary). Coverage
    reports show both (``kernels`` and ``library_calls`` of a cluster): counting only the
    generated kernels made a GEMM-heavy cluster look like less work than it launches.
    """
    if not native:
        return None
    steps = native.get("fusion", {})
    kernels = len(native.get("kernels", [])) + steps.get("scattercall", 0) + steps.get(
        "scancall", 0)
    return kernels, steps.get("librarycall", 0)


#: ops that only name a value or index one inside a kernel (no pass of their own): a kernel
#: of one op plus these fuses nothing
_NO_WORK = frozenset({"constant", "iota", "get_dimension_size", "broadcast_in_dim", "reshape"})


def fusion_count(native: Mapping[str, Any] | None) -> int | None:
    """Fused groups in a native artifact (``metadata["native"]``): generated kernels that
    do the work of two or more ops. Aliases (zero-copy reshapes), GEMM calls and kernels of
    a single op are not fusions. None for an artifact without native code."""
    if not native:
        return None
    return sum(1 for k in native.get("kernels", [])
               if sum(op not in _NO_WORK for op in k.get("ops", ())) >= 2)


def build_native(graph: Graph, *, vector_report: bool = False,
                 compiling: Callable[[], None] | None = None) -> NativeBuild:
    """Lower, fuse, emit and compile ``graph``; ``compiling`` is called when the C
    compiler starts (see ``Compiler.compile_traced``)."""
    t0 = time.perf_counter()
    split_input_dilation(graph)
    lower_convolutions(graph)
    split_reductions(graph)
    canonicalize_dots(graph)
    plan = plan_fusion(graph)
    units = compile_units(caller_busy=compiling is not None)
    info = emit_module(graph, plan, max_units=units)
    if info.needs_blas:
        from disc_runtime.native import find_blas

        if not all(find_blas()):
            raise NativeUnsupported("dot_general needs an ILP64 BLAS and none was found")
    tc = find_toolchain()
    if compiling is not None:
        compiling()
    with tempfile.TemporaryDirectory(prefix="disc-build-") as tmp:
        so = Path(tmp) / "module.so"
        cc_seconds, report = tc.compile(info.sources, so, vector_report=vector_report)
        data = so.read_bytes()
    meta = {
        "abi": ABI_VERSION, "counters": info.counters, "kernels": info.kernels,
        "profile": info.profile,
        "units": len(info.sources),
        "fusion": plan.summary(), "needs_blas": info.needs_blas,
        "cc_seconds": round(cc_seconds, 4), "build_seconds": round(time.perf_counter() - t0, 4),
        "compiler": tc.version,
    }
    if vector_report:
        meta["vector_report"] = report
    sources = {f"native/module{'.' + str(i) if i else ''}.c": text.encode()
               for i, text in enumerate(info.sources)}
    return NativeBuild({MODULE_FILE: data, **sources}, meta)


def compile_units(caller_busy: bool = False) -> int:
    """How many translation units a large module may be split into: the CPUs this process
    may run on, less the C compilers this process is already running, less one when the
    caller goes on working while this module compiles (a bridge tracing its next graph:
    splitting there measured slower, the units and the caller's thread fighting over two
    cores). ``DISC_COMPILE_UNITS`` overrides; 1 turns splitting off."""
    env = os.environ.get("DISC_COMPILE_UNITS")
    if env:
        return max(1, int(env))
    return max(1, usable_cpus() - running_compilers() - int(caller_busy))
