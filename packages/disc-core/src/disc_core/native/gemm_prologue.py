"""GEMM prologues: the loop kernel that makes a GEMM's operand (a convolution's patch
matrix, im2col: the rhs of an NCHW convolution's per-image GEMM, the lhs of an NHWC one's)
runs inside the GEMM step, one block of operand rows at a time into a per-thread buffer
that BLAS reads at once; the operand is never written whole.

A convolution lowered to im2col writes its patch matrix (taps times the input: 9x for a
3x3 kernel) to memory and the GEMM reads it back: for a [4, 32, 128, 128] input, 75 MB
each way, as much time as the GEMM's arithmetic. Fused, the GEMM helper (``csrc/gemm.c``)
takes a block of columns of C, has the kernel write that block's rhs rows (``K`` values
each) into a buffer of about L2 size, multiplies, and runs the epilogue (bias, ReLU: see
``gemm_epilogue``) on the block; blocks of all images are spread over the team.

A kernel qualifies when it is a ``loop`` kernel that gathers (an op reading at data-given
positions: the taps of im2col, which make the operand several times larger than what it
reads) whose one output is the GEMM's rhs or lhs
(or a reshape of it), read by nothing else and not returned, written in the kernel's own
layout (row r at ``r * C``), and the operand is laid out ``[batch, rows, K]`` (the rhs's
rows are C's columns: BLAS reads it transposed; the lhs's are C's rows: C is then made in
row blocks, as with an epilogue) with the kernel's space splitting as
``[batch and rows..., K...]``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..dtypes import DType
from ..ir import Graph, Op, Value
from ..symbolic import Expr, product
from .ccommon import ModuleInfo, Symbols
from .fusion import Alias, FusionPlan, Kernel, LibraryCall, Step, _order_steps, step_values
from .gemm_epilogue import (
    _alias_group,
    epilogue_source,
    forwarding_entries,
    pointee,
    version_choice,
)
from .gemm_operands import batch_shared_source
from .kernel_emit import transposed_innermost
from .library import gemm_layout

__all__ = ["fuse_gemm_prologues", "into_entries", "library_kernel_source", "prologue_rows",
           "setup_prologue"]


def fuse_gemm_prologues(plan: FusionPlan, graph: Graph) -> FusionPlan:
    """``plan`` with every GEMM whose rhs a qualifying kernel makes running that kernel
    as its prologue (the kernel and the reshapes of its output leave the step list)."""
    steps = list(plan.steps)
    returned = {id(v) for v in graph.outputs}
    while True:
        for g, s in enumerate(steps):
            if not isinstance(s, LibraryCall) or s.prologue is not None:
                continue
            found = None
            for side in (1, 0):
                found = _producer(steps, g, returned, side)
                if found is not None:
                    break
            if found is None:
                continue
            p, group = found
            k = steps[p]
            assert isinstance(k, Kernel)
            drop = {p} | {n for n, t in enumerate(steps)
                          if isinstance(t, Alias) and id(t.op.results[0]) in group}
            fused = replace(s, prologue=k, prologue_operand=side)
            steps = _order_steps([fused if n == g else t
                                  for n, t in enumerate(steps) if n not in drop])
            break
        else:
            return FusionPlan(steps)


def _producer(steps: list[Step], g: int, returned: set[int], side: int
              ) -> tuple[int, dict[int, Value]] | None:
    """(index, the operand buffer's alias group) of the kernel that can be ``steps[g]``'s
    prologue for operand ``side`` (1: rhs laid out [batch, columns, K]; 0: lhs laid out
    [batch, rows, K]), or None."""
    op = steps[g].op  # type: ignore[union-attr]
    if op.results[0].dtype not in (DType.F32, DType.F64):
        return None
    layout = gemm_layout(op)
    if layout is None or layout[side] != (112 if side else 111):
        return None
    if batch_shared_source(op, side) is not None:
        return None
    written = {id(r): n for n, t in enumerate(steps) for r in step_values(t)[1]}
    v = op.operands[side]
    while True:  # back through the zero-copy reshapes to the buffer's writer
        n = written.get(id(v))
        if n is None:
            return None
        t = steps[n]
        if not isinstance(t, Alias):
            break
        v = t.op.operands[0]
    if not (isinstance(t, Kernel) and t.kind == "loop" and len(t.outputs) == 1
            and t.outputs[0] is v and not t.column_epilogue and t.split_concat is None
            and transposed_innermost(t) is None and t.rank >= 1):
        return None
    if t.maps.get(v) != tuple(range(t.rank)) or tuple(v.shape) != tuple(t.space):
        return None
    if not any(o.opdef.indirect for o in t.ops):
        # only a gather (reads at data-given positions: im2col's taps) makes an operand
        # several times larger than what it reads, so that making it per block wins; an
        # elementwise producer is left to run as a kernel (or the previous GEMM's
        # epilogue), where its blocks need not follow this GEMM's
        return None
    if prologue_rows(op, t, side) is None:
        return None
    group = _alias_group(steps, v)
    if any(x in returned for x in group):
        return None
    for m, u in enumerate(steps):  # nothing but this GEMM reads the buffer
        if m == g or (isinstance(u, Alias) and id(u.op.results[0]) in group):
            continue
        if any(id(x) in group for x in step_values(u)[0]):
            return None
    return n, group


def prologue_rows(op: Op, k: Kernel, side: int = 1) -> Expr | None:
    """Kernel rows per row of operand ``side`` of GEMM ``op`` (rows: C's columns for the
    rhs, C's rows for the lhs; each K long) when ``k``'s space splits as
    ``[batch and those rows..., K...]``, else None."""
    layout = gemm_layout(op)
    if layout is None:
        return None
    free = layout[4] if side else layout[2]
    v = op.operands[side]
    nb = len(op.attrs["rhs_batch"])
    rows = product(v.shape[:nb]) * product(v.shape[d] for d in free)
    depth = product(v.shape[d] for d in op.attrs["rhs_contract" if side else "lhs_contract"])
    space = tuple(k.space)
    for j in range(len(space)):
        if product(space[:j]) == rows and product(space[j:]) == depth:
            return product(space[j:-1])
    return None


def into_entries(k: Kernel, variants: list[str], decls: list[str], syms: Symbols
                 ) -> tuple[str, list[str]]:
    """C of one entry per version of prologue kernel ``k`` with the signature the GEMM
    helper calls (``disc_pro_fn``: inputs as an array, rows [lo, hi), and the buffer that
    receives them), forwarding to the version's ``_part`` with its output pointer moved so
    that row ``lo`` lands at the buffer's start; and their prototypes."""
    casts = [f"({pointee(d)} *)p[{j}]" for j, d in enumerate(decls[:-1])]
    out_ty = pointee(decls[-1])
    cols = syms.c(k.space[-1])
    args = ", ".join(casts + [f"({out_ty} *)dst - lo * ({cols})", "S", "lo", "hi"])
    return forwarding_entries(k, variants, "into", ", void *dst", args)


def setup_prologue(step: LibraryCall, ptr: Callable[[Value], str], syms: Symbols,
                   info: ModuleInfo) -> tuple[list[str], tuple[str, str, str, int]]:
    """Host C before the GEMM call of ``step``: its prologue kernel's version choice and
    input array; and the prologue arguments of :func:`library.emit_gemm`."""
    k = step.prologue
    assert k is not None
    q = prologue_rows(step.op, k, step.prologue_operand)
    assert q is not None
    names = [f"(void *){ptr(v)}" for v in k.inputs] or ["NULL"]
    lines = [f"  void *const pro{k.id}[] = {{{', '.join(names)}}};"]
    checks, choice = version_choice(k, syms, info, "into")
    lines += checks
    fn = f"pro_fn{k.id}"
    lines.append(f"  const disc_pro_fn {fn} = {choice};")
    return lines, (fn, f"pro{k.id}", syms.c(q), step.prologue_operand)


def library_kernel_source(plan: FusionPlan, k: Kernel, decls: list[str], syms: Symbols,
                          info: ModuleInfo) -> tuple[str, list[str]]:
    """For a kernel just emitted (``info.kernels[-1]``): the entries the GEMM helper calls
    and their prototypes when it is a GEMM's prologue or epilogue in ``plan`` (marked so in
    ``info.kernels``), else nothing."""
    if any(isinstance(s, LibraryCall) and s.prologue is k for s in plan.steps):
        info.kernels[-1]["gemm_prologue"] = True
        return into_entries(k, info.kernels[-1]["variants"], decls, syms)
    return epilogue_source(plan, k, decls, info)
