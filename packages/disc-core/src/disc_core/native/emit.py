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

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from disc_runtime.native import ABI_TYPES, ABI_VERSION

from ..dtypes import DType
from ..ir import Graph, Op, Value
from ..symbolic import Expr, product, smax
from .cexpr import ctype, dim_c, literal
from .fusion import (
    DATA,
    INDIRECT,
    REDUCTIONS,
    SHAPE_ONLY,
    Aff,
    Alias,
    FusionPlan,
    Kernel,
    LibraryCall,
    NativeUnsupported,
    Quot,
    ScanCall,
    ScatterCall,
    kdim,
    scatter_fill,
    step_values,
)

PAR_MIN = 1 << 15

PRELUDE = "#include <stdint.h>\n" + ABI_TYPES + r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <math.h>
#include <omp.h>
#include <time.h>

/* Symbolic dim arithmetic. A zero divisor gives 0 instead of trapping (SIGFPE would kill
   the caller's process): such a dim is only legal in an empty tensor, which disc_run checks
   for every shape before any work (symbolic.evaluate_shape is the same rule in Python). */
static inline int64_t disc_floordiv(int64_t a, int64_t b) {
  if (b == 0) return 0;
  int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t disc_ceildiv(int64_t a, int64_t b) { return -disc_floordiv(-a, b); }
static inline int64_t disc_mod(int64_t a, int64_t b) { return a - b * disc_floordiv(a, b); }
static inline int64_t disc_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t disc_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t disc_clampi(int64_t i, int64_t top) { return i < 0 ? 0 : i > top ? top : i; }

/* exp for float that vectorizes without special-case fallbacks (libmvec takes a slow path
   for lanes that underflow, as masked attention scores do): Cody-Waite range reduction,
   the Cephes polynomial (<= 1.01 ulp, checked against double exp on a 1-in-97 sweep of
   every float), 2^k applied in two steps so results may be subnormal; NaN, overflow and
   underflow handled by selects. */
static inline float disc_pow2i(int32_t k) {
  union { int32_t i; float f; } u; u.i = (k + 127) << 23; return u.f; }
static inline float disc_expf(float x) {
  /* lanes whose result is 0 compute exp(0) instead, so no subnormal arithmetic (a
     microcode assist per vector on x86) happens unless a result really is subnormal */
  const int zero = x < -103.972084045410156f;
  const float xs = zero ? 0.0f : x;
  const float xc = xs < 89.0f ? xs : 89.0f;
  const float k = rintf(xc * 1.44269504088896341f);
  float r = fmaf(k, -0.693359375f, xc);
  r = fmaf(k, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fmaf(p, r, 1.3981999507e-3f);
  p = fmaf(p, r, 8.3334519073e-3f);
  p = fmaf(p, r, 4.1665795894e-2f);
  p = fmaf(p, r, 1.6666665459e-1f);
  p = fmaf(p, r, 5.0000001201e-1f);
  p = fmaf(p, r * r, r) + 1.0f;
  const int32_t ki = (int32_t)k, k1 = ki >> 1, k2 = ki - k1;
  float res = p * disc_pow2i(k1) * disc_pow2i(k2);
  res = x > 88.72283935546875f ? INFINITY : res;
  res = zero ? 0.0f : res;
  return x != x ? x : res;
}

/* ILP64 Fortran-interface GEMM (disc_env.sgemm / dgemm): every argument by pointer,
   column-major; the two trailing lengths are the hidden Fortran string lengths of the
   transpose flags (C implementations ignore them). */
typedef void (*disc_sgemm_fn)(const char *, const char *, const int64_t *, const int64_t *,
                              const int64_t *, const float *, const float *, const int64_t *,
                              const float *, const int64_t *, const float *, float *,
                              const int64_t *, size_t, size_t);
typedef void (*disc_dgemm_fn)(const char *, const char *, const int64_t *, const int64_t *,
                              const int64_t *, const double *, const double *,
                              const int64_t *, const double *, const int64_t *,
                              const double *, double *, const int64_t *, size_t, size_t);
/* row-major f32 GEMM with oneDNN's dnnl_sgemm signature (disc_env.sgemm_rowmajor) */
typedef int (*disc_sgemm_rowmajor_fn)(char, char, int64_t, int64_t, int64_t, float,
                                      const float *, int64_t, const float *, int64_t, float,
                                      float *, int64_t);

#ifdef DISC_LIBMVEC
/* glibc's vector math library: lets loops calling these vectorize (declared simd only
   under -ffast-math by math.h, which DISC does not use: NaN and infinity semantics stay). */
#define DISC_SIMD __attribute__((simd("notinbranch")))
DISC_SIMD float expf(float); DISC_SIMD float expm1f(float); DISC_SIMD float logf(float);
DISC_SIMD float log1pf(float); DISC_SIMD float erff(float); DISC_SIMD float tanhf(float);
DISC_SIMD float sinf(float); DISC_SIMD float cosf(float); DISC_SIMD float tanf(float);
DISC_SIMD float powf(float, float); DISC_SIMD float atan2f(float, float);
DISC_SIMD double exp(double); DISC_SIMD double expm1(double); DISC_SIMD double log(double);
DISC_SIMD double log1p(double); DISC_SIMD double erf(double); DISC_SIMD double tanh(double);
DISC_SIMD double sin(double); DISC_SIMD double cos(double); DISC_SIMD double tan(double);
DISC_SIMD double pow(double, double); DISC_SIMD double atan2(double, double);
#endif

/* the per-step profile (disc_env.profile, NULL unless profiling): slot 0 counts calls,
   slot 1 is host time (checks, allocation, copies), slot 2 + i the wall time of step i, in
   nanoseconds. Atomic adds: calls may run concurrently on one env's buffer. */
static inline int64_t disc_now_ns(void) {
  struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec; }
#define DISC_PROFILE(slot) do { if (prof) { const int64_t now_ = disc_now_ns(); \
  __atomic_fetch_add(&env->profile[slot], now_ - prof_t, __ATOMIC_RELAXED); prof_t = now_; } \
  } while (0)
#define DISC_FAIL(...) do { snprintf(err, (size_t)errlen, __VA_ARGS__); goto fail; } while (0)
/* below this many multiply-adds a GEMM runs on one thread (thread start-up would dominate) */
#define DISC_GEMM_PARALLEL_MIN 262144.0
/* a GEMM splits its K across the team when K is this many times C's longer side */
#define DISC_GEMM_SPLIT_K_RATIO 8
#define DISC_BLOCKS_PER_THREAD 4
/* lanes of a 4-byte element in the widest vectors the target has: kernels have a version
   for innermost extents that are a multiple of it (no remainder loop) */
#if defined(__AVX512F__)
#define DISC_VEC_LANES 16
/* short rows that are not a multiple of 16 (7x7 to 31x31 feature maps, odd sequence
   lengths below 32) run a version vectorized 8 wide: 16-wide loops leave up to 15 of
   their few elements to remainder code, about 2x slower per element there */
#define DISC_SHORT_ROWS __attribute__((target("prefer-vector-width=256")))
#define DISC_SHORT_ROW_MAX 32
#elif defined(__AVX__)
#define DISC_VEC_LANES 8
#else
#define DISC_VEC_LANES 4
#endif
#ifndef DISC_SHORT_ROWS
#define DISC_SHORT_ROWS
#define DISC_SHORT_ROW_MAX 0
#endif
/* kernel entries the host calls: file-local in a one-file module, hidden across the
   files of a module split for parallel compilation */
#ifndef DISC_ENTRY
#define DISC_ENTRY static
#endif
/* column-epilogue partial sums up to this size live on the calling thread's stack */
#define DISC_STACK_PARTIALS 262144
"""


@dataclass
class ModuleInfo:
    """What the runtime and tests need to know about a generated module."""

    #: C translation units; the first holds the host entry point. More than one when the
    #: module is split so that the C compiler can build its parts in parallel.
    sources: list[str]
    needs_blas: bool
    counters: list[str] = field(default_factory=list)  # name of each counter slot
    #: what each step slot of ``disc_env.profile`` times (slot 2 + i): name, kind, ops and
    #: the iteration space or GEMM shape (see :func:`_profile_entry`)
    profile: list[dict] = field(default_factory=list)
    kernels: list[dict] = field(default_factory=list)
    gemm_dtypes: set[DType] = field(default_factory=set)  # dtypes of its GEMM calls


class _Symbols:
    def __init__(self, graph: Graph):
        self.index: dict[str, int] = {}
        for name in sorted(graph.free_symbols()):
            self.index[name] = len(self.index)

    def c(self, e: Expr) -> str:
        return dim_c(e, self.index)


#: kernel source (characters) per translation unit below which a module is not split: a
#: unit costs ~0.05 s of compiler start-up and prelude, the link ~0.05 s
SPLIT_MIN_CHARS = 24_000


def emit_module(graph: Graph, plan: FusionPlan, max_units: int = 1) -> ModuleInfo:
    """The C source of ``plan``: one translation unit, or up to ``max_units`` when the
    kernels are large enough to be worth compiling in parallel (``SPLIT_MIN_CHARS`` each).
    """
    syms = _Symbols(graph)
    consts = _Constants()
    info = ModuleInfo(sources=[], needs_blas=False)
    kernel_src: list[str] = []
    prototypes: list[str] = []
    for k in plan.kernels:
        emitter = _KernelEmitter(k, syms, consts)
        kernel_src.append(emitter.emit(info))
        prototypes += emitter.prototypes
    host = _emit_host(graph, plan, syms, consts, info)
    helpers = [gemm_helper(dt) for dt in sorted(info.gemm_dtypes, key=lambda d: d.name)]
    total = sum(map(len, kernel_src))
    units = max(1, min(max_units, total // SPLIT_MIN_CHARS))
    shares = [kernel_src]
    head = PRELUDE
    if units > 1:
        # largest kernels first, each into the lightest unit; the host's unit starts with
        # the weight of what it holds besides kernels, and declares the others' entries
        shares = [[] for _ in range(units)]
        weight = [len(host) + sum(map(len, helpers))] + [0] * (units - 1)
        for src in sorted(kernel_src, key=len, reverse=True):
            u = weight.index(min(weight))
            shares[u].append(src)
            weight[u] += len(src)
        head = '#define DISC_ENTRY __attribute__((visibility("hidden")))\n' + PRELUDE
    declared = prototypes if units > 1 else []
    info.sources = [
        "\n".join([head, consts.source(), *shares[0], *declared, *helpers, host]),
        *("\n".join([head, consts.source(), *share]) for share in shares[1:]),
    ]
    return info


# -- constants ----------------------------------------------------------------------------

class _Constants:
    """Non-scalar constants become static read-only arrays (no mutable global state)."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.decls: list[str] = []

    def array(self, v: Value) -> str:
        if id(v) not in self.names:
            arr = v.producer.attrs["value"].array  # type: ignore[union-attr]
            name = f"cst{len(self.names)}"
            flat = arr.reshape(-1)
            body = ", ".join(literal(x.item(), v.dtype) for x in flat) or "0"
            self.decls.append(f"static const {ctype(v.dtype)} {name}[{max(flat.size, 1)}] = "
                              f"{{{body}}};")
            self.names[id(v)] = name
        return self.names[id(v)]

    def source(self) -> str:
        return "\n".join(self.decls)


