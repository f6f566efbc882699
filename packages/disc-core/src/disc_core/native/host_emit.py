"""The host entry point of a native module (``disc_run``): binds symbols from the input
shapes, checks dims, sizes outputs and the arena of intermediate buffers (slots reused by
liveness), then runs the plan's steps in order, timing each when profiling."""

from __future__ import annotations

from collections.abc import Callable

from disc_runtime.abi import ABI_VERSION, TABLE_ALLOC_SOURCE

from ..ir import Graph, Value
from ..shape_facts import Eq, ProductEq
from ..symbolic import Expr, product, smax
from .ccommon import PAR_MIN, Constants, ModuleInfo, Symbols
from .cexpr import ctype
from .fusion import (
    Alias,
    FusionPlan,
    Kernel,
    LibraryCall,
    NativeUnsupported,
    ScanCall,
    ScatterCall,
    step_values,
)
from .gemm_epilogue import finish_epilogue, setup_epilogue, sum_buffers, sums_guard
from .gemm_prologue import setup_prologue
from .kernel_emit import vector_speculation
from .library import emit_gemm, emit_scan, emit_scatter, is_gemm, packable_weight


def _is_constant(v: Value) -> bool:
    """A constant's value: static data of the module, never a buffer of its own."""
    return v.producer is not None and v.producer.opdef.has_trait("constant")


def _undefined(d: Expr, syms: Symbols) -> str | None:
    """C condition: ``d`` divides by zero at run time (None when it cannot)."""
    divs = d.divisions()
    return " || ".join(f"{syms.c(f.divisor)} == 0" for f in divs) if divs else None


def _clamped(d: Expr, syms: Symbols) -> str:
    """C value of a dim as a size: one that divides by zero (legal only in an empty tensor,
    checked by _division_checks) is at least 0, as in symbolic.evaluate_shape."""
    u = _undefined(d, syms)
    return syms.c(d) if u is None else f"(({u}) ? disc_max({syms.c(d)}, 0) : {syms.c(d)})"


def _division_checks(graph: Graph, syms: Symbols) -> list[str]:
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
                    out.append(_zero_divisor_check(
                        syms, den, empty,
                        f"op #{n} ({op.name}): dim {j} of the result [{text}] is {d}, which "
                        f"divides by zero ({den} = 0) while no other dim is 0; expected "
                        f"{den} != 0 (a division by zero is only allowed in an empty tensor)"))
    return out


def _zero_divisor_check(syms: Symbols, den: Expr, empty: str, message: str,
                        args: str = "") -> str:
    """C: fail with ``message`` (a format, ``args`` its arguments) when divisor ``den`` is 0
    and the C condition ``empty`` (the tensor has no elements) does not hold."""
    return f"  if ({syms.c(den)} == 0 && !({empty})) DISC_FAIL(\"{message}\"{args});"


def _c_text(x: object) -> str:
    """``x`` as text inside a C format string literal."""
    return str(x).replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")


def _fact_checks(graph: Graph, syms: Symbols) -> list[str]:
    """Fail cleanly when a shape fact an op states does not hold for this call.

    Verification accepts a symbolic reshape ([s0, 3] -> [2, s0 // 2, 3]), dot_general
    contraction, concatenate or elementwise operand dims that are not provably equal, and
    records the equality as a fact (``OpDef.facts``: ``Eq``, or ``ProductEq`` for a
    reshape's element counts) that the shape-constraint analysis, shape propagation and
    every kernel then take as true: a kernel sized from one side reads the other's buffer
    as if it had that many elements, a silent wrong answer (or an out-of-bounds read)
    where the reference engine fails. So each such fact is checked here, with the op and
    both values named, before any buffer is allocated or kernel runs. A fact whose sides
    are structurally equal (a reshape that provably preserves its element count, dims that
    shape propagation already unified and the input checks enforce) is never stated, so it
    costs nothing. ``Divisible`` facts need no check: ops derive them from a ``ProductEq``
    that is checked (symbol hints are the caller's promise, as elsewhere)."""
    out: list[str] = []
    seen: set[tuple[Expr, Expr]] = set()

    def count(shape: tuple[Expr, ...]) -> str:
        return " * ".join(f"({_clamped(d, syms)})" for d in shape) or "1"

    for n, op in enumerate(graph.ops):
        for f in op.opdef.facts(op):
            if isinstance(f, ProductEq):
                a, b = product(f.lhs), product(f.rhs)
                if a == b or (a, b) in seen:
                    continue
                seen.add((a, b))
                lhs, rhs = _shape_text(f.lhs), _shape_text(f.rhs)
                out.append(
                    f"  {{ const int64_t n0 = {count(f.lhs)}, n1 = {count(f.rhs)};\n"
                    f"    if (n0 != n1) DISC_FAIL(\"op #{n} ({op.name}): the operand "
                    f"{_c_text(lhs)} has %lld elements but the result {_c_text(rhs)} has "
                    f"%lld; expected equal element counts\", (long long)n0, (long long)n1); }}")
            elif isinstance(f, Eq):
                a, b = f.a, f.b
                if a == b or (a, b) in seen:
                    continue
                seen.add((a, b))
                ca, cb = _clamped(a, syms), _clamped(b, syms)
                out.append(
                    f"  if (({ca}) != ({cb})) DISC_FAIL(\"op #{n} ({op.name}): dims "
                    f"{_c_text(a)} = %lld and {_c_text(b)} = %lld must be equal\", "
                    f"(long long)({ca}), (long long)({cb}));")
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


