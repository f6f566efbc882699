"""C code of one fused kernel (a :class:`~.fusion.Kernel`): its versions (serial or
parallel, contiguous or strided, vector-multiple, short-row), each a ``_part`` function
over a range of rows or column chunks plus the entry the host calls.

Ops are emitted through their own declarations (``OpDef.c_kernel``, ``c_expr`` and the
role flags of ``disc_core.opdef.Fusion``); this module knows schedules, not ops.
"""

from __future__ import annotations

import re

from ..dtypes import DType
from ..ir import Op, Value
from ..opdef import RowSum
from ..symbolic import Expr, product
from .ccommon import (
    Constants,
    ModuleInfo,
    Symbols,
    combine,
    identity,
    scalar_constant,
    strides,
)
from .cexpr import ctype, literal
from .fusion import DATA, Aff, Kernel, NativeUnsupported, Quot, kdim


def entry_signature(fn: str, decls: list[str]) -> str:
    """A kernel entry as the host calls it (definitions and, across units, prototypes)."""
    return (f"DISC_ENTRY void {fn}({', '.join(decls)}, const int64_t *restrict S, "
            "int parallel)")


class KernelEmitter:
    def __init__(self, k: Kernel, syms: Symbols, consts: Constants):
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
        self.short = False  # emitting the version for short rows (fast_short)
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
            self.short = variant == "fast_short"
            fn = self.fn_name(variant)
            if variant == "fast_rows":
                out.append(self.row_split_kernel(fn, decls, names))
                continue
            body, extent = self.body()
            attr = ("DISC_SHORT_ROWS " if variant == "fast_short" else
                    "DISC_WIDE " if variant == "fast_vec" or self.wide_rows() else "")
            if epilogue:
                out.append(self.epilogue_kernel(fn, body, extent, decls, names, epilogue, attr))
                continue
            call = ", ".join(names + ["S"])
            out.append(f"{attr}DISC_PART static void {fn}_part({', '.join(decls)}, "
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

    def wide_rows(self) -> bool:
        """Do this kernel's general versions vectorize 512 bits wide on AVX-512
        (``DISC_WIDE``)? Column kernels (256-column chunks) and rows of a static multiple of
        16 elements do. Other rows keep the compiler's 256-bit tuning: a 16-wide loop
        leaves up to 15 elements to its epilogue (8 wide, then scalar), which made masked
        attention scores on rows of 34 to 300 elements up to 1.7x slower than 8-wide
        loops; rows that are a multiple of the width at run time take the ``fast_vec``
        version, which is wide."""
        if self.k.kind == "column":
            return True
        inner = self.k.space[-1] if self.n else Expr.const(1)
        return inner.is_const and inner.value % 16 == 0

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
                        attr: str = "DISC_WIDE ") -> str:
        """A row/loop kernel that also sums values over all its rows (fusion's column
        epilogue). Each block of rows accumulates into its own partial row (``colpart``),
        set up by the block itself; the entry adds the partials up in block order, so the
        result does not depend on which thread ran which block."""
        parts = [(j, f"colpart{j}", ctype(op.results[0].dtype)) for j, op in epilogue]
        pdecls = decls + [f"{t} *restrict {name}" for _, name, t in parts]
        cols = self.dim(self.k.space[-1])
        init = "".join(f"  for (int64_t c = 0; c < C; ++c) {name}[c] = "
                       f"{identity('sum', op.results[0].dtype)};\n"
                       for (_, name, _), (_, op) in zip(parts, epilogue))
        body = body.replace("  for (int64_t r = lo; r < hi; ++r) {", init +
                            "  for (int64_t r = lo; r < hi; ++r) {", 1)
        serial = ", ".join(names + [f"out{j}" for j, _, _ in parts] + ["S"])
        lines = [f"{attr}DISC_PART static void {fn}_part({', '.join(pdecls)}, "
                 f"const int64_t *restrict S, int64_t lo, int64_t hi) {{\n{body}}}\n",
                 f"{entry_signature(fn, decls)} {{",
                 f"  const int64_t extent = {extent}, C = {cols};",
                 # one block: the partial rows are the outputs themselves (the part never
                 # touches those outputs otherwise, so the restrict pointers do not alias)
                 f"  if (!parallel) {{ {fn}_part({serial}, 0, extent); return; }}",
                 "  const int64_t want = (int64_t)DISC_BLOCKS_PER_THREAD * omp_get_max_threads();",
                 "  const int64_t blocks = extent < want ? extent : want;",
                 # partial rows 64 elements apart at least: blocks never share a line
                 "  const size_t width = (size_t)((C > 0 ? C : 1) + 63) / 64 * 64;"]
        # partial rows on the caller's stack when small: a malloc/free pair per call next
        # to the arena's can make glibc trim and regrow its heap, page-faulting every call
        for _, name, t in parts:
            lines += [f"  const size_t {name}_bytes = (size_t)(blocks > 0 ? blocks : 1) * width"
                      f" * sizeof({t});",
                      f"  {t} *{name} = ({t} *)({name}_bytes <= DISC_STACK_PARTIALS ? "
                      f"DISC_STACK_ALLOC({name}_bytes) : disc_alloc({name}_bytes));"]
        call = ", ".join(names + [f"{name} + b * width" for _, name, _ in parts] + ["S"])
        lines += ["  #pragma omp parallel for schedule(dynamic, 1)",
                  "  for (int64_t b = 0; b < blocks; ++b)",
                  f"    {fn}_part({call}, extent * b / blocks, extent * (b + 1) / blocks);"]
        for (j, name, t), (_, op) in zip(parts, epilogue):
            lines += [*combine_partials(f"out{j}", name, t, "sum", op.results[0].dtype),
                      f"  if ({name}_bytes > DISC_STACK_PARTIALS) free({name});"]
        lines.append("}\n")
        return "\n".join(lines)

    # index arithmetic -----------------------------------------------------------------
    def dim(self, e: Expr) -> str:
        return self.syms.c(e)

    def read(self, op: Op, i: int) -> str:
        """C expression loading operand ``i`` of ``op`` (materialized) at the current point."""
        v = op.operands[i]
        lit = scalar_constant(v)
        if lit is not None:
            return lit
        if v.producer is not None and v.producer.opdef.has_trait("constant"):
            base = self.consts.array(v)
        else:
            base = self.pname[id(v)]
        m = self.k.reads[(op, i)]
        maybe = self.k.maybe_broadcast.get((op, i), {})
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
        st = strides(v.shape)
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
        self.helper_bufs: set[int] = set()
        self.rowbuf = self._row_buffers(reductions)
        lines = [f"  const int64_t C = {self.inner_extent()}; (void)C;"]
        for vid, name in self.rowbuf.items():  # per-thread row buffers (stitch fusion)
            t = ctype(self._value(vid).dtype)
            # on the stack when small: a malloc/free pair per block is a good part of a
            # call on one short row (the per-call overhead budget). A buffer only a row
            # helper reads is never malloc'ed: longer rows (NULL) keep the simd loop,
            # which needs none (a malloc of a long row per block would page-fault)
            big = "NULL" if vid in self.helper_bufs else f"disc_alloc({name}_bytes)"
            lines += [f"  const size_t {name}_bytes = (size_t)(C > 0 ? C : 1) * sizeof({t});",
                      f"  {t} *{name} = ({t} *)({name}_bytes <= DISC_STACK_ROWBUF ? "
                      f"DISC_STACK_ALLOC({name}_bytes) : {big});"]
        start, advance = self.row_walk()
        lines += ["  " + s for s in start]
        lines.append("  for (int64_t r = lo; r < hi; ++r) {")
        done: set[int] = set()
        self.cached: set[int] = set()  # row-buffered values ready for later phases
        pending = list(reductions)
        while pending:
            lines += ["    " + s for s in self.row_level(done)]
            group = self._ready_group(pending, done)
            pending = [r for r in pending if r not in group]
            lines += ["    " + s for s in self.reduction_phase(group, done)]
        lines += ["    " + s for s in self.row_level(done)]
        full = []
        for j, o in enumerate(k.outputs):
            if self._inner(o):
                full.append((j, o))
            else:  # one value per row (a reduction or something computed from them)
                lines.append(f"    out{j}[{self.offset(o, k.maps[o], {})}] = "
                             f"{self.var[id(o)]};")
        epilogue = {id(op.results[0]): op for op in k.column_epilogue}
        streamed = self.streamed_outputs(full)
        stores: list[str] = []  # the full-row loops, after the row's reductions
        for segment, lo, hi in self.inner_segments() if full else ():
            self.scope = set()
            self.segment = segment
            if streamed:  # one chunk [c0, c1) of the row (streamed_chunks)
                lo, hi = "c0", "c1"
            stores.append("#pragma omp simd")
            stores.append(f"for (int64_t c = {lo}; c < {hi}; ++c) {{")
            for j, o in full:
                red = epilogue.get(id(o))
                if red is not None:  # a column sum: into this block's partial row
                    body, var = self.operand_cone(red, 0, done)
                    stores += ["  " + s for s in body]
                    stores.append(f"  colpart{j}[c] += {var};")
                    continue
                body, var = self.compute_cone(o, done)
                stores += ["  " + s for s in body]
                target = (f"dst{j}[c - c0]" if streamed
                          else f"out{j}[{self.offset(o, k.maps[o], {})}]")
                stores.append(f"  {target} = {var};")
            stores.append("}")
            self.scope = set()
        self.segment = None
        if streamed:
            lines[1:1] = self.stream_setup(streamed, rows, "\n".join(lines + stores))
            lines += ["    " + s for s in self.streamed_chunks(streamed, stores)]
        else:
            lines += ["    " + s for s in stores]
        lines += ["    " + s for s in advance]
        lines.append("  }")
        for name in self.rowbuf.values():
            lines.append(f"  if ({name}_bytes > DISC_STACK_ROWBUF) free({name});")
        if streamed:
            lines.append("  if (disc_stream) disc_stream_fence();")
        if reductions and not self.short:
            head = lines.index("  for (int64_t r = lo; r < hi; ++r) {") + 1
            lines[head:head] = self.prefetch_rows("\n".join(lines[head:]))
        return "\n".join(lines) + "\n", self.dim(rows)

    def streamed_outputs(self, full: list[tuple[int, Value]]) -> list[tuple[int, str]]:
        """(output index, C type) of the outputs a call moving more bytes than the
        last-level cache writes with streaming stores (prelude ``disc_streams``): every
        full-row output, when each is written whole, in the kernel's own layout, by one
        loop over the row. Not for split concatenates (one loop per operand) or column-sum
        epilogues.

        Only the version that large contiguous calls take has the streamed form: the one
        for rows of a vector multiple (``fast_vec``), or ``fast`` in a kernel without that
        version. The short-row, remainder-row and strided versions keep their plain loop:
        a streamed form in each version made the C compiler's time on elementwise-heavy
        modules about 25% longer (it also kept gcc from merging the identical ``fast``
        and ``fast_short`` versions), for calls that are rare above the cache size."""
        k = self.k
        streaming_version = self.vec or not (self.short or self.strided
                                             or vector_speculation(k))
        if (not streaming_version or not full or k.split_concat is not None
                or k.column_epilogue or k.kind not in ("row", "loop") or self.n < 1):
            return []
        out = []
        for j, o in full:
            if self.offset(o, k.maps[o], {}) != "r*C + c":  # not in the kernel's layout
                return []
            out.append((j, ctype(o.dtype)))
        return out

    def stream_setup(self, streamed: list[tuple[int, str]], rows: Expr, body: str
                     ) -> list[str]:
        """Lines at the top of a ``_part``: whether this call streams (the bytes it moves,
        counting the inputs it reads in its own layout and its outputs, against the
        last-level cache), and a chunk buffer per streamed output."""
        names = row_layout_inputs(body)
        sizes = {name: ctype(v.dtype) for v, name in self.params}
        per_elem = " + ".join([f"sizeof({sizes[n]})" for n in names]
                              + [f"sizeof({t})" for _, t in streamed])
        lines = [f"  const int disc_stream = disc_streams({self.dim(rows)}, C, {per_elem});"]
        for j, t in streamed:
            lines.append(f"  {t} stream{j}[DISC_STREAM_CHUNK] __attribute__((aligned(64)));")
        return lines

    @staticmethod
    def streamed_chunks(streamed: list[tuple[int, str]], loop: list[str]) -> list[str]:
        """The row's store ``loop`` (over one chunk [c0, c1), writing ``dst<j>[c - c0]``)
        run over the row in chunks of DISC_STREAM_CHUNK columns. Each chunk writes through
        a destination pointer per output: the output row itself, or, in a call that
        streams, the stack buffer (in L1) that is then streamed to the output. One loop
        serves both, so the kernel's element computation is compiled once."""
        lines = ["for (int64_t c0 = 0; c0 < C; c0 += DISC_STREAM_CHUNK) {",
                 "  const int64_t c1 = C - c0 < DISC_STREAM_CHUNK ? C : c0 + DISC_STREAM_CHUNK;"]
        for j, t in streamed:
            lines.append(f"  {t} *restrict dst{j} = disc_stream ? stream{j} : out{j} + r*C + c0;")
        lines += ["  " + s for s in loop]
        lines.append("  if (disc_stream) {")
        for j, t in streamed:
            lines.append(f"    disc_stream_bytes(out{j} + r*C + c0, stream{j}, "
                         f"(size_t)(c1 - c0) * sizeof({t}));")
        lines += ["  }", "}"]
        return lines

    def prefetch_rows(self, body: str) -> list[str]:
        """Lines at the top of a row kernel's row loop that prefetch, two rows ahead, the
        rows of the inputs read in the kernel's own layout. A row kernel's first pass over
        a row is a reduction whose loads start the row; without this, each row's first
        loads wait on the last-level cache or memory before the hardware prefetcher,
        which does not cross the row boundary in time, catches up. Where the hardware
        prefetcher keeps up by itself (AMD Zen), the prelude's DISC_ROW_PREFETCH turns
        the lines off at compile time."""
        names = row_layout_inputs(body)
        return [f"    if (DISC_ROW_PREFETCH && r + {PREFETCH_ROWS} < hi) "
                f"disc_prefetch_row({name} + (r + {PREFETCH_ROWS})*C, C);" for name in names]

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
        st_in, st_out = strides(v.shape), strides(k.outputs[0].shape)
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
        axis = cat.opdef.split_axis(cat)
        out, start = [], cat.results[0].shape[axis] * 0
        for i, w in enumerate(cat.operands):
            end = start + w.shape[axis]
            out.append((i, self.dim(start), self.dim(end)))
            start = end
        return out

    def _value(self, vid: int) -> Value:
        for op in self.k.ops:
            for r in (*op.results, *op.operands):  # operands: a row buffer of an input
                if id(r) == vid:
                    return r
        raise KeyError(vid)

    def _row_buffers(self, reductions: list[Op]) -> dict[int, str]:
        """Reduction operands computed in the kernel and needed again by a later phase are
        kept in a row buffer instead of being recomputed (softmax's exp, for example)."""
        out: dict[int, str] = {}
        for red in reductions:
            v = red.operands[0]
            if id(v) in out:
                continue
            if red.opdef.reduction_kind(red) is not None and self._reused(v):
                out[id(v)] = f"rowbuf{len(out)}"
            elif (self.row_helper(red) is not None and self.contiguous_row(red) is None
                    and not self.split_sum(red)):
                out[id(v)] = f"rowbuf{len(out)}"  # computed, then reduced by the helper
                self.helper_bufs.add(id(v))
        return out

    def _reused(self, v: Value) -> bool:
        """Is ``v`` computed in this kernel (not a view) and read by more than one op?"""
        p = v.producer
        members = {id(op) for op in self.k.ops}
        if p is None or id(p) not in members or p.opdef.view:
            return False
        return sum(u is v for op in self.k.ops for u in op.operands) > 1

    def split_sum(self, red: Op) -> bool:
        """Is ``red`` a float sum over long rows of an operand this kernel computes with
        plain arithmetic, needed by no later phase? Its loop then computes and sums it
        in ``REDUCTION_WAYS`` parts of the row, an accumulator each (``simd_reductions``),
        instead of storing it in a row buffer for a helper pass: LayerNorm's variance,
        RMSNorm's sum of squares. Not maxima and minima, nor operands with math calls
        (softmax's exp): there, 768-wide rows ran about 1.6x slower that way than with the
        store and the helper, the parts' inlined calls and NaN flags outgrowing the
        vector registers; a single dependent chain of adds bounds only a cheap loop.

        Every value the operand's loop reads or computes has the sum's dtype: GCC 12.2
        (``-fno-trapping-math``, AVX2) miscompiled a four-part loop whose f32 terms were
        selected by an i64 compare (a one-hot row of cross-entropy's backward: its sums
        came out as garbage), while loops of one dtype were right; an operand with
        anything else in its loop (integers, booleans, conversions) keeps the helper."""
        inner = self.k.space[-1]
        v = red.operands[0]
        dtype = red.results[0].dtype
        if (red.opdef.reduction_kind(red) != "sum" or not red.results[0].dtype.is_float
                or self.k.kind != "row" or self.short or self._reused(v)
                or (inner.is_const and inner.value < ROW_HELPER_MIN)
                or self.contiguous_row(red) is not None):
            return False
        members = {id(op) for op in self.k.ops}
        stack, seen = [(red, 0)], set()
        while stack:
            op, i = stack.pop()
            w = op.operands[i]
            if w.dtype != dtype:
                return False
            if (op, i) in self.k.reads:
                continue
            p = w.producer
            if p is None or id(p) not in members or id(p) in seen or not self._inner(w):
                continue  # row-level values are computed once per row
            seen.add(id(p))
            if p.opdef.has_trait("math_call"):
                return False
            if not p.opdef.has_trait("shape"):
                stack += [(p, j) for j in range(len(p.operands))]
        return True

    def row_helper(self, red: Op) -> str | None:
        """The prelude function (``disc_row_sum_f32`` ...) that reduces this kernel's rows
        for ``red``, or None where the reduction stays in its ``omp simd`` loop: kinds other
        than sum/max/min, dtypes other than f32/f64, the short-row version and static rows
        under ``ROW_HELPER_MIN`` elements (a loop of a few vectors gains nothing from
        four accumulators)."""
        kind = red.opdef.reduction_kind(red)
        dt = red.results[0].dtype
        t = ctype(dt)
        if (kind not in ("sum", "max", "min") or t not in ("float", "double")
                or ctype(red.operands[0].dtype) != t or self.short or self.k.kind != "row"):
            return None
        inner = self.k.space[-1]
        if inner.is_const and inner.value < ROW_HELPER_MIN:
            return None
        return f"disc_row_{kind}_{'f32' if t == 'float' else 'f64'}"

    def contiguous_row(self, op: Op, i: int = 0) -> str | None:
        """Pointer to the start of the current row when ``op`` reads its operand ``i``
        (a reduction's: 0) straight from an input laid out as the kernel's space
        (``in0[r*C + c]``), else None."""
        if (op, i) not in self.k.reads or scalar_constant(op.operands[i]) is not None:
            return None
        m = re.fullmatch(r"(\w+)\[r\*C \+ c\]", self.read(op, i))
        return f"({m.group(1)} + r*C)" if m else None

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
        m = self.k.maps.get(v)
        return m is not None and (self.n - 1) in {kdim(e) for e in m}

    def _row_invariant(self, op: Op, i: int) -> bool:
        """Is operand ``i`` of ``op`` one value per row, computed in this kernel (a row-level
        value, or a broadcast of one along the row)? Operands read from memory are not
        known to be: a broadcast read of a per-column vector varies along the row."""
        members = {id(o) for o in self.k.ops}
        while True:
            if (op, i) in self.k.reads:
                return False
            v = op.operands[i]
            p = v.producer
            if p is None or id(p) not in members:
                return False
            if not self._inner(v):
                return True
            if not p.opdef.has_trait("broadcast"):
                return False
            op, i = p, 0

    def row_level(self, done: set[int]) -> list[str]:
        """Emit row-level ops (constant along the row) whose operands are available."""
        out = []
        for op in self.k.ops:
            r = op.results[0]
            if id(r) in done or op.opdef.has_trait("reduction") or self._inner(r):
                continue
            if all(self._available(op, i, done) for i in range(len(op.operands))):
                out.append(self.assign(op, r))
                done.add(id(r))
        return out

    def _available(self, op: Op, i: int, done: set[int]) -> bool:
        v = op.operands[i]
        return op.opdef.has_trait("shape") or id(v) in done or (op, i) in self.k.reads

    def _ready_group(self, pending: list[Op], done: set[int]) -> list[Op]:
        """The next pending reduction and every later one that needs no pending reduction's
        result either: they share one loop over the row (a LayerNorm backward's two
        gradient sums, a norm's mean beside an unrelated sum), one pass fewer per row
        each. Arg reductions keep a loop of their own."""
        first = pending[0]
        if first.opdef.arg_compare is not None:
            return [first]
        group = [first]
        waiting = {id(r.results[0]) for r in pending}
        for red in pending[1:]:
            if red.opdef.arg_compare is None and not self._needs(red, waiting, done):
                group.append(red)
        return group

    def _needs(self, red: Op, results: set[int], done: set[int]) -> bool:
        """Does computing ``red``'s operand in this kernel need one of ``results``?"""
        members = {id(op) for op in self.k.ops}
        seen: set[int] = set()
        stack = [(red, 0)]
        while stack:
            op, i = stack.pop()
            if (op, i) in self.k.reads:
                continue
            v = op.operands[i]
            if id(v) in results:
                return True
            p = v.producer
            if p is None or id(p) not in members or id(v) in done or id(p) in seen:
                continue
            seen.add(id(p))
            if not p.opdef.has_trait("shape"):
                stack += [(p, j) for j in range(len(p.operands))]
        return False

    def reduction_phase(self, reds: list[Op], done: set[int]) -> list[str]:
        """The reductions ``reds`` (independent of each other) over the row, keeping
        row-buffered operands for later phases.

        Sums, maxima and minima of f32/f64 rows of at least ``ROW_HELPER_MIN`` elements go
        through the prelude's multi-accumulator helpers (``row_helper``), over the input
        row or a row buffer one loop fills, except the sums of plain arithmetic a
        four-part loop computes and reduces at once (``split_sum``); the others share one
        ``omp simd`` reduction loop. A symbolic row length chooses at run time: short
        rows keep the loop, whose single accumulator costs nothing there, while the
        helpers' fixed work (combining four accumulators, the lane tree) would be most of
        theirs."""
        if reds[0].opdef.arg_compare is not None:
            return self.arg_phase(reds[0], done)
        helped = [red for red in reds
                  if self.row_helper(red) is not None and not self.split_sum(red)]
        results = {id(red.results[0]): red for red in reds}
        names: dict[int, str] = {}
        out: list[str] = []
        # helper-only row buffers this phase fills: absent (NULL) for long rows
        bufs = sorted({self.rowbuf[id(red.operands[0])] for red in helped
                       if id(red.operands[0]) in self.helper_bufs
                       and id(red.operands[0]) not in self.cached})
        if not helped:
            out += self.simd_reductions(reds, done, names, ways=self.reduction_ways(reds))
        elif not self.k.space[-1].is_const or bufs:  # both, chosen at run time
            for red in reds:
                dt = red.results[0].dtype
                self.counter += 1
                names[id(red)] = f"acc{self.counter}"
                out.append(f"{ctype(dt)} {names[id(red)]};")
            cached = set(self.cached)
            out.append(f"if ({' && '.join([f'C >= {ROW_HELPER_MIN}', *bufs])}) {{")
            out += ["  " + s for s in self.helper_reductions(reds, helped, done, names)]
            helper_cached, self.cached = self.cached, cached
            out.append("} else {")
            out += ["  " + s for s in self.simd_reductions(reds, done, names)]
            out.append("}")
            assert self.cached == helper_cached  # both branches fill the same row buffers
        else:
            out += self.helper_reductions(reds, helped, done, names)
        for vid, red in results.items():
            self.counter += 1
            name = f"r{self.counter}"
            out.append(f"const {ctype(red.results[0].dtype)} {name} = {names[id(red)]};")
            self.var[vid] = name
            done.add(vid)
        return out

    def reduction_ways(self, reds: list[Op]) -> int:
        """Parts of the row (an accumulator each) of the loop reducing ``reds``:
        ``REDUCTION_WAYS`` when every one is a ``split_sum``, else 1."""
        return REDUCTION_WAYS if reds and all(self.split_sum(r) for r in reds) else 1

    def helper_reductions(self, reds: list[Op], helped: list[Op], done: set[int],
                          names: dict[int, str]) -> list[str]:
        """``helped`` through the prelude helpers, the rest of ``reds`` in one loop that
        also fills the row buffers the helpers read."""
        rest = [red for red in reds if red not in helped]
        fill = [red for red in helped
                if self.contiguous_row(red) is None and id(red.operands[0]) not in self.cached]
        row_sums, out = self.row_sum_calls(reds, fill, done)
        # a row-sum helper reading its operand from memory needs no loop to fill its row
        fill = [red for red in fill if red not in row_sums or row_sums[red][1].fills]
        out += self.simd_reductions(rest, done, names, fill=fill,
                                    ways=self.reduction_ways(rest),
                                    fill_from={id(red.operands[0]): op
                                               for red, (op, _) in row_sums.items()})
        for red in row_sums:  # the helper's row is there for later phases, as a fill's
            if id(red.operands[0]) not in self.helper_bufs:
                self.cached.add(id(red.operands[0]))
        for red in helped:
            dt = red.results[0].dtype
            kind = red.opdef.reduction_kind(red)
            args = [self.contiguous_row(red) or self.rowbuf[id(red.operands[0])], "C"]
            if kind != "sum":
                args.append(identity(kind, dt))
            call = (row_sums[red][1].call if red in row_sums
                    else f"{self.row_helper(red)}({', '.join(args)})")
            if id(red) in names:
                out.append(f"{names[id(red)]} = {call};")
            else:
                self.counter += 1
                names[id(red)] = f"acc{self.counter}"
                out.append(f"const {ctype(dt)} {names[id(red)]} = {call};")
        return out

    def row_sum_calls(self, reds: list[Op], fill: list[Op], done: set[int]
                      ) -> tuple[dict[Op, tuple[Op, RowSum]], list[str]]:
        """The sums among ``fill`` whose operand's op has a row-sum helper
        (``OpDef.c_row_sum``: softmax's exp), each with that op and the helper's call, and
        the row-level statements the calls need. The helper computes the op's results
        into the operand's row buffer and sums them, from what the op reads where that is
        in memory; else the phase's loop stores the op's own operand in the buffer for
        it (``fill_from``). Not where another reduction of this phase reads the same
        operand (it would read the buffer before the call), nor for a row-level value."""
        members = {id(op) for op in self.k.ops}
        out: dict[Op, tuple[Op, RowSum]] = {}
        lines: list[str] = []
        for red in fill:
            v = red.operands[0]
            p = v.producer
            if (red.opdef.reduction_kind(red) != "sum" or (red, 0) in self.k.reads
                    or p is None or id(p) not in members or not self._inner(v)
                    or p.results[0].dtype != red.results[0].dtype
                    or sum(r.operands[0] is v for r in reds) > 1):
                continue
            ctx = _RowContext(self, done)
            row_sum = p.opdef.c_row_sum(p, self.rowbuf[id(v)], "C", ctx)
            if row_sum is not None:
                out[red] = (p, row_sum)
                lines += ctx.lines
        return out, lines

    def simd_reductions(self, reds: list[Op], done: set[int], names: dict[int, str],
                        fill: list[Op] = (), ways: int = 1,
                        fill_from: dict[int, Op] | None = None) -> list[str]:
        """One ``omp simd`` loop over the row reducing ``reds`` into accumulators (named
        in ``names``; declared here unless already), storing row-buffered operands, and
        the operands of ``fill`` into their row buffers (for an operand in ``fill_from``,
        the operand 0 of the op there instead: ``row_sum_calls``).

        With ``ways`` > 1 (sums only) the loop walks ``ways`` parts of the row at once,
        each a multiple of the vector width long and summed into an accumulator of its own
        (the operand's statements emitted once per part, ``fill`` stores in each); a second
        loop takes the rest of the row, and the parts' sums are added in a fixed order."""
        out: list[str] = []
        accs = []
        for red in reds:
            kind = red.opdef.reduction_kind(red)
            dt = red.results[0].dtype
            if id(red) in names:
                acc = names[id(red)]
                out.append(f"{acc} = {identity(kind, dt)};")
            else:
                self.counter += 1
                acc = names[id(red)] = f"acc{self.counter}"
                out.append(f"{ctype(dt)} {acc} = {identity(kind, dt)};")
            # max/min of floats: a plain (vectorizable) max plus a separate "saw a NaN"
            # flag instead of a NaN-aware select, which the compiler cannot turn into a
            # vector max
            split_nan = kind in ("max", "min") and dt.is_float
            if split_nan:
                out.append(f"int {acc}_nan = 0;")
            accs.append((red, kind, dt, acc, split_nan))
        if not accs and not fill:
            return out
        start = "0"
        if ways > 1:
            assert all(kind == "sum" for _, kind, *_ in accs)
            self.counter += 1
            part = f"part{self.counter}"
            for _, kind, dt, acc, _ in accs:
                out.append(f"{ctype(dt)} " + ", ".join(
                    f"{acc}_{w} = {identity(kind, dt)}" for w in range(1, ways)) + ";")
            out.append(f"const int64_t {part} = C / ({ways} * DISC_VEC_LANES) * "
                       "DISC_VEC_LANES;")
            parts = [[acc if w == 0 else f"{acc}_{w}" for _, _, _, acc, _ in accs]
                     for w in range(ways)]
            out.append(self._simd_pragma(accs * ways, [n for ns in parts for n in ns]))
            out.append(f"for (int64_t c_ = 0; c_ < {part}; ++c_) {{")
            for w in range(ways):
                offset = f" + {w} * {part}" if w else ""
                out.append(f"  {{ const int64_t c = c_{offset};")
                out += ["    " + s for s in self._reduce_step(accs, parts[w], done, fill,
                                                               set(), fill_from)]
                out.append("  }")
            out.append("}")
            start = f"{ways} * {part}"
        out.append(self._simd_pragma(accs, [acc for *_, acc, _ in accs]))
        out.append(f"for (int64_t c = {start}; c < C; ++c) {{")
        stored: set[int] = set()
        out += ["  " + s for s in self._reduce_step(accs, [acc for *_, acc, _ in accs], done,
                                                    fill, stored, fill_from)]
        out.append("}")
        self.cached |= stored
        for _, kind, dt, acc, split_nan in accs:
            for w in range(1, ways):
                out.append(combine(kind, dt, acc, f"{acc}_{w}"))
            if split_nan:
                out.append(f"if ({acc}_nan) {acc} = NAN;")
        return out

    @staticmethod
    def _simd_pragma(accs: list[tuple[Op, str, DType, str, bool]], names: list[str]) -> str:
        """The ``omp simd`` line of a loop reducing into ``names``, one per ``accs``
        entry."""
        ops = {"sum": "+", "prod": "*", "max": "max", "min": "min", "and": "&&", "or": "||"}
        pragmas = []
        for (_, kind, _, _, split_nan), name in zip(accs, names):
            if kind in ops:
                pragmas.append(f"reduction({ops[kind]}:{name})")
            if split_nan:
                pragmas.append(f"reduction(|:{name}_nan)")
        return " ".join(["#pragma omp simd", *pragmas])

    def _reduce_step(self, accs: list[tuple[Op, str, DType, str, bool]], names: list[str],
                     done: set[int], fill: list[Op], stored: set[int],
                     fill_from: dict[int, Op] | None = None) -> list[str]:
        """Statements for one column ``c`` of a reduction loop: the operands of ``fill``
        stored into their row buffers (or what ``fill_from`` says), then each reduction's
        operand computed, stored when a later phase reads it, and combined into its
        accumulator in ``names`` (stores recorded in ``stored``)."""
        out: list[str] = []
        saved = dict(self.var)
        self.scope = set()
        for red in fill:
            operand = id(red.operands[0])
            if operand in stored:
                continue
            src = (fill_from or {}).get(operand)
            body, x = (self.operand_cone(src, 0, done) if src is not None
                       else self.operand_cone(red, 0, done))
            out += body
            out.append(f"{self.rowbuf[operand]}[c] = {x};")
            stored.add(operand)
        # a helper-only buffer may be absent (long rows): later phases recompute
        stored -= self.helper_bufs
        for (red, kind, dt, _, split_nan), acc in zip(accs, names):
            body, x = self.operand_cone(red, 0, done)
            out += body
            operand = id(red.operands[0])
            buf = self.rowbuf.get(operand)
            if (buf is not None and operand not in self.cached and operand not in stored
                    and operand not in self.helper_bufs):
                out.append(f"{buf}[c] = {x};")
                stored.add(operand)
            if split_nan:
                cmp = ">" if kind == "max" else "<"
                out.append(f"{{ const {ctype(dt)} t = {x}; {acc} = t {cmp} {acc} ? t : "
                           f"{acc}; {acc}_nan |= t != t; }}")
            else:
                out.append(combine(kind, dt, acc, x))
        self.var = saved
        self.scope = set()
        return out

    def arg_phase(self, red: Op, done: set[int]) -> list[str]:
        """argmax/argmin: first occurrence wins; NaN beats everything (first NaN wins)."""
        x = red.operands[0]
        t = ctype(x.dtype)
        self.counter += 1
        best, at = f"best{self.counter}", f"at{self.counter}"
        cmp = red.opdef.arg_compare
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
        if (op, i) in self.k.reads:
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
            for j, w in enumerate(() if p.opdef.has_trait("shape") else p.operands):
                if p is self.k.split_concat and j != self.segment:
                    continue  # another inner loop computes that operand
                if (p, j) not in self.k.reads:
                    visit(w)
            out.append(p)

        visit(v)
        return out

    def operand_value(self, op: Op, i: int) -> str:
        if (op, i) in self.k.reads:
            return self.read(op, i)
        v = op.operands[i]
        if id(v) in self.cached:
            return f"{self.rowbuf[id(v)]}[c]"
        return self.var[id(v)]

    def assign(self, op: Op, r: Value) -> str:
        """``const T v<n> = <op's C expression>;`` for result ``r`` of ``op``."""
        if op is self.k.split_concat:  # this inner loop covers one operand's range only
            expr = self.operand_value(op, self.segment)
        elif (op.opdef.reciprocal_divisor and r.dtype.is_float and self._inner(r)
                and self._row_invariant(op, 1)):
            # x / s with s constant along the row (softmax's sum, a norm's scale):
            # multiply by 1/s, which the C compiler computes once per row. A vector
            # divide costs several multiplies; the result differs by at most an ulp.
            args = [self.operand_value(op, i) for i in range(len(op.operands))]
            expr = f"(({args[0]}) * ((({ctype(r.dtype)})1) / ({args[1]})))"
        else:
            text = op.opdef.c_kernel(op, _OpContext(self, op))
            if text is None:
                raise NativeUnsupported(f"{op.name} on {op.operands[0].dtype.short} has no "
                                        "C form")
            expr = text
        self.counter += 1
        name = f"v{self.counter}"
        self.var[id(r)] = name
        self.scope.add(id(r))
        return f"const {ctype(r.dtype)} {name} = {expr};"

    # column reductions ----------------------------------------------------------------
    def column_body(self, split_rows: bool = False) -> tuple[str, str]:
        """The column schedule: a ``_part`` over column chunks [lo, hi) of 256 columns,
        each summing all rows. ``split_rows``: the row-split schedule's ``_part`` instead,
        over rows [lo, hi) and every column chunk, into the block's partial row ``part<j>``.
        """
        k = self.k
        reds = [o.producer for o in k.outputs]
        a = self.col_axes = len(reds[0].opdef.red_axes(reds[0]))  # type: ignore
        rows = product(k.space[:a])
        cols = product(k.space[a:])
        self.var, self.scope = {}, set()
        init, body, store = [], [], []
        for j, red in enumerate(reds):
            kind = red.opdef.reduction_kind(red)  # type: ignore[union-attr]
            dt = red.results[0].dtype  # type: ignore[union-attr]
            init += [f"    {ctype(dt)} acc{j}[256];",
                     f"    for (int64_t c = c0; c < c1; ++c) acc{j}[c - c0] = "
                     f"{identity(kind, dt)};"]
            cone, x = self.operand_cone(red, 0, set())  # type: ignore[arg-type]
            body += cone + [combine(kind, dt, f"acc{j}[c - c0]", x)]
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
        parts = [(j, f"part{j}", ctype(r.results[0].dtype), r.opdef.reduction_kind(r))  # type: ignore
                 for j, r in enumerate(reds)]
        pdecls = decls + [f"{t} *restrict {name}" for _, name, t, _ in parts]
        cols = self.dim(product(self.k.space[self.col_axes:]))
        lines = [f"DISC_WIDE DISC_PART static void {fn}_part({', '.join(pdecls)}, "
                 f"const int64_t *restrict S, int64_t lo, int64_t hi) {{\n{body}}}\n",
                 f"{entry_signature(fn, decls)} {{",
                 "  (void)parallel;  /* chosen only for parallel work */",
                 f"  const int64_t R = {extent}, C = {cols};",
                 "  const int64_t want = (int64_t)DISC_BLOCKS_PER_THREAD * omp_get_max_threads();",
                 "  const int64_t blocks = R < 1 ? 1 : R < want ? R : want;",
                 "  const size_t width = (size_t)((C > 0 ? C : 1) + 63) / 64 * 64;"]
        for _, name, t, _ in parts:
            lines += [f"  const size_t {name}_bytes = (size_t)blocks * width * sizeof({t});",
                      f"  {t} *{name} = ({t} *)({name}_bytes <= DISC_STACK_PARTIALS ? "
                      f"DISC_STACK_ALLOC({name}_bytes) : disc_alloc({name}_bytes));"]
        call = ", ".join(names + [f"{name} + b * width" for _, name, _, _ in parts] + ["S"])
        lines += ["  #pragma omp parallel for schedule(dynamic, 1)",
                  "  for (int64_t b = 0; b < blocks; ++b)",
                  f"    {fn}_part({call}, R * b / blocks, R * (b + 1) / blocks);"]
        for j, name, t, kind in parts:
            dt = reds[j].results[0].dtype  # type: ignore[union-attr]
            lines += [*combine_partials(f"out{j}", name, t, kind, dt),
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


def combine_partials(out: str, parts: str, t: str, kind: str, dt: DType) -> list[str]:
    """Lines of a kernel entry that combine ``blocks`` partial rows of ``C`` elements,
    ``width`` apart, into ``out``, in block order (deterministic). Row by row, so each step
    is one vector loop along the columns: the column-by-column form (an inner loop over
    the blocks) stayed scalar and cost most of a small LayerNorm backward's kernel."""
    return [f"  {{ {t} *restrict o = {out}; const {t} *restrict p = {parts};",
            "    #pragma omp simd",
            "    for (int64_t c = 0; c < C; ++c) o[c] = p[c];",
            "    for (int64_t b = 1; b < blocks; ++b) {",
            "      #pragma omp simd",
            "      for (int64_t c = 0; c < C; ++c) "
            + combine(kind, dt, "o[c]", "p[b * width + c]"),
            "    }",
            "  }"]


def vector_speculation(k: Kernel) -> bool:
    """Does kernel ``k`` get a version for innermost extents that are a multiple of the
    vector width? Row and loop kernels whose innermost extent is symbolic (a static one the
    compiler already sees), with one inner loop over it (not split at concatenate
    boundaries, which need not be multiples); not tiled transposes, which have no row loop."""
    return (k.kind in ("row", "loop") and k.rank >= 1 and k.split_concat is None
            and not k.space[-1].is_const and transposed_innermost(k) is None)


def row_layout_inputs(body: str) -> list[str]:
    """Names of the inputs a row kernel's C ``body`` reads in the kernel's own layout
    (``in<i>[r*C + c]``): the rows it prefetches and the bytes a streamed call counts."""
    return sorted(set(re.findall(r"\b(in\d+)\[r\*C \+ c\]", body)))


#: rows at least this long reduce through the prelude's helpers (four accumulators of up
#: to 16 lanes); shorter ones keep the one-accumulator 'omp simd' loop, faster there
#: (masked attention scores on rows of 34: 25 us against 34 us with the helpers)
ROW_HELPER_MIN = 64
#: parts of the row (an accumulator each) of a loop that computes and sums an operand
#: (``split_sum``): a float add's latency is four cycles, its throughput two per cycle
REDUCTION_WAYS = 4
#: how many rows ahead a row kernel with reductions prefetches its input rows
PREFETCH_ROWS = 2


#: side of the square tiles of a transpose that moves the innermost dim (16 floats: one
#: cache line of input per tile column)
TRANSPOSE_TILE = 16


def transposed_innermost(k: Kernel) -> tuple[Value, tuple[int, ...]] | None:
    """(input, dim map) when loop kernel ``k`` only transposes a materialized input and its
    innermost dim comes from another input dim (so a row reads the input strided): such a
    kernel is emitted in tiles (``tiled_transpose_body``). None for anything else."""
    if (k.kind != "loop" or k.speculative or k.column_epilogue or k.split_concat is not None
            or len(k.ops) != 1 or not k.ops[0].opdef.view or len(k.outputs) != 1
            or k.rank < 2):
        return None
    op, out = k.ops[0], k.outputs[0]
    v = op.operands[0]
    m = k.reads.get((op, 0))
    if (out is not op.results[0] or len(k.inputs) != 1 or k.inputs[0] is not v or m is None
            or any(type(d) is not int for d in m) or sorted(m) != list(range(k.rank))
            or tuple(k.maps.get(out, ())) != tuple(range(k.rank))
            or tuple(out.shape) != tuple(k.space) or m[-1] == k.rank - 1):
        return None
    return v, tuple(m)




class _RowContext:
    """The :class:`~disc_core.opdef.RowContext` an op's ``c_row_sum`` sees: the emitter at
    the start of a reduction phase, inside the row loop (``done``: the values computed so
    far). Row-level values it hands out are computed by ``lines``, which the phase emits
    before its loops."""

    def __init__(self, emitter: KernelEmitter, done: set[int]):
        self.e, self.done = emitter, done
        self.lines: list[str] = []

    def row(self, op: Op, i: int) -> str | None:
        e = self.e
        if (op, i) in e.k.reads:
            return e.contiguous_row(op, i)
        v = op.operands[i]
        return e.rowbuf[id(v)] if id(v) in e.cached else None

    def row_scalar(self, op: Op, i: int) -> str | None:
        e = self.e
        if not e._row_invariant(op, i):
            return None
        saved, scope = dict(e.var), e.scope
        e.scope = set()
        body, x = e.compute_cone(op.operands[i], self.done)
        e.var, e.scope = saved, scope  # the lines below are the row's, not a loop's
        self.lines += body
        return x

    def producer(self, v: Value) -> Op | None:
        p = v.producer
        return p if p is not None and any(p is op for op in self.e.k.ops) else None


class _OpContext:
    """The :class:`~disc_core.opdef.KernelContext` an op's ``c_kernel`` sees: the emitter,
    at its current loop point, for one op."""

    def __init__(self, emitter: KernelEmitter, op: Op):
        self.e, self.op = emitter, op

    def operand(self, i: int) -> str:
        return self.e.operand_value(self.op, i)

    def read_at(self, i: int, index: str) -> str:
        self.e._data_index = index
        return self.e.read(self.op, i)

    def index(self, dim: int) -> str:
        return self.e.index(self.e.k.maps[self.op.results[0]][dim])

    def dim(self, e: Expr) -> str:
        return self.e.dim(e)

    def ctype(self, dt: DType) -> str:
        return ctype(dt)

    def literal(self, value: float | int | bool, dt: DType) -> str:
        return literal(value, dt)

    def uses(self, v: Value) -> list[tuple[Op, int]] | None:
        if any(out is v for out in self.e.k.outputs):
            return None
        return [(op, j) for op in self.e.k.ops for j, w in enumerate(op.operands) if w is v]