def entry_signature(fn: str, decls: list[str]) -> str:
    """A kernel entry as the host calls it (definitions and, across units, prototypes)."""
    return (f"DISC_ENTRY void {fn}({', '.join(decls)}, const int64_t *restrict S, "
            "int parallel)")


def _scalar_constant(v: Value) -> str | None:
    p = v.producer
    if p is not None and p.name == "constant" and v.rank == 0:
        return literal(p.attrs["value"].array.item(), v.dtype)
    return None


def _strides(shape: tuple[Expr, ...]) -> list[Expr]:
    return [product(shape[j + 1:]) for j in range(len(shape))]


# -- kernels ------------------------------------------------------------------------------

class _KernelEmitter:
    def __init__(self, k: Kernel, syms: _Symbols, consts: _Constants):
        self.k, self.syms, self.consts = k, syms, consts
        self.n = k.rank
        self.params: list[tuple[Value, str]] = []  # materialized inputs -> pointer names
        for i, v in enumerate(k.inputs):
            self.params.append((v, f"in{i}"))
        self.pname = {id(v): name for v, name in self.params}
        self.var: dict[int, str] = {}
        self.scope: set[int] = set()  # inner-loop values already computed in this loop
        self.counter = 0
        self.rowbuf: dict[int, str] = {}  # values kept in per-thread row buffers
        self.cached: set[int] = set()  # row-buffered values ready for later phases
        self.segment: int | None = None  # operand of the split concatenate being computed
        self.strided = False  # emitting the version for implicit broadcasts
        self.vec = False  # emitting the version for vector-multiple innermost extents
        self.prototypes: list[str] = []  # declarations of the entries emit() wrote

    # names ----------------------------------------------------------------------------
    def fn_name(self, variant: str) -> str:
        return f"kernel{self.k.id}_{variant}"

    def data_args(self) -> tuple[list[str], list[str]]:
        """(parameter declarations, argument names) of the tensors a kernel touches."""
        decls = [f"const {ctype(v.dtype)} *restrict {name}" for v, name in self.params]
        decls += [f"{ctype(o.dtype)} *restrict out{j}" for j, o in enumerate(self.k.outputs)]
        names = [name for _, name in self.params] + [f"out{j}" for j in range(len(self.k.outputs))]
        return decls, names

    def emit(self, info: ModuleInfo) -> str:
        """Per version: a ``_part`` function doing rows (or column chunks) [lo, hi), and the
        entry that runs it directly when the work is small or splits it across threads."""
        variants = ["fast"] + (["fast_vec", "fast_short"] if vector_speculation(self.k)
                               else [])
        variants += ["fast_rows"] if self.k.kind == "column" else []
        variants += ["strided"] if self.k.speculative else []
        decls, names = self.data_args()
        epilogue = self.epilogue_outputs()
        out = []
        for variant in variants:
            self.strided = variant == "strided"
            self.vec = variant == "fast_vec"
            fn = self.fn_name(variant)
            if variant == "fast_rows":
                out.append(self.row_split_kernel(fn, decls, names))
                continue
            body, extent = self.body()
            attr = "DISC_SHORT_ROWS " if variant == "fast_short" else ""
            if epilogue:
                out.append(self.epilogue_kernel(fn, body, extent, decls, names, epilogue, attr))
                continue
            call = ", ".join(names + ["S"])
            out.append(f"{attr}static void {fn}_part({', '.join(decls)}, "
                       f"const int64_t *restrict S, int64_t lo, int64_t hi) {{\n{body}}}\n")
            out.append(
                f"{entry_signature(fn, decls)} {{\n  const int64_t extent = {extent};\n"
                f"  if (!parallel) {{ {fn}_part({call}, 0, extent); return; }}\n"
                "  /* a few blocks per thread, handed out dynamically: a thread the OS\n"
                "     preempts (a loaded machine, a data loader next door) delays the team\n"
                "     by one block, not by half the kernel */\n"
                "  const int64_t want = (int64_t)DISC_BLOCKS_PER_THREAD * omp_get_max_threads();\n"
                "  const int64_t blocks = extent < want ? extent : want;\n"
                "  #pragma omp parallel for schedule(dynamic, 1)\n"
                "  for (int64_t b = 0; b < blocks; ++b)\n"
                f"    {fn}_part({call}, extent * b / blocks, extent * (b + 1) / blocks);\n"
                "}\n")
        self.prototypes = [entry_signature(self.fn_name(v), decls) + ";" for v in variants]
        info.kernels.append({"id": self.k.id, "kind": self.k.kind, "variants": variants,
                             "ops": [op.name for op in self.k.ops],
                             "speculative": self.k.speculative,
                             "column_epilogue": len(epilogue)})
        return "\n".join(out)

    def inner_extent(self) -> str:
        """C expression of the innermost extent, as the version being emitted sees it."""
        cols = self.dim(self.k.space[-1] if self.n else Expr.const(1))
        return f"(({cols}) & ~(int64_t)(DISC_VEC_LANES - 1))" if self.vec else cols

    def epilogue_outputs(self) -> list[tuple[int, Op]]:
        """(output index, reduce op) of the kernel's column-sum epilogue."""
        ops = {id(op.results[0]): op for op in self.k.column_epilogue}
        return [(j, ops[id(o)]) for j, o in enumerate(self.k.outputs) if id(o) in ops]

    def epilogue_kernel(self, fn: str, body: str, extent: str, decls: list[str],
                        names: list[str], epilogue: list[tuple[int, Op]],
                        attr: str = "") -> str:
        """A row/loop kernel that also sums values over all its rows (fusion's column
        epilogue). Each block of rows accumulates into its own partial row (``colpart``),
        set up by the block itself; the entry adds the partials up in block order, so the
        result does not depend on which thread ran which block."""
        parts = [(j, f"colpart{j}", ctype(op.results[0].dtype)) for j, op in epilogue]
        pdecls = decls + [f"{t} *restrict {name}" for _, name, t in parts]
        cols = self.dim(self.k.space[-1])
        init = "".join(f"  for (int64_t c = 0; c < C; ++c) {name}[c] = "
                       f"{_identity('sum', op.results[0].dtype)};\n"
                       for (_, name, _), (_, op) in zip(parts, epilogue))
        body = body.replace("  for (int64_t r = lo; r < hi; ++r) {", init +
                            "  for (int64_t r = lo; r < hi; ++r) {", 1)
        lines = [f"{attr}static void {fn}_part({', '.join(pdecls)}, const int64_t *restrict S, "
                 f"int64_t lo, int64_t hi) {{\n{body}}}\n",
                 f"{entry_signature(fn, decls)} {{",
                 f"  const int64_t extent = {extent}, C = {cols};",
                 "  const int64_t want = (int64_t)DISC_BLOCKS_PER_THREAD * omp_get_max_threads();",
                 "  const int64_t blocks = !parallel ? 1 : extent < want ? extent : want;",
                 # partial rows 64 elements apart at least: blocks never share a line
                 "  const size_t width = (size_t)((C > 0 ? C : 1) + 63) / 64 * 64;"]
        # partial rows on the caller's stack when small: a malloc/free pair per call next
        # to the arena's can make glibc trim and regrow its heap, page-faulting every call
        for _, name, t in parts:
            lines += [f"  const size_t {name}_bytes = (size_t)(blocks > 0 ? blocks : 1) * width"
                      f" * sizeof({t});",
                      f"  {t} *{name} = ({t} *)({name}_bytes <= DISC_STACK_PARTIALS ? "
                      f"__builtin_alloca({name}_bytes) : malloc({name}_bytes));"]
        call = ", ".join(names + [f"{name} + b * width" for _, name, _ in parts] + ["S"])
        lines += ["  if (!parallel) {",
                  f"    const int64_t b = 0; {fn}_part({call}, 0, extent);",
                  "  } else {",
                  "    #pragma omp parallel for schedule(dynamic, 1)",
                  "    for (int64_t b = 0; b < blocks; ++b)",
                  f"      {fn}_part({call}, extent * b / blocks, extent * (b + 1) / blocks);",
                  "  }"]
        for j, name, t in parts:
            lines += ["  #pragma omp simd",
                      "  for (int64_t c = 0; c < C; ++c) {",
                      f"    {t} acc = 0;",
                      f"    for (int64_t b = 0; b < blocks; ++b) acc += {name}[b * width + c];",
                      f"    out{j}[c] = acc;",
                      "  }",
                      f"  if ({name}_bytes > DISC_STACK_PARTIALS) free({name});"]
        lines.append("}\n")
        return "\n".join(lines)

    # index arithmetic -----------------------------------------------------------------
    def dim(self, e: Expr) -> str:
        return self.syms.c(e)

    def read(self, op: Op, i: int) -> str:
        """C expression loading operand ``i`` of ``op`` (materialized) at the current point."""
        v = op.operands[i]
        lit = _scalar_constant(v)
        if lit is not None:
            return lit
        if v.producer is not None and v.producer.name == "constant":
            base = self.consts.array(v)
        else:
            base = self.pname[id(v)]
        m = self.k.reads[(id(op), i)]
        maybe = self.k.maybe_broadcast.get((id(op), i), {})
        return f"{base}[{self.offset(v, m, maybe)}]"

    def offset(self, v: Value, m: tuple, maybe: dict[int, int]) -> str:
        if v.rank == 0 or all(d is None for d in m):
            return "0"
        n = self.n
        if self.k.kind == "column" and not (maybe and self.strided):
            # rows = the reduced leading dims, columns = the kept dims, each flattened; in
            # the contiguous version, dims that may be implicit broadcasts are known equal
            a, space = self.col_axes, tuple(self.k.space)
            shape = tuple(space[maybe[j]] if j in maybe else d for j, d in enumerate(v.shape))
            if m == tuple(range(n)) and shape == space:
                return "r*C + c"
            if m == tuple(range(a, n)) and shape == space[a:]:
                return "c"  # e.g. a bias broadcast along the reduced dims
            if m == tuple(range(a)) and shape == space[:a]:
                return "r"  # e.g. a per-row scale broadcast along the kept dims
            # anything else (a broadcast of some of the dims, a slice, a pad, the strided
            # version of a possible implicit broadcast): per-dim indices, below
        if not maybe and self.k.kind != "column" and tuple(v.shape) == tuple(self.k.space):
            if m == tuple(range(n)):
                return "r*C + c"  # the common case: the value has the kernel's own layout
        if (not maybe and self.k.kind != "column" and m == tuple(range(n - 1))
                and tuple(v.shape) == tuple(self.k.space[:-1])):
            return "r"
        st = _strides(v.shape)
        terms = []
        for j, d in enumerate(m):
            if d is None:
                continue
            stride = self.dim(st[j])
            if j in maybe and self.strided:  # dim may be 1 at run time: stride 0 then
                stride = f"({self.dim(v.shape[j])} == 1 ? 0 : {stride})"
            terms.append(f"{self.index(d)}*{stride}")
        return " + ".join(terms) or "0"

    def index(self, e: object) -> str:
        """C expression of the index an entry denotes at the current loop point."""
        if e is None:
            return "0"
        if e is DATA:
            return self._data_index
        if isinstance(e, Aff):
            base = f"{self.dim(e.scale)}*{self.idx(e.dim)}" if e.dim is not None else "0"
            return f"({base} + {self.dim(e.offset)})"
        if isinstance(e, Quot):
            return f"({self.index(e.inner)} / INT64_C({e.step}))"
        return self.idx(e)

    def idx(self, d: int) -> str:
        if self.k.kind == "column":
            return f"i{d}"
        return "c" if d == self.n - 1 else f"i{d}"

    # body -----------------------------------------------------------------------------
    def body(self) -> tuple[str, str]:
        """The ``_part`` body and the C expression of its extent (rows, or column chunks)."""
        k = self.k
        if k.kind == "column":
            return self.column_body()
        moved = transposed_innermost(k)
        if moved is not None:
            return self.tiled_transpose_body(*moved)
        n = self.n
        rows = product(k.space[:-1]) if n else Expr.const(1)
        self.var, self.scope = {}, set()
        reductions = k.reductions if k.kind == "row" else []
        self.rowbuf = self._row_buffers(reductions)
        lines = [f"  const int64_t C = {self.inner_extent()}; (void)C;"]
        for vid, name in self.rowbuf.items():  # per-thread row buffers (stitch fusion)
            t = ctype(self._value(vid).dtype)
            lines.append(f"  {t} *{name} = ({t} *)malloc((size_t)(C > 0 ? C : 1) * sizeof({t}));")
        start, advance = self.row_walk()
        lines += ["  " + s for s in start]
        lines.append("  for (int64_t r = lo; r < hi; ++r) {")
        done: set[int] = set()
        self.cached: set[int] = set()  # row-buffered values ready for later phases
        for red in reductions:
            lines += ["    " + s for s in self.row_level(done)]
            lines += ["    " + s for s in self.reduction_phase(red, done)]
        lines += ["    " + s for s in self.row_level(done)]
        full = []
        for j, o in enumerate(k.outputs):
            if self._inner(o):
                full.append((j, o))
            else:  # one value per row (a reduction or something computed from them)
                lines.append(f"    out{j}[{self.offset(o, k.maps[id(o)], {})}] = "
                             f"{self.var[id(o)]};")
        epilogue = {id(op.results[0]): op for op in k.column_epilogue}
        for segment, lo, hi in self.inner_segments() if full else ():
            self.scope = set()
            self.segment = segment
            lines.append("    #pragma omp simd")
            lines.append(f"    for (int64_t c = {lo}; c < {hi}; ++c) {{")
            for j, o in full:
                red = epilogue.get(id(o))
                if red is not None:  # a column sum: into this block's partial row
                    body, var = self.operand_cone(red, 0, done)
                    lines += ["      " + s for s in body]
                    lines.append(f"      colpart{j}[c] += {var};")
                    continue
                body, var = self.compute_cone(o, done)
                lines += ["      " + s for s in body]
                lines.append(f"      out{j}[{self.offset(o, k.maps[id(o)], {})}] = {var};")
            lines.append("    }")
            self.scope = set()
        self.segment = None
        lines += ["    " + s for s in advance]
        lines.append("  }")
        for name in self.rowbuf.values():
            lines.append(f"  free({name});")
        return "\n".join(lines) + "\n", self.dim(rows)

    def tiled_transpose_body(self, v: Value, m: tuple[int, ...]) -> tuple[str, str]:
        """A transpose that moves the innermost dim, in TRANSPOSE_TILE-square tiles.

        Row by row it would read the input ``stride`` apart for every element: one cache
        line per element, and with a power-of-two stride all of them in one cache set, so
        every line is evicted before the next row reads its neighbour (1 ns per element
        where a copy takes 0.1). Per tile, each input line is read whole and the tile's
        output lines stay in L1 until filled. A unit of work (``lo``..``hi``) is one tile
        row: a TRANSPOSE_TILE slice of the dim the input's innermost dim follows, times all
        the other dims but the innermost."""
        k, n, tile = self.k, self.n, TRANSPOSE_TILE
        a = m[-1]  # the kernel dim the input's unit-stride dim follows
        st_in, st_out = _strides(v.shape), _strides(k.outputs[0].shape)
        in_stride = {m[i]: st_in[i] for i in range(n)}
        others = [j for j in range(n - 1) if j != a]
        lines = [f"  const int64_t A = {self.dim(k.space[a])}, B = {self.dim(k.space[-1])};",
                 f"  const int64_t tiles = (A + {tile - 1}) / {tile};",
                 "  for (int64_t t = lo; t < hi; ++t) {",
                 "    int64_t rem = t / tiles, ib = 0, ob = 0;",
                 f"    const int64_t a0 = (t % tiles) * {tile};",
                 f"    const int64_t a1 = a0 + {tile} < A ? a0 + {tile} : A;"]
        for j in reversed(others):
            lines += [f"    {{ const int64_t e = {self.dim(k.space[j])}, i = rem % e; rem /= e;",
                      f"      ib += i * ({self.dim(in_stride[j])}); "
                      f"ob += i * ({self.dim(st_out[j])}); }}"]
        t = ctype(v.dtype)
        lines += [f"    const {t} *restrict src = in0 + ib;",
                  f"    {t} *restrict dst = out0 + ob;",
                  f"    const int64_t sa = {self.dim(st_out[a])}, "
                  f"sb = {self.dim(in_stride[n - 1])};",
                  f"    for (int64_t b0 = 0; b0 < B; b0 += {tile}) {{",
                  f"      const int64_t b1 = b0 + {tile} < B ? b0 + {tile} : B;",
                  "      for (int64_t b = b0; b < b1; ++b)",
                  "        for (int64_t x = a0; x < a1; ++x)",
                  "          dst[x * sa + b] = src[x + b * sb];",
                  "    }",
                  "  }"]
        extent = product([k.space[j] for j in others]) if others else Expr.const(1)
        tiles = f"((({self.dim(k.space[a])}) + {tile - 1}) / {tile})"
        return "\n".join(lines) + "\n", f"({self.dim(extent)}) * {tiles}"

    def inner_segments(self) -> list[tuple[int | None, str, str]]:
        """(operand of the split concatenate, lo, hi) per inner loop: one loop over the
        whole row, or one per operand of the kernel's split concatenate (fusion decided)."""
        cat = self.k.split_concat
        if cat is None:
            return [(None, "0", "C")]
        axis = cat.attrs["dimension"]
        out, start = [], cat.results[0].shape[axis] * 0
        for i, w in enumerate(cat.operands):
            end = start + w.shape[axis]
            out.append((i, self.dim(start), self.dim(end)))
            start = end
        return out

    def _value(self, vid: int) -> Value:
        for op in self.k.ops:
            for r in op.results:
                if id(r) == vid:
                    return r
        raise KeyError(vid)

    def _row_buffers(self, reductions: list[Op]) -> dict[int, str]:
        """Reduction operands computed in the kernel and needed again by a later phase are
        kept in a row buffer instead of being recomputed (softmax's exp, for example)."""
        users: dict[int, int] = {}
        for op in self.k.ops:
            for v in op.operands:
                users[id(v)] = users.get(id(v), 0) + 1
        out: dict[int, str] = {}
        members = {id(op) for op in self.k.ops}
        for red in reductions:
            v = red.operands[0]
            fused = v.producer is not None and id(v.producer) in members
            if (red.name == "reduce" and fused and users[id(v)] > 1
                    and v.producer.name not in ("broadcast_in_dim", "transpose", "slice")):
                out[id(v)] = f"rowbuf{len(out)}"
        return out

    def row_walk(self) -> tuple[list[str], list[str]]:
        """Lines before the row loop and lines ending each row that keep the row's per-dim
        indices ``i<d>`` (every dim but the innermost) current.

        The block's first row is split into indices once, with divisions; each row after
        that carries like an odometer. Splitting every row afresh costs a 64-bit division
        per symbolic dim per row, which dominated kernels with short rows: im2col's
        patches, three channels wide, paid two divisions per three floats copied.
        """
        n = self.n
        if n <= 1:
            return [], []
        if n == 2:
            return ["int64_t i0 = lo;"], ["++i0;"]
        dims = range(n - 2, 0, -1)  # innermost first
        start = [f"const int64_t rowdim{d} = {self.dim(self.k.space[d])};" for d in dims]
        start.append(f"int64_t {', '.join(f'i{d} = 0' for d in range(n - 1))};")
        split = ["int64_t rem = lo;"]
        for d in dims:
            split.append(f"i{d} = rem % rowdim{d}; rem /= rowdim{d};")
        split.append("i0 = rem;")
        start.append("if (lo < hi) { " + " ".join(split) + " }  /* an empty dim: no rows */")
        carry = "++i0;"
        for d in reversed(dims):  # outermost carried last
            carry = f"if (++i{d} == rowdim{d}) {{ i{d} = 0; {carry} }}"
        return start, [carry]

    def _inner(self, v: Value) -> bool:
        """Does ``v`` vary along the kernel's innermost (column) dim?

        Values that do not are computed once per row, before the inner loop, in every kernel
        kind: an index computed from iotas (im2col's gather positions), a per-row bias. Left
        inside, they would be recomputed per element and make the compiler vectorize the
        index arithmetic and turn a contiguous load into a hardware gather.
        """
        m = self.k.maps.get(id(v))
        return m is not None and (self.n - 1) in {kdim(e) for e in m}

    def _row_invariant(self, op: Op, i: int) -> bool:
        """Is operand ``i`` of ``op`` one value per row, computed in this kernel (a row-level
        value, or a broadcast of one along the row)? Operands read from memory are not
        known to be: a broadcast read of a per-column vector varies along the row."""
        members = {id(o) for o in self.k.ops}
        while True:
            if (id(op), i) in self.k.reads:
                return False
            v = op.operands[i]
            p = v.producer
            if p is None or id(p) not in members:
                return False
            if not self._inner(v):
                return True
            if p.name != "broadcast_in_dim":
                return False
            op, i = p, 0

    def row_level(self, done: set[int]) -> list[str]:
        """Emit row-level ops (constant along the row) whose operands are available."""
        out = []
        for op in self.k.ops:
            r = op.results[0]
            if id(r) in done or op.name in REDUCTIONS or self._inner(r):
                continue
            if all(self._available(op, i, done) for i in range(len(op.operands))):
                out.append(self.assign(op, r))
                done.add(id(r))
        return out

    def _available(self, op: Op, i: int, done: set[int]) -> bool:
        v = op.operands[i]
        return op.name in SHAPE_ONLY or id(v) in done or (id(op), i) in self.k.reads

    def reduction_phase(self, red: Op, done: set[int]) -> list[str]:
        if red.name in ("argmax", "argmin"):
            return self.arg_phase(red, done)
        kind = red.attrs["kind"]
        v = red.results[0]
        dt = v.dtype
        self.counter += 1
        acc = f"acc{self.counter}"
        out = [f"{ctype(dt)} {acc} = {_identity(kind, dt)};"]
        # max/min of floats: a plain (vectorizable) max plus a separate "saw a NaN" flag
        # instead of a NaN-aware select, which the compiler cannot turn into a vector max
        split_nan = kind in ("max", "min") and dt.is_float
        if split_nan:
            out.append(f"int {acc}_nan = 0;")
        pragma = {"sum": f"reduction(+:{acc})", "prod": f"reduction(*:{acc})",
                  "max": f"reduction(max:{acc})", "min": f"reduction(min:{acc})",
                  "and": f"reduction(&&:{acc})", "or": f"reduction(||:{acc})"}.get(kind)
        if split_nan:
            pragma += f" reduction(|:{acc}_nan)"
        out.append("#pragma omp simd" + (f" {pragma}" if pragma else ""))
        out.append("for (int64_t c = 0; c < C; ++c) {")
        saved = dict(self.var)
        self.scope = set()
        body, x = self.operand_cone(red, 0, done)
        out += ["  " + s for s in body]
        buf = self.rowbuf.get(id(red.operands[0]))
        if buf is not None and id(red.operands[0]) not in self.cached:
            out.append(f"  {buf}[c] = {x};")
        if split_nan:
            cmp = ">" if kind == "max" else "<"
            out.append(f"  {{ const {ctype(dt)} t = {x}; {acc} = t {cmp} {acc} ? t : {acc}; "
                       f"{acc}_nan |= t != t; }}")
        else:
            out.append("  " + _combine(kind, dt, acc, x))
        out.append("}")
        if split_nan:
            out.append(f"if ({acc}_nan) {acc} = NAN;")
        if buf is not None:
            self.cached.add(id(red.operands[0]))
        self.var = saved
        self.scope = set()
        self.counter += 1
        name = f"r{self.counter}"
        out.append(f"const {ctype(dt)} {name} = {acc};")
        self.var[id(v)] = name
        done.add(id(v))
        return out

    def arg_phase(self, red: Op, done: set[int]) -> list[str]:
        """argmax/argmin: first occurrence wins; NaN beats everything (first NaN wins)."""
        x = red.operands[0]
        t = ctype(x.dtype)
        self.counter += 1
        best, at = f"best{self.counter}", f"at{self.counter}"
        cmp = ">" if red.name == "argmax" else "<"
        out = [f"{t} {best} = 0; int64_t {at} = -1;", "for (int64_t c = 0; c < C; ++c) {"]
        saved = dict(self.var)
        self.scope = set()
        body, val = self.operand_cone(red, 0, done)
        out += ["  " + s for s in body]
        nan = (f" || (t != t && {best} == {best})" if x.dtype.is_float else "")
        out.append(f"  {{ const {t} t = {val}; if ({at} < 0 || t {cmp} {best}{nan}) "
                   f"{{ {best} = t; {at} = c; }} }}")
        out.append("}")
        self.var = saved
        self.scope = set()
        v = red.results[0]
        self.counter += 1
        name = f"r{self.counter}"
        out.append(f"const {ctype(v.dtype)} {name} = ({ctype(v.dtype)})({at} < 0 ? 0 : {at});")
        self.var[id(v)] = name
        done.add(id(v))
        return out

    def operand_cone(self, op: Op, i: int, done: set[int]) -> tuple[list[str], str]:
        if (id(op), i) in self.k.reads:
            return [], self.read(op, i)
        return self.compute_cone(op.operands[i], done)

    def compute_cone(self, v: Value, done: set[int]) -> tuple[list[str], str]:
        """Statements computing ``v`` inside the column loop (row-level values reused)."""
        if id(v) in self.cached:
            return [], f"{self.rowbuf[id(v)]}[c]"
        if id(v) in self.var and (id(v) in done or id(v) in self.scope
                                  or not self._inner(v)):
            return [], self.var[id(v)]
        lines: list[str] = []
        needed = self._cone(v, done)
        for op in needed:
            lines.append(self.assign(op, op.results[0]))
        return lines, self.var[id(v)]

    def _cone(self, v: Value, done: set[int]) -> list[Op]:
        members = {id(op) for op in self.k.ops}
        out: list[Op] = []
        seen: set[int] = set()

        def visit(val: Value) -> None:
            p = val.producer
            if (p is None or id(p) not in members or id(val) in done or id(val) in self.scope
                    or id(p) in seen or id(val) in self.cached):
                return
            seen.add(id(p))
            for j, w in enumerate(() if p.name in SHAPE_ONLY else p.operands):
                if p is self.k.split_concat and j != self.segment:
                    continue  # another inner loop computes that operand
                if (id(p), j) not in self.k.reads:
                    visit(w)
            out.append(p)

        visit(v)
        return out

    def operand_value(self, op: Op, i: int) -> str:
        if (id(op), i) in self.k.reads:
            return self.read(op, i)
        v = op.operands[i]
        if id(v) in self.cached:
            return f"{self.rowbuf[id(v)]}[c]"
        return self.var[id(v)]

    def assign(self, op: Op, r: Value) -> str:
        args = []
        if op.name in INDIRECT:  # the index value first, then the load it addresses
            idx = self.operand_value(op, 1)
            axis = op.attrs["axis"]
            top = self.dim(op.operands[0].shape[axis] - 1)
            self._data_index = f"disc_clampi((int64_t)({idx}), {top})"
            expr = self.read(op, 0)
            self.counter += 1
            name = f"v{self.counter}"
            self.var[id(r)] = name
            self.scope.add(id(r))
            return f"const {ctype(r.dtype)} {name} = {expr};"
        if op is self.k.split_concat:  # this inner loop covers one operand's range only
            expr = self.operand_value(op, self.segment)
        else:
            for i in range(0 if op.name in SHAPE_ONLY else len(op.operands)):
                args.append(self.operand_value(op, i))
            if (op.name == "div" and r.dtype.is_float and self._inner(r)
                    and self._row_invariant(op, 1)):
                # x / s with s constant along the row (softmax's sum, a norm's scale):
                # multiply by 1/s, which the C compiler computes once per row. A vector
                # divide costs several multiplies; the result differs by at most an ulp.
                expr = f"(({args[0]}) * ((({ctype(r.dtype)})1) / ({args[1]})))"
            else:
                expr = self.expr(op, args)
        self.counter += 1
        name = f"v{self.counter}"
        self.var[id(r)] = name
        self.scope.add(id(r))
        return f"const {ctype(r.dtype)} {name} = {expr};"

    def expr(self, op: Op, args: list[str]) -> str:
        if op.name in ("broadcast_in_dim", "transpose", "slice", "reverse", "reshape"):
            return args[0]  # the dim map did the work (reshape: only unit dims, see fusion)
        if op.name == "pad":
            return self.guarded_pad(op, args)
        if op.name == "concatenate":
            return self.guarded_concat(op, args)
        if op.name == "iota":
            m = self.k.maps[id(op.results[0])]
            return f"({ctype(op.results[0].dtype)})({self.index(m[op.attrs['dimension']])})"
        if op.name == "constant":
            return literal(op.attrs["value"].array.item(), op.results[0].dtype)
        if op.name == "get_dimension_size":  # shape arithmetic evaluated on the host side
            return f"(int64_t){self.dim(op.operands[0].shape[op.attrs['dimension']])}"
        fn = getattr(op.opdef, "c_expr", None)
        text = fn(op, args) if fn else None
        if text is None:
            raise NativeUnsupported(f"{op.name} on {op.operands[0].dtype.short} has no C form")
        return text

    def guarded_pad(self, op: Op, args: list[str]) -> str:
        m = self.k.maps[id(op.results[0])]
        conds = []
        for j, (lo, d) in enumerate(zip(op.attrs["low"], op.operands[0].shape)):
            step = op.attrs["interior"][j] + 1
            if lo == 0 and op.attrs["high"][j] == 0 and step == 1:
                continue
            e = self.index(m[j])
            # interior padding: operand element k sits at lo + k * step
            conds.append(f"({e}) >= {self.dim(lo)} && ({e}) < {self.dim(lo + (d - 1) * step + 1)}"
                         + (f" && (({e}) - {self.dim(lo)}) % INT64_C({step}) == 0"
                            if step > 1 else ""))
        if not conds:
            return args[0]
        return f"(({' && '.join(conds)}) ? ({args[0]}) : ({args[1]}))"

    def guarded_concat(self, op: Op, args: list[str]) -> str:
        axis = op.attrs["dimension"]
        e = self.index(self.k.maps[id(op.results[0])][axis])
        out = args[-1]
        end = product([]) * 0
        ends = []
        for w in op.operands[:-1]:
            end = end + w.shape[axis]
            ends.append(end)
        for end, arg in reversed(list(zip(ends, args[:-1]))):
            out = f"(({e}) < {self.dim(end)} ? ({arg}) : {out})"
        return out

    # column reductions ----------------------------------------------------------------
    def column_body(self, split_rows: bool = False) -> tuple[str, str]:
        """The column schedule: a ``_part`` over column chunks [lo, hi) of 256 columns,
        each summing all rows. ``split_rows``: the row-split schedule's ``_part`` instead,
        over rows [lo, hi) and every column chunk, into the block's partial row ``part<j>``.
        """
        k = self.k
        reds = [o.producer for o in k.outputs]
        a = self.col_axes = len(reds[0].attrs["axes"])  # type: ignore[union-attr]
        rows = product(k.space[:a])
        cols = product(k.space[a:])
        self.var, self.scope = {}, set()
        init, body, store = [], [], []
        for j, red in enumerate(reds):
            kind = red.attrs["kind"]  # type: ignore[union-attr]
            dt = red.results[0].dtype  # type: ignore[union-attr]
            init += [f"    {ctype(dt)} acc{j}[256];",
                     f"    for (int64_t c = c0; c < c1; ++c) acc{j}[c - c0] = "
                     f"{_identity(kind, dt)};"]
            cone, x = self.operand_cone(red, 0, set())  # type: ignore[arg-type]
            body += cone + [_combine(kind, dt, f"acc{j}[c - c0]", x)]
            dest = f"part{j}" if split_rows else f"out{j}"
            store.append(f"    for (int64_t c = c0; c < c1; ++c) {dest}[c] = acc{j}[c - c0];")
        used = {int(d) for d in re.findall(r"\bi(\d+)\b", "\n".join(body))}
        chunks, row_range = (("  for (int64_t c0 = 0; c0 < C; c0 += 256) {", "r = lo; r < hi")
                             if split_rows else
                             ("  for (int64_t c0 = lo * 256; c0 < hi * 256 && c0 < C; c0 += 256) {",
                              "r = 0; r < R"))
        lines = [
            f"  const int64_t R = {self.dim(rows)}; (void)R;",
            f"  const int64_t C = {self.dim(cols)};",
            chunks,
            "    const int64_t c1 = c0 + 256 < C ? c0 + 256 : C;",
            *init,
            f"    for (int64_t {row_range}; ++r) {{",
            *["      " + s for s in self._decompose("r", range(a), used)],
            "      #pragma omp simd",
            "      for (int64_t c = c0; c < c1; ++c) {",
            *["        " + s for s in self._decompose("c", range(a, self.n), used)],
            *["        " + s for s in body],
            "      }",
            "    }",
            *store,
            "  }",
        ]
        if split_rows:
            return "\n".join(lines) + "\n", self.dim(rows)
        return "\n".join(lines) + "\n", f"(({self.dim(cols)}) + 255) / 256"

    def row_split_kernel(self, fn: str, decls: list[str], names: list[str]) -> str:
        """The row-split schedule of a column reduction (for few column chunks and many
        rows, where the column schedule would leave threads idle): blocks of rows reduce
        into partial rows, 64 elements apart, on the stack when small; the entry combines
        them in block order, so the result does not depend on which thread ran which
        block."""
        body, extent = self.column_body(split_rows=True)
        reds = [o.producer for o in self.k.outputs]
        parts = [(j, f"part{j}", ctype(r.results[0].dtype), r.attrs["kind"])  # type: ignore
                 for j, r in enumerate(reds)]
        pdecls = decls + [f"{t} *restrict {name}" for _, name, t, _ in parts]
        cols = self.dim(product(self.k.space[self.col_axes:]))
        lines = [f"static void {fn}_part({', '.join(pdecls)}, const int64_t *restrict S, "
                 f"int64_t lo, int64_t hi) {{\n{body}}}\n",
                 f"{entry_signature(fn, decls)} {{",
                 "  (void)parallel;  /* chosen only for parallel work */",
                 f"  const int64_t R = {extent}, C = {cols};",
                 "  const int64_t want = (int64_t)DISC_BLOCKS_PER_THREAD * omp_get_max_threads();",
                 "  const int64_t blocks = R < 1 ? 1 : R < want ? R : want;",
                 "  const size_t width = (size_t)((C > 0 ? C : 1) + 63) / 64 * 64;"]
        for _, name, t, _ in parts:
            lines += [f"  const size_t {name}_bytes = (size_t)blocks * width * sizeof({t});",
                      f"  {t} *{name} = ({t} *)({name}_bytes <= DISC_STACK_PARTIALS ? "
                      f"__builtin_alloca({name}_bytes) : malloc({name}_bytes));"]
        call = ", ".join(names + [f"{name} + b * width" for _, name, _, _ in parts] + ["S"])
        lines += ["  #pragma omp parallel for schedule(dynamic, 1)",
                  "  for (int64_t b = 0; b < blocks; ++b)",
                  f"    {fn}_part({call}, R * b / blocks, R * (b + 1) / blocks);"]
        for j, name, t, kind in parts:
            dt = reds[j].results[0].dtype  # type: ignore[union-attr]
            lines += ["  for (int64_t c = 0; c < C; ++c) {",
                      f"    {t} acc = {name}[c];",
                      "    for (int64_t b = 1; b < blocks; ++b)",
                      "      " + _combine(kind, dt, "acc", f"{name}[b * width + c]"),
                      f"    out{j}[c] = acc;",
                      "  }",
                      f"  if ({name}_bytes > DISC_STACK_PARTIALS) free({name});"]
        lines.append("}\n")
        return "\n".join(lines)

    def _decompose(self, flat: str, dims: range, used: set[int]) -> list[str]:
        """Per-dim indices ``i<d>`` of a column kernel's flattened row or column index, for
        the reads and index computations that need them (most need none: reads in the
        kernel's own layout use ``r`` and ``c`` directly)."""
        if not used & set(dims):
            return []
        if len(dims) == 1:
            return [f"const int64_t i{dims[0]} = {flat};"]
        out = [f"int64_t rem_{flat} = {flat};"]
        for d in reversed(dims[1:]):
            size = self.dim(self.k.space[d])
            out.append(f"const int64_t i{d} = rem_{flat} % {size}; rem_{flat} /= {size};")
        out.append(f"const int64_t i{dims[0]} = rem_{flat};")
        return out


