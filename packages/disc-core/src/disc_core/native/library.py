"""C code of the steps that are not fused kernels, chosen by the op's declared role
(``OpDef.fusion``): GEMM library calls (``Fusion.LIBRARY``, through the helper in
``csrc/gemm.c``), scatters (``Fusion.SCATTER``) and scans (``Fusion.SCAN``)."""

from __future__ import annotations

from collections.abc import Callable

from ..dtypes import DType
from ..ir import Op, Value
from ..opdef import OpDef
from ..symbolic import product
from .ccommon import PAR_MIN, Symbols, c_source, combine, identity, scalar_constant, strides
from .cexpr import ctype
from .fusion import NativeUnsupported, scatter_fill
from .gemm_operands import batch_shared_source

Ptr = Callable[[Value], str]


def is_gemm(op: Op) -> bool:
    """A library-call op that brings no C of its own (``OpDef.library_call``) is a GEMM:
    only those take GEMM layouts, prologues and epilogues (fused attention does not)."""
    return op.opdef.library_call.__func__ is OpDef.library_call.__func__


def gemm_layout(op: Op) -> tuple[int, int, list[int], list[int], list[int]] | None:
    """(transA, transB, lhs free, lhs contract, rhs free) when BLAS takes the operands as
    they are, else None (lower.canonicalize_dots inserts transposes first; None too for
    an op that is not a GEMM)."""
    if not is_gemm(op):
        return None
    lhs, rhs = op.operands
    a = op.attrs
    nb = len(a["lhs_batch"])
    if tuple(a["lhs_batch"]) != tuple(range(nb)) or tuple(a["rhs_batch"]) != tuple(range(nb)):
        return None
    lc, rc = list(a["lhs_contract"]), list(a["rhs_contract"])
    if lc != sorted(lc) or rc != sorted(rc):
        return None
    lfree = [d for d in range(nb, lhs.rank) if d not in lc]
    rfree = [d for d in range(nb, rhs.rank) if d not in rc]

    def block(dims: list[int], first: int) -> bool:
        return dims == list(range(first, first + len(dims)))

    # lhs: [batch, free, contract] (no transpose) or [batch, contract, free] (transposed)
    if block(lfree, nb) and block(lc, nb + len(lfree)):
        ta = 111
    elif block(lc, nb) and block(lfree, nb + len(lc)):
        ta = 112
    else:
        return None
    if block(rc, nb) and block(rfree, nb + len(rc)):
        tb = 111
    elif block(rfree, nb) and block(rc, nb + len(rfree)):
        tb = 112
    else:
        return None
    return ta, tb, lfree, lc, rfree


def packable_weight(op: Op, inputs: dict[int, int]) -> int | None:
    """The module input ``op`` (a GEMM) reads as its rhs laid out [N, K] (a weight as
    torch's Linear keeps it), when it is f32 and every batch shares it (or there is no
    batch): the helper may keep that input packed between calls (``csrc/gemm.c``, Packed
    weights) when the caller stamps it. ``inputs`` maps id() of the module's inputs to
    their positions."""
    lhs, rhs = op.operands
    layout = gemm_layout(op)
    # a [K, N] weight (transformers' Conv1D) is left to plain sgemm: packed, the GEMMs of
    # 16-100 rows measured 0.83-1.10x (K 256, N 1024) and GPT-2's serving 0.87-0.98x
    if layout is None or lhs.dtype is not DType.F32 or layout[1] != 112:
        return None
    src = batch_shared_source(op, 1)
    if src is None and op.attrs["lhs_batch"]:
        return None  # a weight per batch (a bmm): nothing to reuse
    return inputs.get(id(src if src is not None else rhs))


