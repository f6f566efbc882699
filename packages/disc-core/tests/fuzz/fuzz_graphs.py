"""Random core graphs for fuzzing the native engine against the reference interpreter.

Why a second generator (tests/graph_strategies.py exists): that one checks shape rules and
the text form on small f32 graphs. This one aims at what the native engine plans and emits:
several reductions of different depth over one space (row and column reductions, a
reduction feeding a broadcast back into an elementwise chain: softmax / layernorm-like
stitch patterns and their backward shapes), GEMMs, data movement folded into indexing,
values read by several consumers, multi-output graphs, every dtype the engine compiles.

Numerical hygiene, so that a mismatch means a bug and not rounding:

* every float value carries an ``exact`` flag: true when both engines must compute it
  bit for bit (inputs, data movement, neg/abs, max/min, select and casts of exact values).
  Discontinuous ops (floor, ceil, round, sign, compare, fmod, float-to-int casts) read
  only exact values: a 1-ulp difference (an FMA contraction, a reduction order, a libm
  ulp) before a discontinuity is not a bug, and would be reported as one;
* division divides by ``|y| + 1``, logs and roots read ``|x|`` (``+ 1``), so rounding is
  never amplified by a near-zero denominator;
* float-to-int conversion only reads exact values, whose magnitude the inputs bound (out
  of range is undefined).

A case is a graph plus 4 concrete bindings of its symbols (sizes 0, 1, odd, and one large
enough for the parallel code paths), none of which the compiler sees.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

from disc_core.builder import GraphBuilder
from disc_core.dtypes import DType
from disc_core.ir import Graph, Value
from disc_core.symbolic import Expr

SYMBOLS = ("B", "S", "H")
STATIC = (1, 3, 5)

#: float dtypes the native engine compiles, and the half types it does not (those graphs
#: must fall back to the interpreter with the reason recorded, and still be right)
NATIVE_FLOATS = ("f32", "f64")
HALF_FLOATS = ("f16", "bf16")
INTS = ("i8", "i16", "i32", "i64", "u8")

F_UNARY = ("neg", "abs", "exp", "tanh", "logistic", "sin", "cos", "erf", "expm1")
F_UNARY_POS = ("sqrt", "log1p", "rsqrt", "log")  # read |x| (+ 1 for log and rsqrt)
F_UNARY_EXACT = ("floor", "ceil", "round", "round_even", "sign")
F_BINARY = ("add", "sub", "mul", "max", "min", "div")
I_UNARY = ("neg", "abs", "sign", "not")
I_BINARY = ("add", "sub", "mul", "div", "rem", "max", "min", "and", "or", "xor")
B_BINARY = ("and", "or", "xor", "max", "min")
EXACT_OPS = {"neg", "abs", "max", "min", "floor", "ceil", "round", "round_even", "sign"}


@dataclass
class Pool:
    """The values a random program may read, with what the generator knows of them."""

    values: list[Value] = field(default_factory=list)
    exact: dict[int, bool] = field(default_factory=dict)

    def add(self, v: Value, exact: bool) -> Value:
        self.values.append(v)
        self.exact[id(v)] = exact or not v.dtype.is_float
        return v

    def note(self, v: Value, exact: bool) -> Value:
        """Know ``v`` (a broadcast made to combine values) without offering it to ops."""
        self.exact[id(v)] = exact or not v.dtype.is_float
        return v

    def is_exact(self, v: Value) -> bool:
        return self.exact[id(v)]

    def of(self, dtype: DType, *, exact: bool = False, min_rank: int = 0) -> list[Value]:
        return [v for v in self.values if v.dtype == dtype and v.rank >= min_rank
                and (not exact or self.is_exact(v))]


@dataclass
class FuzzCase:
    graph: Graph
    bindings: list[dict[str, int]]
    seed: int

    def describe(self) -> str:
        return f"bindings {self.bindings}, input seed {self.seed}\n{self.graph}"


def embedding(small: tuple[Expr, ...], big: tuple[Expr, ...]) -> list[int] | None:
    """broadcast_dimensions placing ``small``'s dims in ``big`` in order (a static 1 may
    stand for any dim), or None."""
    dims: list[int] = []
    j = 0
    for d in small:
        while j < len(big) and not (big[j] == d or d == Expr.const(1)):
            j += 1
        if j == len(big):
            return None
        dims.append(j)
        j += 1
    return dims


class _Gen:
    """One random program, drawn choice by choice (hypothesis shrinks the choices)."""

    def __init__(self, draw, dtype: str, max_ops: int):
        self.draw = draw
        self.b = GraphBuilder("fuzz")
        for s in SYMBOLS:
            self.b.symbol(s)
        self.dtype = DType(dtype)
        self.max_ops = max_ops
        self.pool = Pool()
        self.n_inputs = 0

    # -- helpers ---------------------------------------------------------------------------
    def pick(self, seq):
        return self.draw(st.sampled_from(list(seq)))

    def chance(self, p: float) -> bool:
        return self.draw(st.integers(0, 99)) < int(p * 100)

    def input(self, dtype: DType, shape: list[Expr]) -> Value:
        self.n_inputs += 1
        return self.pool.add(self.b.input(f"in{self.n_inputs}", dtype, shape), True)

    def const(self, value, dtype: DType) -> Value:
        return self.b.constant(np.asarray(value, dtype=dtype.np))

    def splat(self, value, like: Value) -> Value:
        return self.b.broadcast_in_dim(self.const(value, like.dtype), shape=list(like.shape),
                                       broadcast_dimensions=[])

    def bound_dims(self) -> list[Expr]:
        syms = {d for v in self.b.graph.inputs for d in v.shape if d.is_symbol}
        return sorted(syms, key=str) + [Expr.const(c) for c in STATIC]

    def to_shape(self, w: Value, shape: tuple[Expr, ...]) -> Value | None:
        if w.shape == shape:
            return w
        dims = embedding(w.shape, shape)
        if dims is None:
            return None
        return self.pool.note(self.b.broadcast_in_dim(w, shape=list(shape),
                                                      broadcast_dimensions=dims),
                              self.pool.is_exact(w))

    def partner(self, v: Value, *, exact: bool = False) -> Value:
        """Another value of v's dtype broadcast to v's shape (v itself when none fits)."""
        cands = [w for w in self.pool.of(v.dtype, exact=exact) if w.rank <= v.rank
                 and embedding(w.shape, v.shape) is not None]
        w = self.pick(cands) if cands else v
        return self.to_shape(w, v.shape) or v

    # -- the program -----------------------------------------------------------------------
    def inputs(self) -> None:
        rank = self.draw(st.integers(1, 3))
        syms = [Expr.sym(s) for s in SYMBOLS]
        space = []
        for k in range(rank):
            space.append(syms[k] if self.chance(0.8) else Expr.const(self.pick(STATIC)))
        if not any(d.is_symbol for d in space):
            space[-1] = syms[0]
        self.space = space
        self.input(self.dtype, space)
        for _ in range(self.draw(st.integers(0, 2))):
            keep = [d for d in space if self.chance(0.6)] or [space[-1]]
            dt = self.dtype if self.chance(0.8) else DType(self.pick(
                ("bool", "i32") if self.dtype.is_float else ("bool",)))
            self.input(dt, keep)

    def step(self) -> None:
        kinds = ["unary", "binary", "binary", "reduce", "reduce_bcast", "broadcast",
                 "reshape", "transpose", "slice", "concat", "pad", "reverse", "select",
                 "convert", "stitch", "iota"]
        if self.dtype.value in NATIVE_FLOATS:
            kinds += ["dot", "stitch", "reduce_bcast"]
        kind = self.pick(kinds)
        getattr(self, "op_" + kind)()

    def main_value(self, min_rank: int = 0) -> Value:
        cands = self.pool.of(self.dtype, min_rank=min_rank) or [
            v for v in self.pool.values if v.rank >= min_rank] or self.pool.values
        return self.pick(cands)

    def any_value(self, min_rank: int = 0) -> Value:
        cands = [v for v in self.pool.values if v.rank >= min_rank] or self.pool.values
        return self.pick(cands)

    def op_unary(self) -> None:
        v = self.any_value()
        dt, b = v.dtype, self.b
        if dt.is_float:
            exact = self.pool.is_exact(v)
            kind = self.pick(("plain", "pos") + (("exact",) if exact else ()))
            if kind == "plain":
                name = self.pick(F_UNARY)
                self.pool.add(b.op(name, v), exact and name in EXACT_OPS)
            elif kind == "pos":
                name = self.pick(F_UNARY_POS)
                a = b.abs(v)
                if name in ("log", "rsqrt"):
                    a = b.add(a, self.splat(1.0, v))
                self.pool.add(b.op(name, a), False)
            else:
                self.pool.add(b.op(self.pick(F_UNARY_EXACT), v), True)
        elif dt.is_bool:
            self.pool.add(b.op("not", v), True)
        else:
            name = self.pick(I_UNARY if dt.is_signed else ("abs", "not"))
            self.pool.add(b.op(name, v), True)

    def op_binary(self) -> None:
        v = self.any_value()
        dt, b = v.dtype, self.b
        if dt.is_float:
            name = self.pick(F_BINARY)
            w = self.partner(v)
            exact = name in ("max", "min") and self.pool.is_exact(v) and self.pool.is_exact(w)
            if name == "div":  # never a near-zero denominator
                w = b.add(b.abs(w), self.splat(1.0, w))
            self.pool.add(b.op(name, v, w), exact)
        else:
            name = self.pick(B_BINARY if dt.is_bool else I_BINARY)
            self.pool.add(b.op(name, v, self.partner(v)), True)

    def reduce_kind(self, v: Value) -> str:
        if v.dtype.is_bool:
            return self.pick(("and", "or", "max", "min"))
        return self.pick(("sum", "sum", "max", "min", "prod") if v.dtype.is_float
                         else ("sum", "max", "min", "prod"))

    def reduce_axes(self, v: Value) -> list[int]:
        style = self.pick(("row", "column", "one", "several"))
        if style == "row":
            return [v.rank - 1]
        if style == "column":
            return list(range(self.draw(st.integers(1, v.rank))))
        if style == "one":
            return [self.draw(st.integers(0, v.rank - 1))]
        return sorted(self.draw(st.sets(st.integers(0, v.rank - 1), min_size=1)))

    def reduce(self, v: Value) -> tuple[Value, list[int]]:
        axes = self.reduce_axes(v)
        kind = self.reduce_kind(v)
        if kind == "prod" and v.dtype.is_float:
            v = self.b.tanh(v)  # |x| < 1: a product over many elements stays finite
        r = self.b.reduce(v, kind=kind, axes=axes)
        exact = kind in ("max", "min") and self.pool.is_exact(v)
        self.pool.add(r, exact)
        return r, axes

    def op_reduce(self) -> None:
        self.reduce(self.any_value(min_rank=1))

    def op_reduce_bcast(self) -> None:
        """A reduction broadcast back over its space and combined with a value of it."""
        v = self.main_value(min_rank=1)
        if not v.rank:
            return
        r, axes = self.reduce(v)
        kept = [i for i in range(v.rank) if i not in axes]
        rb = self.b.broadcast_in_dim(r, shape=list(v.shape), broadcast_dimensions=kept)
        if v.dtype.is_bool:
            self.pool.add(self.b.op(self.pick(B_BINARY), v, rb), True)
            return
        name = self.pick(("sub", "mul", "add", "div", "max")) if v.dtype.is_float else \
            self.pick(("sub", "add", "max"))
        if name == "div":
            rb = self.b.add(self.b.abs(rb), self.splat(1.0, rb))
        self.pool.add(self.b.op(name, v, rb), False)

    def op_stitch(self) -> None:
        """softmax, layernorm and their backward shapes over a random reduced axis set."""
        v = self.main_value(min_rank=1)
        if not v.dtype.is_float or not v.rank:
            return self.op_reduce_bcast()
        b = self.b
        axes = self.reduce_axes(v)
        kept = [i for i in range(v.rank) if i not in axes]
        shape = list(v.shape)

        def back(r: Value) -> Value:
            return b.broadcast_in_dim(r, shape=shape, broadcast_dimensions=kept)

        pattern = self.pick(("softmax", "layernorm", "softmax_bwd", "layernorm_bwd",
                             "rmsnorm"))
        if pattern == "softmax":
            e = b.exp(b.sub(v, back(b.reduce(v, kind="max", axes=axes))))
            self.pool.add(b.div(e, back(b.reduce(e, kind="sum", axes=axes))), False)
        elif pattern in ("layernorm", "rmsnorm"):
            scale = self.splat(0.25, v)  # a constant "1/n": the statistics need not be means
            if pattern == "layernorm":
                mean = b.reduce(v, kind="sum", axes=axes)
                v = b.sub(v, back(b.mul(mean, self.splat(0.25, mean))))
            var = b.reduce(b.mul(b.mul(v, v), scale), kind="sum", axes=axes)
            rstd = b.rsqrt(b.add(var, self.splat(1.0, var)))
            y = self.pool.add(b.mul(v, back(rstd)), False)
            if self.chance(0.5):  # the statistic is an output too (saved for backward)
                self.pool.add(rstd, False)
            if self.chance(0.5) and kept:  # gamma: a per-column scale from an input
                self.pool.add(b.mul(y, self.partner(y)), False)
        elif pattern == "softmax_bwd":  # dx = y * (g - sum(g * y))
            g = self.partner(v)
            y = b.logistic(v)
            self.pool.add(b.mul(y, b.sub(g, back(b.reduce(b.mul(g, y), kind="sum",
                                                                axes=axes)))), False)
        else:  # layernorm backward: row sums for dx, column sums for dgamma / dbeta
            g = self.partner(v)
            xhat = b.tanh(v)
            gx = b.mul(g, xhat)
            s1 = back(b.reduce(g, kind="sum", axes=axes))
            s2 = back(b.reduce(gx, kind="sum", axes=axes))
            self.pool.add(b.sub(b.sub(g, b.mul(s1, self.splat(0.25, v))),
                                b.mul(xhat, b.mul(s2, self.splat(0.25, v)))), False)
            lead = list(range(self.draw(st.integers(1, v.rank))))
            self.pool.add(b.reduce(gx, kind="sum", axes=lead), False)
            if self.chance(0.5):
                self.pool.add(b.reduce(g, kind="sum", axes=lead), False)

    def op_broadcast(self) -> None:
        v = self.any_value()
        if v.rank >= 4:
            return
        pos = self.draw(st.integers(0, v.rank))
        shape = list(v.shape)
        shape.insert(pos, self.pick(self.bound_dims()))
        dims = [i if i < pos else i + 1 for i in range(v.rank)]
        self.pool.add(self.b.broadcast_in_dim(v, shape=shape, broadcast_dimensions=dims),
                      self.pool.is_exact(v))

    def op_reshape(self) -> None:
        v = self.any_value()
        shape = list(v.shape)
        how = self.pick(("merge", "unit", "drop_unit"))
        if how == "merge" and v.rank >= 2:
            k = self.draw(st.integers(0, v.rank - 2))
            shape[k:k + 2] = [shape[k] * shape[k + 1]]
        elif how == "drop_unit" and Expr.const(1) in shape:
            shape.remove(Expr.const(1))
        elif v.rank < 4:
            shape.insert(self.draw(st.integers(0, v.rank)), Expr.const(1))
        else:
            return
        self.pool.add(self.b.reshape(v, shape=shape), self.pool.is_exact(v))

    def op_transpose(self) -> None:
        v = self.any_value(min_rank=2)
        if v.rank < 2:
            return
        perm = list(self.draw(st.permutations(range(v.rank))))
        self.pool.add(self.b.transpose(v, permutation=perm), self.pool.is_exact(v))

    def op_slice(self) -> None:
        v = self.any_value(min_rank=1)
        if not v.rank:
            return
        start, limit, stride = [], [], []
        for d in v.shape:
            if d.is_const and d.value >= 3 and self.chance(0.5):
                start.append(1)
                limit.append(d.value - 1)
            else:
                start.append(0)
                limit.append(d)
            stride.append(self.pick((1, 1, 2, 3)))
        self.pool.add(self.b.slice(v, start=start, limit=limit, stride=stride),
                      self.pool.is_exact(v))

    def op_concat(self) -> None:
        v = self.any_value(min_rank=1)
        if not v.rank:
            return
        axis = self.draw(st.integers(0, v.rank - 1))
        others = [w for w in self.pool.values if w.dtype == v.dtype and w.rank == v.rank
                  and all(a == c for i, (a, c) in enumerate(zip(w.shape, v.shape))
                          if i != axis)]
        parts = [v] + [self.pick(others) for _ in range(self.draw(st.integers(1, 2)))]
        exact = all(self.pool.is_exact(p) for p in parts)
        self.pool.add(self.b.concatenate(*parts, dimension=axis), exact)

    def op_pad(self) -> None:
        v = self.any_value(min_rank=1)
        if not v.rank:
            return
        low = [self.draw(st.integers(0, 2)) for _ in range(v.rank)]
        high = [self.draw(st.integers(0, 2)) for _ in range(v.rank)]
        interior = [self.pick((0, 0, 1)) for _ in range(v.rank)]
        value = 1 if v.dtype.is_bool else 2
        self.pool.add(self.b.pad(v, self.const(value, v.dtype), low=low, high=high,
                                 interior=interior), self.pool.is_exact(v))

    def op_reverse(self) -> None:
        v = self.any_value(min_rank=1)
        if not v.rank:
            return
        dims = sorted(self.draw(st.sets(st.integers(0, v.rank - 1), min_size=1)))
        self.pool.add(self.b.reverse(v, dimensions=dims), self.pool.is_exact(v))

    def op_select(self) -> None:
        v = self.any_value()
        exact = [w for w in self.pool.values if self.pool.is_exact(w) and w.rank <= v.rank
                 and not w.dtype.is_bool and embedding(w.shape, v.shape) is not None]
        bools = [w for w in self.pool.values if w.dtype.is_bool and w.rank <= v.rank
                 and embedding(w.shape, v.shape) is not None]
        if bools and (not exact or self.chance(0.5)):
            pred = self.to_shape(self.pick(bools), v.shape)
        elif exact:
            a = self.to_shape(self.pick(exact), v.shape)
            pred = self.b.compare(a, self.partner(a, exact=True),
                                  direction=self.pick(("lt", "le", "eq", "ne", "gt", "ge")))
            self.pool.add(pred, True)
        else:
            return
        w = self.partner(v)
        self.pool.add(self.b.select(pred, v, w),
                      self.pool.is_exact(v) and self.pool.is_exact(w))

    def op_convert(self) -> None:
        v = self.any_value()
        src = v.dtype
        if src.is_float and not self.pool.is_exact(v):
            # (x != 0 of a rounded value is discontinuous: not from inexact values)
            targets = [d for d in NATIVE_FLOATS + HALF_FLOATS
                       if (d in HALF_FLOATS) == (src.value in HALF_FLOATS)]
        else:
            targets = ["f32", "f64", "i32", "i8", "bool", self.dtype.value]
            if src.value in HALF_FLOATS or self.dtype.value in HALF_FLOATS:
                targets = [self.dtype.value, "f32", "bool"]
        targets = [t for t in targets if t != src.value]
        if not targets:
            return
        to = DType(self.pick(targets))
        exact = self.pool.is_exact(v)
        if to.is_int and src.is_float:  # out of range is undefined: keep x in range
            v = self.b.op("clamp", self.const(0 if not to.is_signed else -100, src), v,
                          self.const(100, src))
        # rounding a value both engines agree on is deterministic: still exact
        self.pool.add(self.b.convert(v, dtype=to), exact)

    def op_iota(self) -> None:
        """An iota of a pooled value's shape, pooled itself: later ops may read it directly
        and through reverse, transpose or broadcasts (under several index maps: the case of
        regressions/02-iota-read-under-two-index-maps.disc)."""
        v = self.any_value(min_rank=1)
        if not v.rank:
            return
        dim = self.draw(st.integers(0, v.rank - 1))
        dt = v.dtype if not v.dtype.is_bool else DType.I32
        io = self.b.op("iota", shape=list(v.shape), dimension=dim, dtype=dt)
        self.pool.add(io, True)

    def op_dot(self) -> None:
        v = self.main_value(min_rank=1)
        if v.dtype.value not in NATIVE_FLOATS or not 1 <= v.rank <= 3:
            return
        b = self.b
        n = self.pick(self.bound_dims())
        style = self.pick(("linear", "weight_grad", "batched") if v.rank == 3
                          else ("linear", "weight_grad"))
        if style == "linear":  # [..., K] x [K, N]
            w = self.input(v.dtype, [v.shape[-1], n])
            y = b.dot_general(v, w, lhs_batch=[], rhs_batch=[], lhs_contract=[v.rank - 1],
                              rhs_contract=[0])
        elif style == "weight_grad":  # x^T dy: contract the leading dim of both
            w = self.input(v.dtype, [v.shape[0], n])
            y = b.dot_general(v, w, lhs_batch=[], rhs_batch=[], lhs_contract=[0],
                              rhs_contract=[0])
        else:  # [B, M, K] x [B, K, N]
            w = self.input(v.dtype, [v.shape[0], v.shape[2], n])
            y = b.dot_general(v, w, lhs_batch=[0], rhs_batch=[0], lhs_contract=[2],
                              rhs_contract=[1])
        self.pool.add(y, False)

    def build(self) -> Graph:
        self.inputs()
        for _ in range(self.draw(st.integers(1, self.max_ops))):
            self.step()
        produced = [v for v in self.pool.values if v.producer is not None]
        if not produced:
            produced = [self.b.neg(self.pool.values[0]) if not self.pool.values[0].dtype.is_bool
                        else self.b.op("not", self.pool.values[0])]
        outs = [produced[-1]]
        for v in produced[:-1]:  # multi-output: intermediates other ops also read
            if self.chance(0.25):
                outs.append(v)
        return self.b.build(*outs)


#: the dtype of a graph's main input, by percentile: mostly f32, as in models. Hypothesis
#: favours the ends of a range, so the ends are f32 and bool, not the half types (which
#: only check the interpreter fallback).
DTYPE_RANGES = ((55, "f32"), (68, "f64"), (73, "i32"), (78, "i64"), (83, "i8"), (88, "i16"),
                (93, "u8"), (95, "f16"), (96, "bf16"), (100, "bool"))


def _dtype(percentile: int) -> str:
    return next(dt for bound, dt in DTYPE_RANGES if percentile < bound)


@st.composite
def fuzz_graphs(draw, max_ops: int = 18) -> Graph:
    return _Gen(draw, _dtype(draw(st.integers(0, 99))), max_ops).build()


_SMALL = (0, 1, 2, 3, 5, 7)
#: a large binding gives one symbol a size from each tier, in a random order: up to 76k
#: elements in a rank-3 space (the parallel code paths start at 32k), and a rank-4 value
#: that repeats a symbol stays below ~20M
_LARGE_TIERS = ((33, 64, 130, 257), (5, 9, 17, 33), (3, 5, 9))


def _binding(draw, kind: str) -> dict[str, int]:
    if kind == "small":
        return {s: draw(st.sampled_from(_SMALL[1:])) for s in SYMBOLS}
    if kind == "ones":
        return {s: draw(st.sampled_from((1, 1, 3))) for s in SYMBOLS}
    if kind == "zero":
        b = {s: draw(st.sampled_from(_SMALL[1:])) for s in SYMBOLS}
        b[draw(st.sampled_from(SYMBOLS))] = 0
        return b
    order = draw(st.permutations(SYMBOLS))
    return {s: draw(st.sampled_from(tier)) for s, tier in zip(order, _LARGE_TIERS)}


@st.composite
def fuzz_cases(draw, max_ops: int = 18) -> FuzzCase:
    """A graph and 4 bindings: small odd sizes, size-1 dims, one size-0 dim, large."""
    graph = draw(fuzz_graphs(max_ops))
    bindings = [_binding(draw, k) for k in ("small", "ones", "zero", "large")]
    return FuzzCase(graph, bindings, draw(st.integers(0, 2**31 - 1)))


def random_inputs(graph: Graph, env: dict[str, int], rng: np.random.Generator,
                  specials: bool = False) -> list[np.ndarray]:
    """Inputs for one binding: floats in [-2, 2] (with NaN, infinities and -0.0 sprinkled
    in when ``specials``), small integers, random bools."""
    out = []
    for v in graph.inputs:
        shape = [d.evaluate(env) for d in v.shape]
        dt = v.dtype
        if dt.is_bool:
            a = rng.random(shape) < 0.5
        elif dt.is_int:
            lo = 0 if not dt.is_signed else -20
            a = rng.integers(lo, 21, size=shape).astype(dt.np)
        else:
            a = rng.uniform(-2, 2, size=shape)
            if specials and a.size >= 4:
                flat = a.reshape(-1)
                idx = rng.choice(flat.size, size=min(4, flat.size), replace=False)
                flat[idx] = rng.choice([np.nan, np.inf, -np.inf, -0.0], size=idx.size)
            a = a.astype(dt.np)
        out.append(np.ascontiguousarray(a))
    return out