def vector_speculation(k: Kernel) -> bool:
    """Does kernel ``k`` get a version for innermost extents that are a multiple of the
    vector width? Row and loop kernels whose innermost extent is symbolic (a static one the
    compiler already sees), with one inner loop over it (not split at concatenate
    boundaries, which need not be multiples); not tiled transposes, which have no row loop."""
    return (k.kind in ("row", "loop") and k.rank >= 1 and k.split_concat is None
            and not k.space[-1].is_const and transposed_innermost(k) is None)


#: side of the square tiles of a transpose that moves the innermost dim (16 floats: one
#: cache line of input per tile column)
TRANSPOSE_TILE = 16


def transposed_innermost(k: Kernel) -> tuple[Value, tuple[int, ...]] | None:
    """(input, dim map) when loop kernel ``k`` only transposes a materialized input and its
    innermost dim comes from another input dim (so a row reads the input strided): such a
    kernel is emitted in tiles (``tiled_transpose_body``). None for anything else."""
    if (k.kind != "loop" or k.speculative or k.column_epilogue or k.split_concat is not None
            or len(k.ops) != 1 or k.ops[0].name != "transpose" or len(k.outputs) != 1
            or k.rank < 2):
        return None
    op, out = k.ops[0], k.outputs[0]
    v = op.operands[0]
    m = k.reads.get((id(op), 0))
    if (out is not op.results[0] or len(k.inputs) != 1 or k.inputs[0] is not v or m is None
            or any(type(d) is not int for d in m) or sorted(m) != list(range(k.rank))
            or tuple(k.maps.get(id(out), ())) != tuple(range(k.rank))
            or tuple(out.shape) != tuple(k.space) or m[-1] == k.rank - 1):
        return None
    return v, tuple(m)