#: The arena of intermediate buffers, kept per thread between calls and grown when a call
#: needs more. A fresh ``malloc`` per call is, past glibc's mmap threshold (32 MB at
#: most), a fresh mapping whose pages the kernel zeroes on first touch, every call: a
#: Keras attention train step at sequence length 263 spent ~15 ms of ~65 in page faults.
#: Per thread, so concurrent calls never share one; freed when the thread exits (the
#: key's destructor), or left to the process when the module is unloaded first.
_ARENA_SOURCE = r"""
#include <pthread.h>
typedef struct { char *data; size_t cap; } disc_arena_t;
static pthread_key_t disc_arena_key;
static pthread_once_t disc_arena_once = PTHREAD_ONCE_INIT;
static int disc_arena_key_ok = 0;
static void disc_arena_release(void *p) {
  disc_arena_t *a = (disc_arena_t *)p;
  if (a) { free(a->data); free(a); }
}
static void disc_arena_init(void) {
  disc_arena_key_ok = pthread_key_create(&disc_arena_key, disc_arena_release) == 0;
}
__attribute__((destructor)) static void disc_arena_unload(void) {
  /* no destructor may run after the code is gone: forget the key (a thread's buffer
     then stays with the process) */
  if (disc_arena_key_ok) { disc_arena_key_ok = 0; pthread_key_delete(disc_arena_key); }
}
static char *disc_arena(size_t need) {
  pthread_once(&disc_arena_once, disc_arena_init);
  if (!disc_arena_key_ok) return NULL;
  disc_arena_t *a = (disc_arena_t *)pthread_getspecific(disc_arena_key);
  if (!a) {
    a = (disc_arena_t *)calloc(1, sizeof *a);
    if (!a || pthread_setspecific(disc_arena_key, a) != 0) { free(a); return NULL; }
  }
  if (need > a->cap || !a->data) {  /* (a first call may need 0 bytes: still not NULL) */
    free(a->data);
    a->data = (char *)disc_alloc(need);  /* every slot is a multiple of 64 bytes: all aligned */
    a->cap = a->data ? need : 0;
  }
  return a->data;
}
"""


