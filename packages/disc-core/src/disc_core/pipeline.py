"""The compile stages, each a named step that can be run and inspected alone.

    optimize -> lower -> fuse -> emit -> build -> package

``optimize`` runs the graph passes (shape propagation, canonicalization, folding, CSE,
DCE) on the verified core graph; ``lower`` runs the native backend's rewrites
(``native.lower``: phase-split input-dilated convolutions, im2col convolutions,
single-axis reduction chains, BLAS layouts for dots); ``fuse`` plans the kernels; ``emit``
writes the C module; ``build`` compiles it; ``package`` writes the runtime artifact.

``optimize`` comes before ``lower`` (issue 21 listed them the other way round) because
that is the order compilations have always run in, and the artifact depends on it: its
``graph.disc`` (the reference engine's program, and the fallback when a graph has no native
path) is the optimized graph *before* backend lowering, and the optimizer never sees the
lowered forms (im2col gathers, transposes in front of GEMMs), which it would otherwise try
to canonicalize again. Under the ``reference`` target, or when a backend stage finds an op
it cannot compile (``NativeUnsupported``), the backend stages are skipped and ``package``
writes an interpreter artifact that says why (``metadata["native_fallback"]``).

Each stage is a function with a typed input and output (:func:`optimize`, :func:`lower`,
:func:`fuse`, :func:`emit`, :func:`build`, :func:`package`); :func:`compile_text` runs
them in order up to ``stop_after`` and returns a :class:`StageResult` whose ``text`` is
the last stage's output in readable form (``disc compile FILE --stop-after STAGE``).
``Compiler`` runs the same functions, so ``stop_after="package"`` writes the artifact a
``Compiler`` writes for the same text (same cache key, same files).
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from disc_runtime import Artifact, Signature, TensorSpec, cache_key
from disc_runtime import __version__ as runtime_version
from disc_runtime import facts as runtime_facts
from disc_runtime.abi import ABI_VERSION as NATIVE_ABI_VERSION

from . import engine
from ._version import __version__
from .fingerprint import compiler_fingerprint
from .ir import Graph, TensorType
from .native.build import (
    NATIVE_ENGINE,
    CompiledModule,
    NativeBuild,
    compile_native,
    emit_native,
    lower_native,
    native_build,
    native_plan,
    native_target,
)
from .native.emit import ModuleInfo
from .native.fusion import FusionPlan, Kernel, NativeUnsupported
from .native.lower import backend_lowering
from .options import CORE_OPTIONS
from .parser import parse_graph
from .passes import default_pipeline
from .passes.manager import PassStats
from .stages import STAGES

__all__ = ["STAGES", "StageResult", "build", "compile_graph", "compile_text", "emit", "fuse",
           "key_for", "lower", "optimize", "package", "resolve_target", "signature_of"]



def _spec(name: str, t: TensorType) -> TensorSpec:
    dims = tuple(d.value if d.is_const else str(d) for d in t.shape)
    return TensorSpec(name=name, dtype=t.dtype.np_name, dims=dims)


def signature_of(graph: Graph) -> Signature:
    """The runtime signature of ``graph``: its inputs' and outputs' dtypes and dims."""
    ins = [_spec(v.name or f"arg{i}", v.type) for i, v in enumerate(graph.inputs)]
    outs = [_spec(f"output_{i}", v.type) for i, v in enumerate(graph.outputs)]
    return Signature(inputs=tuple(ins), outputs=tuple(outs))


def resolve_target(target: str) -> str:
    """"native"/"auto" -> the native cache target, or "reference" without a C compiler
    ("native" then raises); anything else as given."""
    resolved = native_target() if target in ("auto", "native") else target
    if target == "native" and resolved == "reference":
        raise RuntimeError("target='native' needs a C compiler; none was found")
    return resolved


def key_for(graph_text: str, input_types: Sequence[tuple[str, int]], *, target: str,
            optimize: bool = True) -> str:
    """The compile cache key of a graph's text and its inputs' (dtype, rank): never a
    concrete size, so every shape of a rank shares one artifact. With fused attention
    off (``DISC_FUSED_ATTENTION=0``) the optimize stage builds another graph: its own key.

    The CPU (model and feature flags) is part of it: modules are built for the host
    (``-march=native``), and a cache directory shared by hosts of different CPUs (ranks
    on several machines, a cache baked into an image) must not hand an AVX-512 module to
    a CPU without AVX-512, where it would die of an illegal instruction."""
    extra = {} if CORE_OPTIONS.value("fused_attention") else {"fused_attention": False}
    if not CORE_OPTIONS.value("gemm_fusion"):  # another fusion plan: another module
        extra["gemm_fusion"] = False
    if "convolution" in graph_text:  # where convolutions run: oneDNN or im2col + GEMM
        from .native.onednn_conv import cache_identity

        extra.update(cache_identity())
    return cache_key({**extra,
        "graph": hashlib.sha256(_unnamed(graph_text).encode()).hexdigest(),
        "inputs": [list(t) for t in input_types],
        "disc-core": __version__,
        "compiler": compiler_fingerprint(),
        "cpu": runtime_facts.cpu_identity(),
        "disc-runtime": runtime_version,
        "target": target,
        "abi": NATIVE_ABI_VERSION,  # a module built for another engine ABI never loads
        "optimize": optimize,
    })


_GRAPH_NAME = re.compile(r"\Afunc @[^(\s]*\(")


def _unnamed(graph_text: str) -> str:
    """The text without the graph's name, which says where a graph came from (a bridge
    numbers the graphs of a process: ``forward_0_c0``, ``forward_2_c0`` after a
    recompile), not what it computes: two graphs that differ only in their names share
    one artifact. HF ResNet's training step traced twice (transformers sets
    ``config.problem_type`` on the first call) built both clusters again, 22 s."""
    return _GRAPH_NAME.sub("func @_(", graph_text, count=1)


# -- the stages ---------------------------------------------------------------------------

def optimize(graph: Graph, *, enabled: bool = True) -> Graph:
    """``optimize``: the graph passes to a fixpoint, in place (nothing when disabled)."""
    if enabled:
        default_pipeline().run(graph)
    return graph


def lower(graph: Graph, *, stats: dict[str, PassStats] | None = None) -> Graph:
    """``lower``: the native backend's rewrites (``native.lower``), in place; each pass's
    runs and changes go to ``stats`` (by pass name) when given."""
    if stats is None:
        return lower_native(graph)
    manager = backend_lowering()
    manager.run(graph)
    stats.update(manager.stats)
    return graph


def fuse(graph: Graph) -> FusionPlan:
    """``fuse``: the fusion plan of a lowered graph (kernels, GEMM calls, aliases...)."""
    return native_plan(graph)


def emit(graph: Graph, plan: FusionPlan, *, caller_busy: bool = False) -> ModuleInfo:
    """``emit``: the C module of ``plan`` (one or more translation units)."""
    return emit_native(graph, plan, caller_busy=caller_busy)


def build(module: ModuleInfo, directory: Path, *, vector_report: bool = False,
          compiling: Callable[[], None] | None = None) -> CompiledModule:
    """``build``: compile ``module`` into ``directory/module.so``."""
    return compile_native(module, directory, vector_report=vector_report, compiling=compiling)


def package(path: Path, graph: Graph, *, source_text: str, key: str, target: str,
            native: NativeBuild | None = None, fallback: str | None = None,
            graph_text: str | None = None) -> Artifact:
    """``package``: the runtime artifact at ``path``: the optimized graph's text
    (``graph_text``, printed before backend lowering; ``graph``'s text when None), its
    signature, and the native module when there is one, else the reason there is none."""
    files = {engine.GRAPH_FILE: (str(graph) if graph_text is None else graph_text).encode()}
    metadata: dict[str, Any] = {"source_graph": source_text}
    engine_name = engine.ENGINE_NAME
    if fallback is not None:
        # the graph still runs, on the interpreter; the reason is kept for reports
        metadata["native_fallback"] = fallback
    elif native is not None:
        files.update(native.files)
        metadata["native"] = native.metadata
        engine_name = NATIVE_ENGINE
    return Artifact.write(
        path, name=graph.name, engine=engine_name, target=target,
        signature=signature_of(graph), files=files, key=key,
        producer={"disc-core": __version__}, metadata=metadata)


# -- running them in order ----------------------------------------------------------------

@dataclass
class StageResult:
    """Everything the stages up to :attr:`stage` made; :attr:`text` shows the last one.

    ``graph_text`` is the optimized graph's text (what an artifact keeps); ``lowered`` the
    graph after backend lowering (``graph`` itself, lowered in place: the stages never pay
    for a copy). The backend fields stay None under the reference target or after
    ``fallback`` (why native code could not be built).
    """

    stage: str
    source: str
    target: str
    graph: Graph
    graph_text: str
    lowered: Graph | None = None
    plan: FusionPlan | None = None
    module: ModuleInfo | None = None
    compiled: CompiledModule | None = None
    native: NativeBuild | None = None
    artifact: Artifact | None = None
    key: str | None = None
    fallback: str | None = None
    #: the ``lower`` stage's passes by name: runs, changes, seconds
    lower_passes: dict[str, PassStats] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The stage's output, readable: graph text after optimize/lower, the fusion
        plan's summary after fuse, the C source after emit, the module's path after build,
        the artifact's manifest after package."""
        if self.stage == "optimize":
            return self.graph_text
        if self.fallback is not None and self.stage != "package":
            return f"// no native code: {self.fallback}\n"
        if self.target == "reference" and self.stage != "package":
            return f"// target 'reference': no {self.stage} stage\n"
        if self.stage == "lower":
            return str(self.lowered)
        if self.stage == "fuse":
            assert self.plan is not None
            return _plan_text(self.plan)
        if self.stage == "emit":
            assert self.module is not None
            return "\n".join(f"// ---- translation unit {i}\n{src}" if len(
                self.module.sources) > 1 else src for i, src in enumerate(self.module.sources))
        if self.stage == "build":
            assert self.compiled is not None
            return f"{self.compiled.path}\n"
        assert self.artifact is not None
        return f"{self.artifact.directory}\n{json.dumps(self.artifact.manifest, indent=1)}\n"

    def __str__(self) -> str:
        return self.text


def _plan_text(plan: FusionPlan) -> str:
    """The plan's summary (what the artifact metadata keeps), then one line per step: its
    kind (a kernel's schedule, or the step type) and the ops it runs."""
    lines = [json.dumps(plan.summary(), sort_keys=True)]
    for i, step in enumerate(plan.steps):
        if isinstance(step, Kernel):
            kind, ops = f"{step.kind} kernel", step.ops
        else:
            kind, ops = type(step).__name__, [step.op]
            prologue = getattr(step, "prologue", None)
            if prologue is not None:  # a kernel making the GEMM's rhs block by block
                kind += " + loop prologue"
                ops = ops + prologue.ops
            epilogue = getattr(step, "epilogue", None)
            if epilogue is not None:  # a kernel run on the GEMM's row blocks
                kind += f" + {epilogue.kind} epilogue"
                ops = ops + epilogue.ops
        lines.append(f"{i:3d} {kind}: {', '.join(op.name for op in ops)}")
    return "\n".join(lines) + "\n"


def _check_stage(stop_after: str | None) -> str:
    stage = stop_after or STAGES[-1]
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stop_after!r}; stages are {', '.join(STAGES)}")
    return stage


