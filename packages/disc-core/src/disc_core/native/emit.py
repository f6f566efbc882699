"""C code generation for a fusion plan: kernels plus the host entry point.

Nothing in the generated code depends on a concrete size: symbolic dims are read from the
symbol array ``S`` that the host fills from the input shapes, so one module serves every
shape of the same rank. Static dims become C constants, which lets the compiler unroll and
drop remainder loops where it can.

Speculation (run-time choice of kernel version, counted per call when the caller passes a
counter array):

* every kernel runs single-threaded below ``DISC_PAR_MIN`` elements, parallel above;
* a kernel that reads a symbolic dim which may be an implicit broadcast has a contiguous
  version (taken when the dims agree) and a strided one (stride 0 where the dim is 1);
* a row or loop kernel whose innermost extent is symbolic has a version for extents that
  are a multiple of the vector width (``DISC_VEC_LANES``): its inner loops have no
  remainder iterations, which the compiler drops (the extent is written ``C & ~(W-1)``);
  on AVX-512 it also has a version for short rows that are not (below
  ``DISC_SHORT_ROW_MAX``: odd feature-map widths, short sequences), vectorized 8 wide,
  since 16-wide loops leave most of such a row to remainder code;
* a column reduction runs its column chunks in parallel, or, when there are fewer chunks
  than threads (few, long columns: a bias gradient, batch-norm statistics), splits its
  rows across the threads, each summing a partial row, added up in block order.
"""

from __future__ import annotations

from disc_runtime.abi import ABI_TYPES

from ..ir import Graph
from .ccommon import PAR_MIN, Constants, ModuleInfo, Symbols, c_source
from .fusion import FusionPlan
from .gemm_prologue import library_kernel_source
from .host_emit import emit_host
from .kernel_emit import (
    TRANSPOSE_TILE,
    KernelEmitter,
    entry_signature,
    transposed_innermost,
    vector_speculation,
)
from .library import gemm_helper, gemm_layout

__all__ = ["PAR_MIN", "PRELUDE", "SPLIT_MIN_CHARS", "TRANSPOSE_TILE", "ModuleInfo",
           "emit_module", "entry_signature", "gemm_helper", "gemm_layout",
           "transposed_innermost", "vector_speculation"]

#: what every translation unit starts with: the ABI types the runtime shares and
#: ``csrc/prelude.h`` (dim arithmetic, exp, BLAS types, profiling and vector-width macros)
PRELUDE = "#include <stdint.h>\n" + ABI_TYPES + "\n" + c_source("prelude.h")


#: what a unit that links the helpers' prebuilt objects starts with (``helper_objects``):
#: helper entry points are hidden symbols shared across the module's objects
HELPER_HEAD = "#define DISC_HELPERS_LINKED 1\n" + PRELUDE


#: kernel source (characters) per translation unit below which a module is not split: a
#: unit costs ~0.05 s of compiler start-up and prelude, the link ~0.05 s
SPLIT_MIN_CHARS = 24_000


def emit_module(graph: Graph, plan: FusionPlan, max_units: int = 1) -> ModuleInfo:
    """The C source of ``plan``: one translation unit, or up to ``max_units`` when the
    kernels are large enough to be worth compiling in parallel (``SPLIT_MIN_CHARS`` each).
    """
    syms = Symbols(graph)
    consts = Constants()
    info = ModuleInfo(sources=[], needs_blas=False)
    kernel_src: list[str] = []
    prototypes: list[str] = []
    for k in plan.kernels:
        emitter = KernelEmitter(k, syms, consts)
        kernel_src.append(emitter.emit(info))
        prototypes += emitter.prototypes
        rows_src, rows_protos = library_kernel_source(plan, k, emitter.data_args()[0], syms,
                                                      info)
        kernel_src[-1] += rows_src
        prototypes += rows_protos
    host = emit_host(graph, plan, syms, consts, info)
    linked = [gemm_helper(dt) for dt in sorted(info.gemm_dtypes, key=lambda d: d.name)]
    linked += [info.linked_helpers[name] for name in sorted(info.linked_helpers)]
    info.helper_units = [HELPER_HEAD + helper for helper in linked]
    helpers = [info.helpers[name] for name in sorted(info.helpers)]
    if linked:  # the module's unit sees their types and prototypes, the objects are linked
        helpers += ["#define DISC_HELPER_DECLARE_ONLY", *linked,
                    "#undef DISC_HELPER_DECLARE_ONLY"]
    total = sum(map(len, kernel_src))
    units = max(1, min(max_units, total // SPLIT_MIN_CHARS))
    shares = [kernel_src]
    head = HELPER_HEAD if info.helper_units else PRELUDE
    if units > 1:
        # largest kernels first, each into the lightest unit; the host's unit starts with
        # the weight of what it holds besides kernels, and declares the others' entries
        shares = [[] for _ in range(units)]
        weight = [len(host) + sum(map(len, info.helpers.values()))] + [0] * (units - 1)
        for src in sorted(kernel_src, key=len, reverse=True):
            u = weight.index(min(weight))
            shares[u].append(src)
            weight[u] += len(src)
        head = '#define DISC_ENTRY __attribute__((visibility("hidden")))\n' + head
    declared = prototypes if units > 1 else []
    info.sources = [
        "\n".join([head, consts.source(), *shares[0], *declared, *helpers, host]),
        *("\n".join([head, consts.source(), *share]) for share in shares[1:]),
    ]
    return info