def emit_gemm(op: Op, ptr: Ptr, syms: Symbols,
              epilogue: tuple[str, str, str, str] | None = None,
              prologue: tuple[str, str, str, int] | None = None,
              pack: tuple[int, int] | None = None) -> list[str]:
    """One call of the module's GEMM helper (:func:`gemm_helper`) for ``op``; with
    ``epilogue`` = C expressions (function, its tensor array, kernel rows per row of C,
    counters or NULL) the helper runs that fused kernel on each block of rows it computes
    (``gemm_epilogue``); with ``prologue`` = (function, its input array, kernel rows per
    operand row, operand: 0 lhs, 1 rhs) that operand is made block by block by that kernel
    (``gemm_prologue``); with ``pack`` = (slot, module input) the rhs, that input, may be
    kept packed in ``disc_pack_slots[slot]`` (:func:`packable_weight`)."""
    lhs, rhs = op.operands
    dt = lhs.dtype
    if dt not in (DType.F32, DType.F64):
        raise NativeUnsupported(f"dot_general on {dt.short} (BLAS covers f32 and f64)")
    layout = gemm_layout(op)
    if layout is None:
        raise NativeUnsupported("dot_general layout needs transposes (canonicalize_dots)")
    ta, tb, lfree, lc, rfree = layout
    nb = len(op.attrs["lhs_batch"])
    M = syms.c(product(lhs.shape[d] for d in lfree))
    N = syms.c(product(rhs.shape[d] for d in rfree))
    K = syms.c(product(lhs.shape[d] for d in lc))
    B = syms.c(product(lhs.shape[:nb]))
    t = ctype(dt)
    # an operand shared by every batch (a broadcast along the batch dims): its source,
    # read with batch stride 0
    src = [batch_shared_source(op, i) for i in range(2)]
    made = prologue[3] if prologue is not None else None
    a_ptr = "NULL" if made == 0 else ptr(src[0] if src[0] is not None else lhs)
    b_ptr = "NULL" if made == 1 else ptr(src[1] if src[1] is not None else rhs)
    shared = f"{int(src[0] is not None)}, {int(src[1] is not None)}"
    epi = "NULL, NULL, S, 0, NULL"  # S: the symbols, which a prologue reads too
    if epilogue is not None:
        fn, args, q, count = epilogue
        epi = f"{fn}, {args}, S, {q}, {count}"
    pro = "NULL, NULL, 0, 0"
    if prologue is not None:  # the helper's last argument: 1 when it makes the lhs
        fn, args, q, _ = prologue
        pro = f"{fn}, {args}, {q}, {int(made == 0)}"
    packed = "NULL, 0"
    if pack is not None and made != 1:
        slot, index = pack
        packed = f"&disc_pack_slots[{slot}], env->in_stamps ? env->in_stamps[{index}] : 0"
    return [
        f"  {{ const int rc = disc_gemm_{t}(env, {int(ta == 112)}, {int(tb == 112)}, {M}, {N}, "
        f"{K}, {B}, {shared}, (const {t} *){a_ptr}, (const {t} *){b_ptr}, "
        f"({t} *){ptr(op.results[0])}, {epi}, {pro}, {packed});",
        f"    if (rc == 1) DISC_FAIL(\"no BLAS {'sgemm' if dt is DType.F32 else 'dgemm'} was "
        "provided to this module\");",
        "    if (rc) DISC_FAIL(\"out of memory for a GEMM's partial sums\"); }",
    ]



def gemm_helper(dt: DType) -> str:
    """The C function every GEMM of ``dt`` in a module calls (``disc_gemm_<ctype>``):
    ``csrc/gemm.c`` instantiated for ``dt`` (see the file for what it does and why it is
    one function per module)."""
    t = ctype(dt)
    f32 = dt is DType.F32
    params = {"DISC_GEMM_NAME": f"disc_gemm_{t}", "DISC_GEMM_T": t,
              "DISC_GEMM_BLAS": "sgemm" if f32 else "dgemm",
              "DISC_GEMM_BLAS_FN": "disc_sgemm_fn" if f32 else "disc_dgemm_fn",
              "DISC_GEMM_ROWMAJOR": "1" if f32 else "0",
              "DISC_GEMM_PACKED": "1" if f32 else "0"}
    return ("".join(f"#define {k} {v}\n" for k, v in params.items()) + c_source("gemm.c")
            + "".join(f"#undef {k}\n" for k in params))