def compile_graph(graph: Graph, *, source_text: str | None = None, stop_after: str | None = None,
                  target: str = "auto", optimize_graph: bool = True, key: str | None = None,
                  directory: str | Path | None = None, artifact_path: str | Path | None = None,
                  vector_report: bool = False, compiling: Callable[[], None] | None = None
                  ) -> StageResult:
    """Run the stages on ``graph`` (mutated: pass a clone you own) up to ``stop_after``.

    ``target`` is "auto", "native" or "reference" (resolved by :func:`resolve_target`)
    or an already-resolved cache target. ``directory`` is where ``build`` puts the
    module and ``package`` the artifact (a new temporary directory when None that is left
    for the caller to inspect); the artifact goes to ``artifact_path`` when given (it must
    not exist yet, or be empty), else to ``directory/artifact``. ``key`` is the artifact's
    cache key (computed from ``source_text`` when None).
    """
    stage = _check_stage(stop_after)
    target = resolve_target(target)
    text = source_text if source_text is not None else str(graph)
    stop = STAGES.index(stage)
    optimize(graph, enabled=optimize_graph)
    result = StageResult(stage=stage, source=text, target=target, graph=graph,
                         graph_text=str(graph))
    if stop == 0:
        return result
    if target != "reference":
        try:
            _backend(result, stop, directory, vector_report, compiling)
        except NativeUnsupported as exc:
            result.fallback = str(exc)
    if stop < STAGES.index("package"):
        return result
    if key is None:
        key = key_for(text, [(v.dtype.np_name, v.rank) for v in graph.inputs], target=target,
                      optimize=optimize_graph)
    result.key = key
    if artifact_path is not None:
        path = Path(artifact_path)
    elif directory is not None:
        path = Path(directory) / "artifact"
    else:
        path = Path(tempfile.mkdtemp(prefix="disc-artifact-"))
    result.artifact = package(path, graph, source_text=text, key=key, target=target,
                              native=result.native, fallback=result.fallback,
                              graph_text=result.graph_text)
    return result