def _identity(kind: str, dt: DType) -> str:
    if kind == "sum":
        return literal(0, dt)
    if kind == "prod":
        return literal(1, dt)
    if kind == "and":
        return "1"
    if kind == "or":
        return "0"
    if dt.is_float:
        return ("-" if kind == "max" else "") + "INFINITY"
    if dt.is_bool:
        return "0" if kind == "max" else "1"
    import numpy as np

    info = np.iinfo(dt.np)
    return literal(info.min if kind == "max" else info.max, dt)


def _combine(kind: str, dt: DType, acc: str, x: str) -> str:
    if kind == "sum":
        return f"{acc} += {x};"
    if kind == "prod":
        return f"{acc} *= {x};"
    if kind in ("and", "or"):
        return f"{acc} = {acc} {'&&' if kind == 'and' else '||'} ({x});"
    cmp = ">" if kind == "max" else "<"
    if dt.is_float:
        return f"{{ const {ctype(dt)} t = {x}; {acc} = (t {cmp} {acc} || t != t) ? t : {acc}; }}"
    return f"{{ const {ctype(dt)} t = {x}; {acc} = t {cmp} {acc} ? t : {acc}; }}"


# -- host -----------------------------------------------------------------------------------

def _undefined(d: Expr, syms: _Symbols) -> str | None:
    """C condition: ``d`` divides by zero at run time (None when it cannot)."""
    divs = d.divisions()
    return " || ".join(f"{syms.c(f.divisor)} == 0" for f in divs) if divs else None