def emit_host(graph: Graph, plan: FusionPlan, syms: Symbols, consts: Constants,
               info: ModuleInfo) -> str:
    roots = _alias_roots(plan)

    def group(v: Value) -> Value:
        return roots.get(id(v), v)

    L: list[str] = []
    w = L.append
    w(f"int64_t disc_abi_version(void) {{ return {ABI_VERSION}; }}")
    w(f"int64_t disc_num_symbols(void) {{ return {len(syms.index)}; }}")
    # outputs the runtime allocated ahead of the call (it knew their shapes): no callback
    w(TABLE_ALLOC_SOURCE)
    w(_ARENA_SOURCE)
    n_syms = max(len(syms.index), 1)
    L.extend(_emit_bind(graph, syms))
    L.extend(_emit_output_dims(graph, syms, n_syms))
    # GEMMs whose rhs is a module input laid out as a weight: a packed-weight slot each
    # (csrc/gemm.c, Packed weights), zero-initialized, alive as long as the module
    input_index = {id(v): i for i, v in enumerate(graph.inputs)}
    pack_of: dict[int, tuple[int, int]] = {}
    for s in plan.steps:
        if isinstance(s, LibraryCall) and is_gemm(s.op):
            index = packable_weight(s.op, input_index)
            if index is not None:
                pack_of[id(s.op)] = (len(pack_of), index)
    info.pack_inputs = sorted({index for _, index in pack_of.values()})
    if pack_of:
        w(f"static disc_pack_slot disc_pack_slots[{len(pack_of)}];")
    w("int64_t disc_pack_count(void) {")
    w("  int64_t n = 0;")
    if pack_of:
        w(f"  for (int i = 0; i < {len(pack_of)}; ++i) "
          "n += __atomic_load_n(&disc_pack_slots[i].packs, __ATOMIC_RELAXED);")
    w("  return n;")
    w("}")
    w("int64_t disc_run(void *const *in_data, const int64_t *in_shapes, int64_t n_in, "
      "const disc_env *env, char *err, int64_t errlen) {")
    w(f"  int64_t S[{n_syms}] = {{0}};")
    w("  char *arena = NULL; (void)S;")
    sum_decls, sum_frees = sum_buffers(plan)
    L.extend(sum_decls)
    w("  const int prof = env->profile != NULL;")
    w("  int64_t prof_t = prof ? disc_now_ns() : 0;")
    w("  if (disc_bind(in_shapes, n_in, S, err, errlen)) goto fail;")
    # storage names
    storage: dict[int, str] = {}
    for i, v in enumerate(graph.inputs):
        storage[id(v)] = f"((char *)in_data[{i}])"
    out_ids: dict[int, int] = {}
    copies: list[tuple[Value, int]] = []
    for i, v in enumerate(graph.outputs):
        g = group(v)
        if id(g) in storage or id(g) in out_ids or _is_constant(g):
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
        produced = step_values(s)[1]
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
        w(f"  arena = disc_arena((size_t)({total}));")
        w("  if (!arena) DISC_FAIL(\"out of memory for intermediate buffers\");")
        acc = "arena"
        for sl in range(len(slots)):
            w(f"  char *slot{sl} = {acc};")
            acc = f"slot{sl} + slot{sl}_bytes"
        for gid, sl in slot_of.items():
            storage[gid] = f"slot{sl}"

    def ptr(v: Value) -> str:
        g = group(v)
        if _is_constant(g):
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
            own = s.op.opdef.library_call(s.op, ptr, syms)
            if own is not None:  # an op with its own library code (fused attention)
                L.extend(own.lines)
                (info.linked_helpers if own.linked else info.helpers).update(own.helpers)
            else:
                pre: list[str] = []
                epi = pro = None
                if s.prologue is not None:
                    lines, pro = setup_prologue(s, ptr, syms, info)
                    pre += lines
                guard = sums_guard(s, syms)
                if guard is not None:  # partial rows too large: GEMM, then the kernel
                    pre += [*guard[0], f"  if ({guard[1]}) {{"]
                if s.epilogue is not None:
                    lines, epi = setup_epilogue(s, ptr, syms, info)
                    pre += lines
                post = finish_epilogue(s, ptr) if s.epilogue is not None else []
                pack = pack_of.get(id(s.op))
                L.extend(["  {", *pre, *emit_gemm(s.op, ptr, syms, epi, pro, pack), *post])
                if guard is not None and s.epilogue is not None:
                    L.extend(["  } else {", *emit_gemm(s.op, ptr, syms, None, pro, pack)])
                    _emit_launch(s.epilogue, ptr, syms, info, w)
                    w("  }")
                w("  }")
                info.gemm_dtypes.add(s.op.operands[0].dtype)
        elif isinstance(s, ScatterCall):
            L.extend(emit_scatter(s.op, ptr, syms))
        elif isinstance(s, ScanCall):
            L.extend(emit_scan(s.op, ptr, syms))
        else:
            _emit_launch(s, ptr, syms, info, w)
        w(f"  DISC_PROFILE({slot});")
    for v, i in copies:
        nbytes = syms.c(product(v.shape) * v.dtype.itemsize)
        w(f"  memcpy(out{i}, {ptr(v)}, (size_t)({nbytes}));")
    w("  DISC_PROFILE(1);")
    w("  if (prof) __atomic_fetch_add(&env->profile[0], 1, __ATOMIC_RELAXED);")
    w("  return 0;")
    w("fail:")
    L.extend(sum_frees)
    w("  (void)arena;")
    w("  return 1;")
    w("}")
    return "\n".join(L) + "\n"