def _backend(result: StageResult, stop: int, directory: str | Path | None, vector_report: bool,
             compiling: Callable[[], None] | None) -> None:
    """lower -> fuse -> emit -> build (as far as ``stop``), lowering ``result.graph`` in
    place (its optimized text is already kept); raises NativeUnsupported for a graph
    without a native path."""
    t0 = time.perf_counter()
    result.lowered = lower(result.graph, stats=result.lower_passes)
    if stop == STAGES.index("lower"):
        return
    result.plan = fuse(result.lowered)
    if stop == STAGES.index("fuse"):
        return
    result.module = emit(result.lowered, result.plan, caller_busy=compiling is not None)
    if stop == STAGES.index("emit"):
        return
    if stop == STAGES.index("build"):  # kept for the caller to inspect
        out = Path(directory) if directory is not None else Path(
            tempfile.mkdtemp(prefix="disc-build-"))
        result.compiled = build(result.module, out, vector_report=vector_report,
                                compiling=compiling)
        return
    with tempfile.TemporaryDirectory(prefix="disc-build-") as scratch:
        result.compiled = build(result.module, Path(scratch), vector_report=vector_report,
                                compiling=compiling)
        data = result.compiled.path.read_bytes()
    result.native = native_build(result.module, result.plan, result.compiled, data,
                                 time.perf_counter() - t0, vector_report=vector_report)


def compile_text(text: str, *, stop_after: str | None = None, target: str = "auto",
                 optimize: bool = True, directory: str | Path | None = None,
                 vector_report: bool = False) -> StageResult:
    """Parse a graph's text form and run the compile stages on it up to ``stop_after``
    (one of :data:`STAGES`; all of them when None). ``str(result)`` is that stage's
    output; the result also keeps every earlier stage's (``graph``, ``lowered``,
    ``plan``, ``module``, ``compiled``, ``artifact``)."""
    _check_stage(stop_after)
    graph = parse_graph(text)
    graph.verify()
    return compile_graph(graph, source_text=text, stop_after=stop_after, target=target,
                         optimize_graph=optimize, directory=directory,
                         vector_report=vector_report)