def _clamped(d: Expr, syms: _Symbols) -> str:
    """C value of a dim as a size: one that divides by zero (legal only in an empty tensor,
    checked by _division_checks) is at least 0, as in symbolic.evaluate_shape."""
    u = _undefined(d, syms)
    return syms.c(d) if u is None else f"(({u}) ? disc_max({syms.c(d)}, 0) : {syms.c(d)})"


def _division_checks(graph: Graph, syms: _Symbols) -> list[str]:
    """Fail cleanly when a non-empty tensor's shape needs a division by zero.

    A dim like ``floordiv(s0*s3, 2*s0)`` is meaningless when ``s0 = 0``; that is fine in an
    empty tensor (some other dim is 0), and invalid input otherwise, reported with the dim,
    the divisor and what was expected. Checked for every value before any work runs, so no
    kernel ever sizes a loop or a buffer from such a dim (the rule of
    symbolic.evaluate_shape, which the interpreter applies)."""
    out: list[str] = []
    seen: set[tuple] = set()
    for n, op in enumerate(graph.ops):
        for r in op.results:
            shape = tuple(r.shape)
            if shape in seen or not any(d.divisions() for d in shape):
                continue
            seen.add(shape)
            undef = [_undefined(d, syms) for d in shape]
            empty = " || ".join(f"(!({u}) && {syms.c(d)} == 0)" if u else f"{syms.c(d)} == 0"
                                for d, u in zip(shape, undef))
            text = ", ".join(map(str, shape))
            for j, d in enumerate(shape):
                for f in d.divisions():
                    den = f.divisor
                    out.append(
                        f"  if ({syms.c(den)} == 0 && !({empty})) DISC_FAIL(\"op #{n} "
                        f"({op.name}): dim {j} of the result [{text}] is {d}, which divides by "
                        f"zero ({den} = 0) while no other dim is 0; expected {den} != 0 (a "
                        f"division by zero is only allowed in an empty tensor)\");")
    return out


