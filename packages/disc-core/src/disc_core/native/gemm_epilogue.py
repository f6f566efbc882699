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

__all__ = ["epilogue_rows", "epilogue_source", "forwarding_entries", "fuse_gemm_epilogues",
           "rows_entries", "setup_epilogue"]


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
    if (k.kind not in ("loop", "row") or k.rank < 1 or k.column_epilogue
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


def rows_entries(k: Kernel, variants: list[str], decls: list[str]) -> tuple[str, list[str]]:
    """C of one entry per version of epilogue kernel ``k`` with the signature the GEMM
    helper calls (``disc_epi_fn``: tensors as an array, rows [lo, hi)), forwarding to the
    version's ``_part``; and their prototypes (for a module split into units)."""
    casts = [f"({pointee(d)} *)p[{j}]" for j, d in enumerate(decls)]
    return forwarding_entries(k, variants, "rows", "", ", ".join(casts + ["S", "lo", "hi"]))


def forwarding_entries(k: Kernel, variants: list[str], suffix: str, extra_params: str,
                       args: str) -> tuple[str, list[str]]:
    """``DISC_ENTRY void kernel<id>_<variant>_<suffix>(void *const *p, S, lo, hi
    <extra_params>)`` for each version of ``k``, each calling the version's ``_part`` with
    ``args``; and their prototypes. The GEMM helper calls kernels through these fixed
    signatures (epilogue rows, prologue blocks)."""
    src, protos = [], []
    for variant in variants:
        fn = f"kernel{k.id}_{variant}"
        sig = (f"DISC_ENTRY void {fn}_{suffix}(void *const *p, const int64_t *restrict S, "
               f"int64_t lo, int64_t hi{extra_params})")
        src.append(f"{sig} {{\n  {fn}_part({args});\n}}\n")
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
    lines = [f"  void *const epi{k.id}[] = {{{', '.join(names)}}};"]
    base = len(info.counters)
    info.counters += [f"kernel{k.id}.gemm_blocks", f"kernel{k.id}.after_gemm"]
    checks, choice = version_choice(k, syms, info, "rows")
    lines += checks
    fn = f"epi_fn{k.id}"
    lines.append(f"  const disc_epi_fn {fn} = {choice};")
    count = f"(env->counters ? env->counters + {base} : NULL)"
    return lines, (fn, f"epi{k.id}", syms.c(q), count)
