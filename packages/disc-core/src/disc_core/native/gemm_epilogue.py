"""GEMM epilogues: a row or loop kernel that consumes a GEMM's output runs inside the GEMM
step, on each block of rows right after BLAS writes it.

As two steps, the kernel after a GEMM (a linear layer's bias add and activation, a residual
add, a convolution's bias and ReLU) reads the whole output back from memory: one more pass
over the largest tensor of the layer, and one more parallel launch. Fused, the GEMM helper
(``csrc/gemm.c``) computes C in blocks of rows, one BLAS call each, and calls the kernel on
each block while it is still in cache, the blocks spread over the module's team. BLAS stays
whatever the runtime chose (MKL, oneDNN's sgemm, OpenBLAS): only its calls are blocked.

A kernel qualifies when each of its rows depends only on rows of C that one block holds:

* it is a ``loop`` or ``row`` kernel (no column sums, no tiled transpose), and reads C (or a
  zero-copy reshape of it) only in its own layout: the kernel's element order is C's;
* its iteration space splits as ``[rows of C..., columns of C...]`` (products provably
  equal, e.g. a convolution's ``[N, O, H, W]`` over C = ``[N, O, H*W]``), so a block of rows
  of C is a block of ``q`` kernel rows each, ``q`` the product of the column dims but the
  innermost;
* it depends on no other step that itself needs C (that step must run in between).

A row kernel that also sums its values over all rows (a column epilogue: a LayerNorm
backward's dgamma and dbeta) qualifies too. A loop kernel with column sums (a GELU
gradient with its bias gradient) does not: measured (GEMM [612, 256] x [256, 1024], MKL,
1 and 2 threads) it ran 3-15% slower inside the GEMM than after it, its erf/exp work
gaining nothing from C in cache while the row blocks cost BLAS extra packing of B;
LayerNorm-backward-like row kernels ran 2-3% faster. Each call of it on a block of rows ``[lo,
hi)`` sums its block into its own partial row, row ``lo`` of a buffer of ``rows x
columns`` (blocks are disjoint, so no two share one; only the blocks' rows are ever
touched), and marks that row. After the GEMM the host adds the marked rows in row order:
the result does not depend on which thread ran which block, nor on how the helper split
the rows.

The helper falls back at run time, for shapes where splitting C's rows would starve BLAS,
to the GEMM followed by the kernel over all rows (still one step, counted apart).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..dtypes import DType
from ..ir import Op, Value
from ..symbolic import Expr, product
from .ccommon import ModuleInfo, Symbols
from .cexpr import ctype
from .fusion import (
    Alias,
    FusionPlan,
    Kernel,
    LibraryCall,
    Step,
    _order_steps,
    _step_reachability,
)
from .kernel_emit import transposed_innermost, vector_speculation
from .library import gemm_layout

__all__ = ["SUMS_MAX_BYTES", "column_sums", "epilogue_rows", "epilogue_source",
           "finish_epilogue", "forwarding_entries", "fuse_gemm_epilogues", "rows_entries",
           "setup_epilogue", "sum_buffers", "sums_guard"]


def fuse_gemm_epilogues(plan: FusionPlan) -> FusionPlan:
    """``plan`` with every GEMM that has a qualifying consumer kernel running it as its
    epilogue (the kernel leaves the step list and rides on the library call)."""
    steps = list(plan.steps)
    while True:
        reach = _step_reachability(steps)
        for g, s in enumerate(steps):
            if not isinstance(s, LibraryCall) or s.epilogue is not None:
                continue
            found = _consumer(steps, g, reach)
            if found is None:
                continue
            c, group = found
            k = steps[c]
            assert isinstance(k, Kernel)
            fused = replace(s, epilogue=k,
                            epilogue_reads=[v for v in k.inputs if id(v) not in group])
            steps = _order_steps([fused if n == g else t for n, t in enumerate(steps)
                                  if n != c])
            break
        else:
            return FusionPlan(steps)


def _alias_group(steps: list[Step], v: Value) -> dict[int, Value]:
    """``v`` and every zero-copy reshape of it (transitively): one buffer."""
    group = {id(v): v}
    changed = True
    while changed:
        changed = False
        for s in steps:
            if isinstance(s, Alias) and id(s.op.operands[0]) in group:
                r = s.op.results[0]
                if id(r) not in group:
                    group[id(r)] = r
                    changed = True
    return group


def _consumer(steps: list[Step], g: int, reach: list[int]) -> tuple[int, dict[int, Value]] | None:
    """(index, C's alias group) of the first kernel that can be ``steps[g]``'s epilogue."""
    op = steps[g].op  # type: ignore[union-attr]
    if gemm_layout(op) is None or op.results[0].dtype not in (DType.F32, DType.F64):
        return None
    group = _alias_group(steps, op.results[0])
    for c, k in enumerate(steps):
        if not isinstance(k, Kernel) or c == g:
            continue
        reads = [(o, i) for (o, i) in k.reads if id(o.operands[i]) in group]
        if not reads or epilogue_rows(op, k) is None:
            continue
        if not all(_own_layout(k, o, i) for o, i in reads):
            continue
        if any(id(v) in group for o in k.ops for v in o.results):
            continue
        # no step between: the kernel may not depend on C through another step (a
        # reshape of C is C's own buffer)
        views = {q for q, t in enumerate(steps)
                 if isinstance(t, Alias) and id(t.op.results[0]) in group}
        if any(reach[c] >> q & 1 and reach[q] >> g & 1 for q in range(len(steps))
               if q not in (g, c) and q not in views):
            continue
        return c, group
    return None


def _own_layout(k: Kernel, op: Op, i: int) -> bool:
    """Does ``k`` read operand ``i`` of ``op`` at its own loop point, in its own layout?"""
    v = op.operands[i]
    return (k.reads[(op, i)] == tuple(range(k.rank)) and tuple(v.shape) == tuple(k.space)
            and (op, i) not in k.maybe_broadcast)


def epilogue_rows(op: Op, k: Kernel) -> Expr | None:
    """Kernel rows per row of the GEMM ``op``'s C when ``k`` can run on C's row blocks
    (schedule and split of its space, see the module docstring), else None."""
    if (k.kind not in ("loop", "row") or k.rank < 1
            or (k.column_epilogue and (k.rank < 2 or k.kind != "row"))
            or transposed_innermost(k) is not None):
        return None
    layout = gemm_layout(op)
    if layout is None:
        return None
    _, _, lfree, _, rfree = layout
    lhs, rhs = op.operands
    nb = len(op.attrs["lhs_batch"])
    rows = product(lhs.shape[:nb]) * product(lhs.shape[d] for d in lfree)
    cols = product(rhs.shape[d] for d in rfree)
    space = tuple(k.space)
    for j in range(len(space)):
        if product(space[:j]) == rows and product(space[j:]) == cols:
            return product(space[j:-1])
    return None


def _variants(info: ModuleInfo, k: Kernel) -> list[str]:
    return next(e["variants"] for e in info.kernels if e["id"] == k.id)


def pointee(decl: str) -> str:
    """The element type of a kernel parameter declaration (``const float *restrict a``
    -> ``const float``): what an entry casts a ``void *`` argument to."""
    return decl.rsplit("*", 1)[0].strip().replace(" restrict", "")


def column_sums(k: Kernel) -> list[tuple[int, Value]]:
    """(output index, value) of each column sum of ``k`` (its column epilogue), in the
    order its ``_part`` takes their partial rows."""
    sums = {id(op.results[0]) for op in k.column_epilogue}
    return [(j, o) for j, o in enumerate(k.outputs) if id(o) in sums]


def rows_entries(k: Kernel, variants: list[str], decls: list[str]) -> tuple[str, list[str]]:
    """C of one entry per version of epilogue kernel ``k`` with the signature the GEMM
    helper calls (``disc_epi_fn``: tensors as an array, rows [lo, hi)), forwarding to the
    version's ``_part``; and their prototypes (for a module split into units).

    With column sums, the array goes on (after the tensors) with each sum's partial-row
    buffer, a pointer to the row length and the byte per row marking the rows that start
    a block (see the module docstring)."""
    casts = [f"({pointee(d)} *)p[{j}]" for j, d in enumerate(decls)]
    sums = column_sums(k)
    if not sums:
        return forwarding_entries(k, variants, "rows", "",
                                  ", ".join(casts + ["S", "lo", "hi"]))
    n, width = len(decls), f"*(const int64_t *)p[{len(decls) + len(sums)}]"
    parts = [f"({ctype(o.dtype)} *)p[{n + i}] + lo * {width}" for i, (_, o) in enumerate(sums)]
    return forwarding_entries(
        k, variants, "rows", "", ", ".join(casts + parts + ["S", "lo", "hi"]),
        before="if (lo >= hi) return;",
        after=f"((unsigned char *)p[{n + len(sums) + 1}])[lo] = 1;")


def forwarding_entries(k: Kernel, variants: list[str], suffix: str, extra_params: str,
                       args: str, before: str = "", after: str = "") -> tuple[str, list[str]]:
    """``DISC_ENTRY void kernel<id>_<variant>_<suffix>(void *const *p, S, lo, hi
    <extra_params>)`` for each version of ``k``, each calling the version's ``_part`` with
    ``args`` (between the statements ``before`` and ``after``); and their prototypes. The
    GEMM helper calls kernels through these fixed signatures (epilogue rows, prologue
    blocks)."""
    src, protos = [], []
    pre = f"  {before}\n" if before else ""
    post = f"  {after}\n" if after else ""
    for variant in variants:
        fn = f"kernel{k.id}_{variant}"
        sig = (f"DISC_ENTRY void {fn}_{suffix}(void *const *p, const int64_t *restrict S, "
               f"int64_t lo, int64_t hi{extra_params})")
        src.append(f"{sig} {{\n{pre}  {fn}_part({args});\n{post}}}\n")
        protos.append(sig + ";")
    return "\n".join(src), protos


def epilogue_source(plan: FusionPlan, k: Kernel, decls: list[str], info: ModuleInfo
                    ) -> tuple[str, list[str]]:
    """For a kernel just emitted (``info.kernels[-1]``): its GEMM-helper entries and their
    prototypes when it is an epilogue of ``plan`` (marked so in ``info.kernels``), else
    nothing."""
    if not any(isinstance(s, LibraryCall) and s.epilogue is k for s in plan.steps):
        return "", []
    info.kernels[-1]["gemm_epilogue"] = True
    return rows_entries(k, info.kernels[-1]["variants"], decls)


def version_choice(k: Kernel, syms: Symbols, info: ModuleInfo, suffix: str
                   ) -> tuple[list[str], str]:
    """Host C choosing the version of fused kernel ``k`` for this call (as ``host_emit``
    launches kernels: implicit broadcasts checked, vector-multiple and short rows), and the
    expression naming that version's entry ``kernel<id>_<version>_<suffix>``."""
    lines: list[str] = []
    fast = "1"
    if k.speculative:
        conds = []
        for (op, i), maybe in k.maybe_broadcast.items():
            v = op.operands[i]
            for j, d in maybe.items():
                a, b = syms.c(v.shape[j]), syms.c(k.space[d])
                conds.append(f"{a} == {b}")
                lines.append(f"  if ({a} != 1 && {a} != {b}) DISC_FAIL(\"{op.name}: operand "
                             f"dim {j} is %lld, expected 1 or %lld\", (long long){a}, "
                             f"(long long){b});")
        fast = " && ".join(conds)
    choice = f"kernel{k.id}_fast_{suffix}"
    if vector_speculation(k):
        inner = syms.c(k.space[-1])
        choice = (f"(({inner}) % DISC_VEC_LANES == 0 ? kernel{k.id}_fast_vec_{suffix} : "
                  f"({inner}) < DISC_SHORT_ROW_MAX ? kernel{k.id}_fast_short_{suffix} : "
                  f"kernel{k.id}_fast_{suffix})")
    if "strided" in _variants(info, k):
        choice = f"(({fast}) ? {choice} : kernel{k.id}_strided_{suffix})"
    return lines, choice


def setup_epilogue(step: LibraryCall, ptr: Callable[[Value], str], syms: Symbols,
                   info: ModuleInfo) -> tuple[list[str], tuple[str, str, str, str]]:
    """Host C before the GEMM call of ``step``: the checks and version choice of its
    epilogue kernel, its tensor array; and the epilogue arguments of
    :func:`library.emit_gemm`."""
    k = step.epilogue
    assert k is not None
    q = epilogue_rows(step.op, k)
    assert q is not None
    names = [f"(void *){ptr(v)}" for v in k.inputs] + [f"(void *){ptr(o)}" for o in k.outputs]
    lines: list[str] = []
    sums = column_sums(k)
    if sums:  # partial rows (buffers declared NULL at the top of disc_run: see sum_buffers;
        # epiR / epiC declared by sums_guard)
        for i, (_, o) in enumerate(sums):
            t = ctype(o.dtype)
            lines.append(f"  epip{k.id}_{i} = ({t} *)disc_alloc((size_t)(epiR{k.id} * epiC{k.id} "
                         f"> 0 ? epiR{k.id} * epiC{k.id} : 1) * sizeof({t}));")
            lines.append(f"  if (!epip{k.id}_{i}) DISC_FAIL(\"out of memory for the partial "
                         f"column sums of kernel{k.id}\");")
            names.append(f"(void *)epip{k.id}_{i}")
        lines.append(f"  epif{k.id} = (unsigned char *)calloc((size_t)(epiR{k.id} > 0 ? "
                     f"epiR{k.id} : 1), 1);")
        lines.append(f"  if (!epif{k.id}) DISC_FAIL(\"out of memory for the partial column "
                     f"sums of kernel{k.id}\");")
        names += [f"(void *)&epiC{k.id}", f"(void *)epif{k.id}"]
    lines.append(f"  void *const epi{k.id}[] = {{{', '.join(names)}}};")
    base = len(info.counters)
    info.counters += [f"kernel{k.id}.gemm_blocks", f"kernel{k.id}.after_gemm"]
    checks, choice = version_choice(k, syms, info, "rows")
    lines += checks
    fn = f"epi_fn{k.id}"
    lines.append(f"  const disc_epi_fn {fn} = {choice};")
    count = f"(env->counters ? env->counters + {base} : NULL)"
    return lines, (fn, f"epi{k.id}", syms.c(q), count)


#: Largest partial-row buffer (rows x columns of the epilogue, bytes) a GEMM epilogue
#: with column sums allocates; only the rows starting a block are touched, but a larger
#: allocation may fail where memory is not overcommitted. Above it the GEMM runs alone
#: and the kernel after it, as a step of its own (``sums_guard``).
SUMS_MAX_BYTES = 64 << 20


def sums_guard(step: LibraryCall, syms: Symbols) -> tuple[list[str], str] | None:
    """For a GEMM whose epilogue has column sums: the declarations of its row and column
    counts (``epiR<id>``, ``epiC<id>``) and the C condition under which it runs fused
    (partial rows within ``SUMS_MAX_BYTES``); None for any other GEMM."""
    k = step.epilogue
    if k is None or not column_sums(k):
        return None
    rows, cols = syms.c(product(k.space[:-1])), syms.c(k.space[-1])
    size = max(o.dtype.itemsize for _, o in column_sums(k))
    decls = [f"  const int64_t epiR{k.id} = {rows}, epiC{k.id} = {cols};"]
    return decls, f"(double)epiR{k.id} * (double)epiC{k.id} * {size} <= {SUMS_MAX_BYTES}.0"


def sum_buffers(plan: FusionPlan) -> tuple[list[str], list[str]]:
    """Declarations (NULL) of the partial-row buffers of every GEMM epilogue with column
    sums in ``plan``, for the top of ``disc_run``, and the statements freeing them (at
    its end and on failure)."""
    decls, frees = [], []
    for s in plan.steps:
        k = s.epilogue if isinstance(s, LibraryCall) else None
        if k is None or not column_sums(k):
            continue
        for i, (_, o) in enumerate(column_sums(k)):
            decls.append(f"  {ctype(o.dtype)} *epip{k.id}_{i} = NULL;")
            frees.append(f"  free(epip{k.id}_{i});")
        decls.append(f"  unsigned char *epif{k.id} = NULL;")
        frees.append(f"  free(epif{k.id});")
    return decls, frees


def finish_epilogue(step: LibraryCall, ptr: Callable[[Value], str]) -> list[str]:
    """Host C after the GEMM call of ``step``: its epilogue's column sums, the marked
    partial rows added in row order (nothing without column sums)."""
    k = step.epilogue
    assert k is not None
    lines: list[str] = []
    for i, (_, o) in enumerate(column_sums(k)):
        t = ctype(o.dtype)
        lines += [
            f"  {{ {t} *restrict o = ({t} *){ptr(o)};",
            f"    const {t} *restrict part = epip{k.id}_{i};",
            f"    for (int64_t c = 0; c < epiC{k.id}; ++c) o[c] = 0;",
            f"    for (int64_t r = 0; r < epiR{k.id}; ++r) {{",
            f"      if (!epif{k.id}[r]) continue;",
            "      #pragma omp simd",
            f"      for (int64_t c = 0; c < epiC{k.id}; ++c) o[c] += part[r * epiC{k.id} + c];",
            "    }",
            f"    free(epip{k.id}_{i}); epip{k.id}_{i} = NULL; }}"]
    if lines:
        lines.append(f"  free(epif{k.id}); epif{k.id} = NULL;")
    return lines