def _emit_bind(graph: Graph, syms: Symbols) -> list[str]:
    """``disc_bind``: the symbols' values from the input shapes, and every check on them
    (input count, static and expression dims, divisions by zero, shape facts). Shared by
    ``disc_run`` and ``disc_output_dims``, so the sizes a caller allocates from are checked
    exactly as a call checks them."""
    L: list[str] = [
        "static int disc_bind(const int64_t *in_shapes, int64_t n_in, int64_t *S, char *err, "
        "int64_t errlen) {",
        "  (void)S; (void)in_shapes;",
        f"  if (n_in != {len(graph.inputs)}) DISC_FAIL(\"expected {len(graph.inputs)} inputs\");",
    ]
    bound: set[str] = set()
    off = 0
    checks: list[str] = []
    dims_checked: list[tuple[int, str, str]] = []  # (in_shapes index, expected, message)
    for i, v in enumerate(graph.inputs):
        for j, d in enumerate(v.shape):
            where = f"input #{i} dim {j}"
            if d.is_symbol and d.symbol_name not in bound:
                L.append(f"  S[{syms.index[d.symbol_name]}] = in_shapes[{off}];")
                bound.add(d.symbol_name)
            else:
                want = syms.c(d)
                if d.divisions():  # legal only in an empty input, where it counts as 0
                    others = [f"in_shapes[{off - j + o}] == 0" for o in range(v.rank) if o != j]
                    for f in d.divisions():
                        den = f.divisor
                        checks.append(_zero_divisor_check(
                            syms, den, " || ".join(others) or "0",
                            f"{where} is %lld, but {d} divides by zero ({den} = 0) and the "
                            f"input is not empty; expected {den} != 0",
                            f", (long long)in_shapes[{off}]"))
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
    L.extend(_fact_checks(graph, syms))
    L += ["  return 0;", "fail:", "  return 1;", "}"]
    return L


def _emit_output_dims(graph: Graph, syms: Symbols, n_syms: int) -> list[str]:
    """``disc_output_dims``: every output's rank, then its dims, for these input shapes,
    without running anything: what a caller needs to allocate the outputs before a call
    on dims it has not seen (every output's shape is an expression of the input dims;
    ``disc_run`` allocates them from the same expressions). Fails as ``disc_run`` would on
    inputs it rejects."""
    total = sum(1 + v.rank for v in graph.outputs)
    L = [
        "int64_t disc_output_dims(const int64_t *in_shapes, int64_t n_in, int64_t *out_dims, "
        "int64_t cap, char *err, int64_t errlen) {",
        f"  int64_t S[{n_syms}] = {{0}};",
        "  if (disc_bind(in_shapes, n_in, S, err, errlen)) return 1;",
        f"  if (cap < {total}) {{ snprintf(err, (size_t)errlen, \"room for %lld output dims, "
        f"expected {total}\", (long long)cap); return 1; }}",
        "  (void)out_dims;",
    ]
    k = 0
    for v in graph.outputs:
        L.append(f"  out_dims[{k}] = {v.rank};")
        k += 1
        for d in v.shape:
            L.append(f"  out_dims[{k}] = {_clamped(d, syms)};")
            k += 1
    L += ["  return 0;", "}"]
    return L

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
    if kind == "library" and not is_gemm(op):  # a library op of its own (oneDNN conv...)
        name = op.name
    n = sum(1 for e in done if e["kind"] == kind)
    if isinstance(step, LibraryCall) and (step.epilogue or step.prologue) is not None:
        shape = " x ".join(_shape_text(tuple(v.shape)) for v in op.operands[:2])
        fused = [k for k in (step.prologue, step.epilogue) if k is not None]
        return {"name": f"gemm{n}", "kind": kind,
                "ops": [op.name] + [o.name for k in fused for o in k.ops], "shape": shape}
    shape = (" x ".join(_shape_text(tuple(v.shape)) for v in op.operands[:2])
             if kind == "library" else _shape_text(tuple(op.results[0].shape)))
    return {"name": f"{name}{n}", "kind": kind, "ops": [op.name], "shape": shape}


def _emit_launch(k: Kernel, ptr: Callable[[Value], str], syms: Symbols, info: ModuleInfo,
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
        for (op, i), maybe in k.maybe_broadcast.items():
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