def _dim_checks(dims: list[tuple[int, str, str]]) -> list[str]:
    """Every input dim that is static or an expression, checked in one loop over tables:
    a separate test and ``snprintf`` call per dim made a graph with 50 inputs spend about
    0.3 s of its C compile on them."""
    if not dims:
        return []
    at = ", ".join(str(off) for off, _, _ in dims)
    want = ", ".join(w for _, w, _ in dims)
    what = ", ".join(f'"{m}"' for _, _, m in dims)
    return [
        "  {",
        f"    static const int64_t at[{len(dims)}] = {{{at}}};",
        f"    static const char *const what[{len(dims)}] = {{{what}}};",
        f"    const int64_t want[{len(dims)}] = {{{want}}};",
        f"    for (int c = 0; c < {len(dims)}; ++c)",
        "      if (in_shapes[at[c]] != want[c])",
        "        DISC_FAIL(what[c], (long long)in_shapes[at[c]], (long long)want[c]);",
        "  }",
    ]


def _alias_roots(plan: FusionPlan) -> dict[int, Value]:
    """id(reshape result) -> the value whose buffer it shares (reshapes are zero-copy)."""
    root: dict[int, Value] = {}
    for s in plan.steps:
        if isinstance(s, Alias):
            src = s.op.operands[0]
            root[id(s.op.results[0])] = root.get(id(src), src)
    return root


