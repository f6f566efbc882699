"""Hypothesis strategies for random graphs over elementwise, broadcast, reduce, reshape and
transpose ops, with symbolic and static dims. Shared by the round-trip and shape tests."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from disc_core.builder import GraphBuilder
from disc_core.ir import Graph, Value
from disc_core.symbolic import Expr

SYMBOLS = ("B", "S", "H")
UNARY = ("neg", "abs", "exp", "tanh", "logistic", "sqrt", "floor", "sin")
BINARY = ("add", "sub", "mul", "max", "min", "div")


def _dim(draw, bound: list[Expr] | None = None) -> Expr:
    """A static dim or a symbol; new dims inside the graph use symbols the inputs bind."""
    syms = [Expr.sym(s) for s in SYMBOLS] if bound is None else bound
    return draw(st.sampled_from(syms + [Expr.const(c) for c in (1, 3, 4)]))


@st.composite
def random_graphs(draw, max_ops: int = 10) -> Graph:
    b = GraphBuilder("random")
    for s in SYMBOLS:
        b.symbol(s)
    pool: list[Value] = []
    for i in range(draw(st.integers(1, 3))):
        rank = draw(st.integers(0, 3))
        pool.append(b.input(f"in{i}", "f32", [_dim(draw) for _ in range(rank)]))
    bound = sorted({d for v in pool for d in v.shape if d.is_symbol}, key=str)
    for _ in range(draw(st.integers(1, max_ops))):
        v = draw(st.sampled_from(pool))
        kind = draw(st.sampled_from(["unary", "binary", "binary_const", "reduce", "reshape",
                                     "broadcast", "transpose", "select", "slice", "reverse",
                                     "pad", "concat"]))
        if kind == "unary":
            pool.append(b.op(draw(st.sampled_from(UNARY)), v))
        elif kind == "binary":
            same = [w for w in pool if w.type == v.type]
            pool.append(b.op(draw(st.sampled_from(BINARY)), v, draw(st.sampled_from(same))))
        elif kind == "binary_const":
            c = b.constant(np.float32(draw(st.sampled_from([0.5, 2.0, -1.0]))))
            cb = b.broadcast_in_dim(c, shape=list(v.shape), broadcast_dimensions=[])
            pool.append(b.op(draw(st.sampled_from(BINARY)), v, cb))
        elif kind == "reduce" and v.rank:
            axes = sorted(draw(st.sets(st.integers(0, v.rank - 1), min_size=1)))
            pool.append(b.reduce(v, kind=draw(st.sampled_from(["sum", "max", "min"])),
                                 axes=axes))
        elif kind == "reshape" and v.rank >= 2:
            k = draw(st.integers(0, v.rank - 2))
            shape = list(v.shape[:k]) + [v.shape[k] * v.shape[k + 1]] + list(v.shape[k + 2:])
            pool.append(b.reshape(v, shape=shape))
        elif kind == "reshape":
            pool.append(b.reshape(v, shape=list(v.shape) + [1]))
        elif kind == "broadcast" and v.rank < 4:
            pos = draw(st.integers(0, v.rank))
            shape = list(v.shape)
            shape.insert(pos, _dim(draw, bound))
            dims = [i if i < pos else i + 1 for i in range(v.rank)]
            pool.append(b.broadcast_in_dim(v, shape=shape, broadcast_dimensions=dims))
        elif kind == "transpose" and v.rank >= 2:
            perm = draw(st.permutations(range(v.rank)))
            pool.append(b.transpose(v, permutation=list(perm)))
        elif kind == "select":
            w = draw(st.sampled_from([w for w in pool if w.type == v.type]))
            pred = b.compare(v, w, direction=draw(st.sampled_from(["lt", "ge", "eq"])))
            pool.append(b.select(pred, v, w))
        elif kind == "slice" and v.rank:
            strides = [draw(st.sampled_from([1, 2])) for _ in range(v.rank)]
            pool.append(b.slice(v, start=[0] * v.rank, limit=list(v.shape), stride=strides))
        elif kind == "reverse" and v.rank:
            dims = sorted(draw(st.sets(st.integers(0, v.rank - 1), min_size=1)))
            pool.append(b.reverse(v, dimensions=dims))
        elif kind == "pad" and v.rank:
            low = [draw(st.integers(0, 2)) for _ in range(v.rank)]
            high = [draw(st.integers(0, 2)) for _ in range(v.rank)]
            pool.append(b.pad(v, b.constant(np.float32(0.25)), low=low, high=high,
                              interior=[0] * v.rank))
        elif kind == "concat" and v.rank:
            axis = draw(st.integers(0, v.rank - 1))
            pool.append(b.concatenate(v, b.neg(v), dimension=axis))
    outputs = [v for v in pool if v.producer is not None] or pool[:1]
    return b.build(*outputs)


def random_inputs(graph: Graph, env: dict[str, int], rng: np.random.Generator) -> list:
    out = []
    for v in graph.inputs:
        shape = [d.evaluate(env) for d in v.shape]
        out.append(rng.standard_normal(shape).astype(v.dtype.np))
    return out