def emit_scatter(op: Op, ptr: Ptr, syms: Symbols) -> list[str]:
    """result = operand, then every update added at its (clamped) target.

    An operand that broadcasts a scalar (the zeros a gradient scatters into) is never
    materialized: the result is filled with the scalar (:func:`scatter_fill`).

    The copy of operand into result splits across the module's OpenMP team. Updates whose
    outermost dim also indexes the result's outermost dim (any scatter axis but 0, e.g. max
    pooling's backward, one row per channel) write disjoint rows, so their rows split
    across the team too; an axis-0 scatter (an embedding gradient: any row may be hit by
    several updates) adds serially. Nested loops keep index arithmetic free of divisions.
    """
    x, idx, upd = op.operands
    res = op.results[0]
    t, it = ctype(res.dtype), ctype(idx.dtype)
    fill = scatter_fill(op)
    ushape = upd.shape
    dims = op.opdef.scatter_dims(op)
    if dims is None:
        raise NativeUnsupported(f"{op.name} declares no scatter dims")
    axis, i_follow, x_follow = dims
    idims = [f"u{d}" for d in i_follow]
    xdims = [f"u{d}" if d is not None else "tgt" for d in x_follow]
    ioff = " + ".join(f"{d}*{syms.c(s)}" for d, s in zip(idims, strides(idx.shape))) or "0"
    xoff = " + ".join(f"{d}*{syms.c(s)}" for d, s in zip(xdims, strides(x.shape))) or "0"
    uoff = " + ".join(f"u{d}*{syms.c(s)}" for d, s in enumerate(strides(ushape))) or "0"
    rows_apart = bool(ushape) and xdims[0] == "u0"
    split = ["        const int64_t T = omp_get_num_threads(), tid = omp_get_thread_num();",
             "        const int64_t lo = xn * tid / T, hi = xn * (tid + 1) / T;"]
    if fill is None:  # result = operand, copied
        source = f"const {t} *X = (const {t} *){ptr(x)}; "
        start = ["      if ((void *)Y != (void *)X) {", *split,
                 f"        if (hi > lo) memcpy(Y + lo, X + lo, (size_t)(hi - lo) * sizeof({t}));",
                 "      }"]
    else:  # result = the scalar the operand broadcasts
        source = ""
        start = ["      {", *split,
                 f"        for (int64_t e = lo; e < hi; ++e) Y[e] = {scalar_constant(fill)};",
                 "      }"]
    lines = ["  {",
             f"    {source}const {it} *I = (const {it} *){ptr(idx)};",
             f"    const {t} *U = (const {t} *){ptr(upd)}; {t} *Y = ({t} *){ptr(res)};",
             f"    const int64_t xn = {syms.c(product(x.shape))}, "
             f"un = {syms.c(product(ushape))};",
             f"    #pragma omp parallel if (xn + un >= {PAR_MIN})",
             "    {", *start,
             "      #pragma omp barrier"]
    # one thread per block of rows, or a single thread for every update
    lines += (["      #pragma omp for schedule(static)"] if rows_apart else
              ["      #pragma omp single", "      {"])
    for d, e in enumerate(ushape):
        lines.append(f"      for (int64_t u{d} = 0; u{d} < {syms.c(e)}; ++u{d})")
    lines += ["      {",
              f"        const int64_t tgt = disc_clampi((int64_t)I[{ioff}], "
              f"{syms.c(x.shape[axis] - 1)});",
              f"        Y[{xoff}] += U[{uoff}];",
              "      }"]
    lines += [] if rows_apart else ["      }"]
    return lines + ["    }", "  }"]


def emit_scan(op: Op, ptr: Ptr, syms: Symbols) -> list[str]:
    """cumulative over [outer, axis, inner]: one task per outer index and 256-wide chunk of
    the inner dims (vectorizable across the chunk), each walking the axis with its
    accumulators in the reference's precision (f32 sums and products in double)."""
    x, res = op.operands[0], op.results[0]
    spec = op.opdef.scan_spec(op)
    if spec is None:
        raise NativeUnsupported(f"{op.name} declares no scan")
    kind, axis = spec.kind, spec.axis
    t = ctype(res.dtype)
    acc = "double" if res.dtype is DType.F32 and kind in ("sum", "prod") else t
    outer, inner = product(x.shape[:axis]), product(x.shape[axis + 1:])
    work = product(x.shape)
    return [
        "  {",
        f"    const {t} *X = (const {t} *){ptr(x)}; {t} *Y = ({t} *){ptr(res)};",
        f"    const int64_t OUT = {syms.c(outer)}, A = {syms.c(x.shape[axis])}, "
        f"IN = {syms.c(inner)};",
        "    const int64_t CH = (IN + 255) / 256;",
        f"    #pragma omp parallel for schedule(static) if (({syms.c(work)}) >= {PAR_MIN})",
        "    for (int64_t task = 0; task < OUT * CH; ++task) {",
        "      const int64_t o = task / CH, c0 = (task % CH) * 256;",
        "      const int64_t c1 = c0 + 256 < IN ? c0 + 256 : IN;",
        f"      {acc} accs[256];",
        f"      for (int64_t c = c0; c < c1; ++c) accs[c - c0] = {identity(kind, res.dtype)};",
        "      for (int64_t a = 0; a < A; ++a) {",
        "        const int64_t base = (o * A + a) * IN;",
        "        #pragma omp simd",
        "        for (int64_t c = c0; c < c1; ++c) {",
        f"          {combine(kind, res.dtype, 'accs[c - c0]', 'X[base + c]')}",
        f"          Y[base + c] = ({t})accs[c - c0];",
        "        }",
        "      }",
        "    }",
        "  }",
    ]