def _emit_host(graph: Graph, plan: FusionPlan, syms: _Symbols, consts: _Constants,
               info: ModuleInfo) -> str:
    roots = _alias_roots(plan)

    def group(v: Value) -> Value:
        return roots.get(id(v), v)

    L: list[str] = []
    w = L.append
    w(f"int64_t disc_abi_version(void) {{ return {ABI_VERSION}; }}")
    w(f"int64_t disc_num_symbols(void) {{ return {len(syms.index)}; }}")
    w("int64_t disc_run(void *const *in_data, const int64_t *in_shapes, int64_t n_in, "
      "const disc_env *env, char *err, int64_t errlen) {")
    w(f"  int64_t S[{max(len(syms.index), 1)}] = {{0}};")
    w("  char *arena = NULL; (void)S;")
    w("  const int prof = env->profile != NULL;")
    w("  int64_t prof_t = prof ? disc_now_ns() : 0;")
    w(f"  if (n_in != {len(graph.inputs)}) DISC_FAIL(\"expected {len(graph.inputs)} inputs\");")
    # bind symbols and check static dims / expressions
    bound: set[str] = set()
    off = 0
    checks: list[str] = []
    dims_checked: list[tuple[int, str, str]] = []  # (in_shapes index, expected, message)
    for i, v in enumerate(graph.inputs):
        for j, d in enumerate(v.shape):
            where = f"input #{i} dim {j}"
            if d.is_symbol and d.symbol_name not in bound:
                w(f"  S[{syms.index[d.symbol_name]}] = in_shapes[{off}];")
                bound.add(d.symbol_name)
            else:
                want = syms.c(d)
                if d.divisions():  # legal only in an empty input, where it counts as 0
                    others = [f"in_shapes[{off - j + o}] == 0" for o in range(v.rank) if o != j]
                    for f in d.divisions():
                        den = f.divisor
                        checks.append(
                            f"  if ({syms.c(den)} == 0 && !({' || '.join(others) or '0'})) "
                            f"DISC_FAIL(\"{where} is %lld, but {d} divides by zero ({den} = 0) "
                            f"and the input is not empty; expected {den} != 0\", "
                            f"(long long)in_shapes[{off}]);")
                    want = _clamped(d, syms)
                dims_checked.append((off, want, f"{where} is %lld, expected "
                                     f"{str(d).replace('%', '%%')} = %lld"))
            off += 1
    unbound = set(syms.index) - bound
    if unbound:
        raise NativeUnsupported(f"symbols {sorted(unbound)} are not bound by input dims")
    L.extend(checks)
    L.extend(_dim_checks(dims_checked))
    L.extend(_division_checks(graph, syms))
    # storage names
    storage: dict[int, str] = {}
    for i, v in enumerate(graph.inputs):
        storage[id(v)] = f"((char *)in_data[{i}])"
    out_ids: dict[int, int] = {}
    copies: list[tuple[Value, int]] = []
    for i, v in enumerate(graph.outputs):
        g = group(v)
        if id(g) in storage or id(g) in out_ids or (g.producer and g.producer.name == "constant"):
            copies.append((v, i))  # needs its own buffer and a copy
            continue
        out_ids[id(g)] = i
    for i, v in enumerate(graph.outputs):
        shape_name = f"oshape{i}"
        dims = ", ".join(_clamped(d, syms) for d in v.shape) or "0"
        w(f"  int64_t {shape_name}[{max(v.rank, 1)}] = {{{dims}}};")
        w(f"  char *out{i} = (char *)env->alloc(env->alloc_ctx, {i}, {v.rank}, {shape_name});")
        w(f"  if (!out{i}) DISC_FAIL(\"could not allocate output #{i}\");")
    for gid, i in out_ids.items():
        storage[gid] = f"out{i}"
    # arena slots with liveness-based reuse
    step_reads: list[list[Value]] = []
    for s in plan.steps:
        step_reads.append([group(v) for v in step_values(s)[0]])
    slots: list[list[Value]] = []
    slot_of: dict[int, int] = {}
    last_use: dict[int, int] = {}
    for n, reads in enumerate(step_reads):
        for v in reads:
            last_use[id(v)] = n
    free_after: list[tuple[int, int]] = []  # (last step, slot)
    for n, s in enumerate(plan.steps):
        if isinstance(s, Alias):
            continue
        produced = s.outputs if isinstance(s, Kernel) else s.op.results
        taken: set[int] = set()  # a step's outputs never share a slot with each other
        for res in produced:
            g = group(res)
            if id(g) in storage:
                continue
            reusable = [sl for last, sl in free_after if last < n and sl not in taken]
            if reusable:
                sl = reusable[0]
                free_after = [(la, x) for la, x in free_after if x != sl]
            else:
                sl = len(slots)
                slots.append([])
            slots[sl].append(g)
            slot_of[id(g)] = sl
            taken.add(sl)
            free_after.append((last_use.get(id(g), n), sl))
    for sl, members in enumerate(slots):
        size = smax(*[product(v.shape) * v.dtype.itemsize for v in members]) if members else 0
        w(f"  const int64_t slot{sl}_bytes = (({syms.c(size)}) + 63) / 64 * 64;")
    if slots:
        total = " + ".join(f"slot{sl}_bytes" for sl in range(len(slots)))
        w(f"  arena = (char *)malloc((size_t)({total}) + 64);")
        w("  if (!arena) DISC_FAIL(\"out of memory for intermediate buffers\");")
        acc = "arena"
        for sl in range(len(slots)):
            w(f"  char *slot{sl} = {acc};")
            acc = f"slot{sl} + slot{sl}_bytes"
        for gid, sl in slot_of.items():
            storage[gid] = f"slot{sl}"

    def ptr(v: Value) -> str:
        g = group(v)
        if g.producer is not None and g.producer.name == "constant":
            return consts.array(g)
        return storage[id(g)]

    # steps
    w("  DISC_PROFILE(1);")
    for s in plan.steps:
        if isinstance(s, Alias):
            continue
        info.profile.append(_profile_entry(s, info.profile))
        slot = 1 + len(info.profile)
        if isinstance(s, LibraryCall):
            info.needs_blas = True
            L.extend(_emit_gemm(s.op, ptr, syms))
            info.gemm_dtypes.add(s.op.operands[0].dtype)
        elif isinstance(s, ScatterCall):
            L.extend(_emit_scatter(s.op, ptr, syms))
        elif isinstance(s, ScanCall):
            L.extend(_emit_scan(s.op, ptr, syms))
        else:
            _emit_launch(s, ptr, syms, info, w)
        w(f"  DISC_PROFILE({slot});")
    for v, i in copies:
        nbytes = syms.c(product(v.shape) * v.dtype.itemsize)
        w(f"  memcpy(out{i}, {ptr(v)}, (size_t)({nbytes}));")
    w("  free(arena);")
    w("  DISC_PROFILE(1);")
    w("  if (prof) __atomic_fetch_add(&env->profile[0], 1, __ATOMIC_RELAXED);")
    w("  return 0;")
    w("fail:")
    w("  free(arena);")
    w("  return 1;")
    w("}")
    return "\n".join(L) + "\n"


def _shape_text(shape: tuple) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _profile_entry(step: object, done: list[dict]) -> dict:
    """What one profile slot times, for the report: a name unique in the module, its kind,
    the core ops it runs and its iteration space (a GEMM: its operand shapes)."""
    if isinstance(step, Kernel):
        return {"name": f"kernel{step.id}", "kind": "kernel",
                "ops": [op.name for op in step.ops], "shape": _shape_text(tuple(step.space))}
    kind = {LibraryCall: "library", ScatterCall: "scatter", ScanCall: "scan"}[type(step)]
    op = step.op  # type: ignore[attr-defined]
    name = {"library": "gemm"}.get(kind, kind)
    n = sum(1 for e in done if e["kind"] == kind)
    shape = (" x ".join(_shape_text(tuple(v.shape)) for v in op.operands[:2])
             if kind == "library" else _shape_text(tuple(op.results[0].shape)))
    return {"name": f"{name}{n}", "kind": kind, "ops": [op.name], "shape": shape}


def _emit_launch(k: Kernel, ptr: Callable[[Value], str], syms: _Symbols, info: ModuleInfo,
                 w: Callable[[str], None]) -> None:
    """The host code that runs fused kernel ``k``: picks its version (serial or parallel,
    contiguous or strided, vector-multiple, short or remainder rows) and counts the pick."""
    elems = syms.c(product(k.space)) if k.space else "1"
    args = [f"({'const ' + ctype(v.dtype)} *){ptr(v)}" for v in k.inputs]
    args += [f"({ctype(o.dtype)} *){ptr(o)}" for o in k.outputs]
    par = f"({elems}) >= {PAR_MIN}"
    base = len(info.counters)
    info.counters += [f"kernel{k.id}.serial", f"kernel{k.id}.parallel"]
    w("  {")
    w(f"    const int par = {par};")
    w(f"    if (env->counters) env->counters[{base} + par] += 1;")
    if k.speculative:
        conds = []
        for (op_id, i), maybe in k.maybe_broadcast.items():
            op = next(o for o in k.ops if id(o) == op_id)
            v = op.operands[i]
            for j, d in maybe.items():
                conds.append(f"{syms.c(v.shape[j])} == {syms.c(k.space[d])}")
                checks_ = (f"{syms.c(v.shape[j])} != 1 && {syms.c(v.shape[j])} != "
                           f"{syms.c(k.space[d])}")
                w(f"    if ({checks_}) DISC_FAIL(\"{op.name}: operand dim {j} is %lld, "
                  f"expected 1 or %lld\", (long long){syms.c(v.shape[j])}, "
                  f"(long long){syms.c(k.space[d])});")
        info.counters += [f"kernel{k.id}.contiguous", f"kernel{k.id}.strided"]
        w(f"    const int fast = {' && '.join(conds)};")
        w(f"    if (env->counters) env->counters[{base + 2} + !fast] += 1;")
    call = ", ".join(args + ["S", "par"])
    fast = f"kernel{k.id}_fast({call});"
    if k.kind == "column":
        at = len(info.counters)
        info.counters += [f"kernel{k.id}.column_parallel", f"kernel{k.id}.row_split"]
        guard = "fast && " if k.speculative else ""
        cols = syms.c(product(k.space[len(k.outputs[0].producer.attrs["axes"]):]))
        w(f"    const int rows = {guard}par && (({cols}) + 255) / 256 < "
          "omp_get_max_threads();")
        counted = "env->counters && fast" if k.speculative else "env->counters"
        w(f"    if ({counted}) env->counters[{at} + rows] += 1;")
        fast = f"{{ if (rows) kernel{k.id}_fast_rows({call}); else {fast} }}"
    if vector_speculation(k):
        at = len(info.counters)
        info.counters += [f"kernel{k.id}.vector_multiple", f"kernel{k.id}.vector_remainder",
                          f"kernel{k.id}.vector_short"]
        guard = "fast && " if k.speculative else ""
        inner = syms.c(k.space[-1])
        w(f"    const int vec = {guard}({inner}) % DISC_VEC_LANES == 0;")
        w(f"    const int shortrow = {guard}!vec && ({inner}) < DISC_SHORT_ROW_MAX;")
        counted = "env->counters && fast" if k.speculative else "env->counters"
        w(f"    if ({counted}) env->counters[{at} + (vec ? 0 : shortrow ? 2 : 1)] += 1;")
        fast = (f"{{ if (vec) kernel{k.id}_fast_vec({call}); "
                f"else if (shortrow) kernel{k.id}_fast_short({call}); else {fast} }}")
    if k.speculative:
        w(f"    if (fast) {fast} else kernel{k.id}_strided({call});")
    else:
        w(f"    {fast}")
    w("  }")


def gemm_layout(op: Op) -> tuple[int, int, list[int], list[int], list[int]] | None:
    """(transA, transB, lhs free, lhs contract, rhs free) when BLAS takes the operands as
    they are, else None (lower.canonicalize_dots inserts transposes first)."""
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


def _emit_gemm(op: Op, ptr, syms: _Symbols) -> list[str]:
    """One call of the module's GEMM helper (:func:`gemm_helper`) for ``op``."""
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
    return [
        f"  {{ const int rc = disc_gemm_{t}(env, {int(ta == 112)}, {int(tb == 112)}, {M}, {N}, "
        f"{K}, {B}, (const {t} *){ptr(lhs)}, (const {t} *){ptr(rhs)}, "
        f"({t} *){ptr(op.results[0])});",
        f"    if (rc == 1) DISC_FAIL(\"no BLAS {'sgemm' if dt is DType.F32 else 'dgemm'} was "
        "provided to this module\");",
        "    if (rc) DISC_FAIL(\"out of memory for a GEMM's partial sums\"); }",
    ]


def gemm_helper(dt: DType) -> str:
    """The C function every GEMM of ``dt`` in a module calls: the batched row-major
    product C[b] = op(A[b]) op(B[b]) through the BLAS of ``disc_env``, split over the
    module's OpenMP team. Returns 1 when the environment has no such BLAS, 2 when the
    partial sums of a split K cannot be allocated.

    One function per module rather than this code at every call site: 26 inlined copies
    (one OpenMP region each) were about 0.7 s of a GPT backward module's 2.7 s C compile.
    """
    t = ctype(dt)
    fn = "sgemm" if dt is DType.F32 else "dgemm"
    rowmajor = dt is DType.F32
    lines = [
        f"static __attribute__((noinline)) int disc_gemm_{t}(const disc_env *env, int ta, "
        f"int tb, int64_t M, int64_t N, int64_t K, int64_t B, const {t} *A, const {t} *Bm, "
        f"{t} *Cm) {{",
        f"  if (!env->{fn}) return 1;",
        *(["  const disc_sgemm_rowmajor_fn rowmajor = "
           "(disc_sgemm_rowmajor_fn)env->sgemm_rowmajor;"] if rowmajor else []),
        "  if (M > 0 && N > 0 && K == 0) memset(Cm, 0, (size_t)(B*M*N) * sizeof(*Cm));",
        "  if (M <= 0 || N <= 0 || K <= 0) return 0;",
        "  /* GEMMs run on this module's OpenMP team, one BLAS thread per member: batches",
        "     split across threads, else the longer of M and N does. The BLAS thread count",
        "     is set once, outside the team (in pthread OpenBLAS builds it is global). */",
        "  const int nt = (double)B * M * N * K >= DISC_GEMM_PARALLEL_MIN ? "
        "omp_get_max_threads() : 1;",
        "  const int prev = env->blas_threads_local ? env->blas_threads_local(1) : 0;",
        "  /* a row block [m0, m1) of C reads rows m0.. of A (columns m0.. when A is",
        "     transposed); a column block [n0, n1) reads columns n0.. of B (rows n0.. when B",
        "     is transposed) */",
        "  const int64_t lda = ta ? M : K, ldb = tb ? K : N;",
        "  const char *opa = ta ? \"T\" : \"N\", *opb = tb ? \"T\" : \"N\";",
        "  /* a small C over a long K (a convolution's or small layer's weight gradient:",
        "     32x27 over 8192 positions) splits K instead: each member multiplies a slice",
        "     of K into its own partial C (member 0 into C itself), and the partials are",
        "     added up after (row or column blocks of so small a C leave each BLAS call",
        "     too little to work on) */",
        "  const int64_t big = M > N ? M : N;",
        "  const int by_k = nt > 1 && B < nt && K >= DISC_GEMM_SPLIT_K_RATIO * big;",
        f"  {t} *parts = by_k ? ({t} *)malloc((size_t)((nt - 1) * B * M * N) * sizeof({t}))"
        " : NULL;",
        "  if (by_k && !parts) return 2;",
        "  int64_t team = 1;",
        "  #pragma omp parallel num_threads(nt) if (nt > 1)",
        "  {",
        "    const int64_t T = omp_get_num_threads(), tid = omp_get_thread_num();",
        "    if (by_k && tid == 0) team = T;",
        "    const int by_batch = !by_k && B >= T, by_rows = !by_k && !by_batch && M >= N;",
        "    const int by_cols = !by_k && !by_batch && !by_rows;",
        "    const int64_t b0 = by_batch ? B * tid / T : 0;",
        "    const int64_t b1 = by_batch ? B * (tid + 1) / T : B;",
        "    const int64_t m0 = by_rows ? M * tid / T : 0;",
        "    const int64_t m1 = by_rows ? M * (tid + 1) / T : M;",
        "    const int64_t n0 = by_cols ? N * tid / T : 0;",
        "    const int64_t n1 = by_cols ? N * (tid + 1) / T : N;",
        "    const int64_t k0 = by_k ? K * tid / T : 0;",
        "    const int64_t kb = by_k ? K * (tid + 1) / T - k0 : K;",
        "    const int64_t mb = m1 - m0, nb = n1 - n0;",
        "    const int64_t a_off = (ta ? m0 : m0 * K) + (ta ? k0 * M : k0);",
        "    const int64_t b_off = (tb ? n0 * K : n0) + (tb ? k0 : k0 * N);",
        f"    {t} *dst = (by_k && tid > 0 ? parts + (tid - 1) * B * M * N : Cm) + m0*N + n0;",
        f"    const {t} one = 1, zero = 0;",
        "    if (kb == 0)  /* a member of a split K with no slice: its partial is zero */",
        "      memset(dst, 0, (size_t)(B * M * N) * sizeof(*dst));",
        "    else if (mb > 0 && nb > 0)",
        *(["      if (rowmajor) for (int64_t b = b0; b < b1; ++b)",
           "        rowmajor(*opa, *opb, mb, nb, kb, 1.0f, A + b*M*K + a_off, lda, "
           "Bm + b*K*N + b_off, ldb, 0.0f, dst + b*M*N, N);",
           "      else"] if rowmajor else []),
        "      /* row-major C = op(A) op(B) is column-major C' = op(B)' op(A)' */",
        "      for (int64_t b = b0; b < b1; ++b)",
        f"        ((disc_{fn}_fn)env->{fn})(opb, opa, &nb, &mb, &kb, &one, Bm + b*K*N + b_off, "
        "&ldb, A + b*M*K + a_off, &lda, &zero, dst + b*M*N, &N, 1, 1);",
        "    if (by_k) {",
        "      #pragma omp barrier",
        "      const int64_t total = B * M * N, lo = total * tid / T, hi = total * (tid + 1) / T;",
        "      for (int64_t p = 1; p < team; ++p) {",
        f"        const {t} *part = parts + (p - 1) * total;",
        "        #pragma omp simd",
        "        for (int64_t i = lo; i < hi; ++i) Cm[i] += part[i];",
        "      }",
        "    }",
        "  }",
        "  free(parts);",
        "  if (env->blas_threads_local) env->blas_threads_local(prev);",
        "  return 0;",
        "}",
    ]
    return "\n".join(lines) + "\n"


def _emit_scatter(op: Op, ptr, syms: _Symbols) -> list[str]:
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
    axis = op.attrs["axis"]
    ushape = upd.shape
    if op.name == "scatter_add":
        bd = op.attrs["batch_dims"]
        q = idx.rank - bd
        idims = [f"u{j}" if j < bd else f"u{axis + j - bd}" for j in range(idx.rank)]
        xdims = [f"u{j}" if j < axis else "tgt" if j == axis else f"u{j + q - 1}"
                 for j in range(x.rank)]
    else:
        idims = [f"u{j}" for j in range(idx.rank)]
        xdims = [f"u{j}" if j != axis else "tgt" for j in range(x.rank)]
    ioff = " + ".join(f"{d}*{syms.c(s)}" for d, s in zip(idims, _strides(idx.shape))) or "0"
    xoff = " + ".join(f"{d}*{syms.c(s)}" for d, s in zip(xdims, _strides(x.shape))) or "0"
    uoff = " + ".join(f"u{d}*{syms.c(s)}" for d, s in enumerate(_strides(ushape))) or "0"
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
                 f"        for (int64_t e = lo; e < hi; ++e) Y[e] = {_scalar_constant(fill)};",
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


def _emit_scan(op: Op, ptr, syms: _Symbols) -> list[str]:
    """cumulative over [outer, axis, inner]: one task per outer index and 256-wide chunk of
    the inner dims (vectorizable across the chunk), each walking the axis with its
    accumulators in the reference's precision (f32 sums and products in double)."""
    x, res = op.operands[0], op.results[0]
    kind, axis = op.attrs["kind"], op.attrs["axis"]
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
        f"      for (int64_t c = c0; c < c1; ++c) accs[c - c0] = {_identity(kind, res.dtype)};",
        "      for (int64_t a = 0; a < A; ++a) {",
        "        const int64_t base = (o * A + a) * IN;",
        "        #pragma omp simd",
        "        for (int64_t c = c0; c < c1; ++c) {",
        f"          {_combine(kind, res.dtype, 'accs[c - c0]', 'X[base + c]')}",
        f"          Y[base + c] = ({t})accs[c - c0];",
        "        }",
        "      }",
        "    }",
        "  }",
    ]
