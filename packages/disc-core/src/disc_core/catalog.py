"""Reference graphs of common memory-bound blocks, written with core primitives only.

The demo, the native-engine tests and the benchmarks build the same definitions from here,
so a number in a benchmark table and a kernel count asserted in a test are about the same
graph. Dims are symbolic except where a hidden size is given (``hidden=None`` makes it a
symbol too).
"""

from __future__ import annotations

from collections.abc import Sequence

from .builder import GraphBuilder
from .ir import Graph, Value
from .symbolic import Expr, ExprLike


def broadcast(b: GraphBuilder, v: Value, shape: Sequence[ExprLike], dims: Sequence[int]
              ) -> Value:
    return b.broadcast_in_dim(v, shape=list(shape), broadcast_dimensions=list(dims))


def splat(b: GraphBuilder, value: float, shape: Sequence[ExprLike], dtype: str = "f32"
          ) -> Value:
    """A constant broadcast to ``shape`` (fused into consumers, never materialized)."""
    return b.full(value, dtype, shape)


def _hidden(b: GraphBuilder, hidden: int | None) -> Expr | int:
    return b.symbol("H") if hidden is None else hidden


def layernorm(hidden: int | None = None, eps: float = 1e-5) -> Graph:
    """LayerNorm over the last dim of [B, S, H], with gamma and beta."""
    b = GraphBuilder("layernorm")
    B, S, H = b.symbol("B"), b.symbol("S"), _hidden(b, hidden)
    shape, rows = [B, S, H], [B, S]
    x = b.input("x", "f32", shape)
    g, bt = b.input("gamma", "f32", [H]), b.input("beta", "f32", [H])
    n = broadcast(b, b.convert(b.get_dimension_size(x, dimension=2), dtype="f32"), rows, [])
    mean = b.div(b.reduce(x, kind="sum", axes=[2]), n)
    xc = b.sub(x, broadcast(b, mean, shape, [0, 1]))
    var = b.div(b.reduce(b.mul(xc, xc), kind="sum", axes=[2]), n)
    rstd = b.rsqrt(b.add(var, splat(b, eps, rows)))
    y = b.mul(xc, broadcast(b, rstd, shape, [0, 1]))
    return b.build(b.add(b.mul(y, broadcast(b, g, shape, [2])), broadcast(b, bt, shape, [2])))


def softmax(rank: int = 2) -> Graph:
    """softmax over the last dim; every dim symbolic."""
    b = GraphBuilder("softmax")
    dims = [b.symbol(f"d{i}") for i in range(rank)]
    x = b.input("x", "f32", dims)
    keep = list(range(rank - 1))
    m = broadcast(b, b.reduce(x, kind="max", axes=[rank - 1]), dims, keep)
    e = b.exp(b.sub(x, m))
    s = broadcast(b, b.reduce(e, kind="sum", axes=[rank - 1]), dims, keep)
    return b.build(b.div(e, s))


def gelu_bias_residual(hidden: int | None = None) -> Graph:
    """GELU (exact, erf form) of x + bias, plus a residual: [B, S, H]."""
    b = GraphBuilder("gelu_bias_residual")
    B, S, H = b.symbol("B"), b.symbol("S"), _hidden(b, hidden)
    shape = [B, S, H]
    x, r = b.input("x", "f32", shape), b.input("res", "f32", shape)
    bias = b.input("bias", "f32", [H])
    h = b.add(x, broadcast(b, bias, shape, [2]))
    erf = b.erf(b.mul(h, splat(b, 0.7071067811865476, shape)))
    gelu = b.mul(b.mul(h, splat(b, 0.5, shape)), b.add(erf, splat(b, 1.0, shape)))
    return b.build(b.add(gelu, r))


def attention_scores(scale: float = 0.125) -> Graph:
    """softmax(scale * scores masked by a [B, S] key mask) over [B, heads, S, S]."""
    b = GraphBuilder("attention_scores")
    B, N, S = b.symbol("B"), b.symbol("N"), b.symbol("S")
    shape = [B, N, S, S]
    x = b.input("scores", "f32", shape)
    mask = b.input("mask", "bool", [B, S])
    scaled = b.mul(x, splat(b, scale, shape))
    masked = b.select(broadcast(b, mask, shape, [0, 3]), scaled, splat(b, -1e9, shape))
    m = broadcast(b, b.reduce(masked, kind="max", axes=[3]), shape, [0, 1, 2])
    e = b.exp(b.sub(masked, m))
    s = broadcast(b, b.reduce(e, kind="sum", axes=[3]), shape, [0, 1, 2])
    return b.build(b.div(e, s))


def rmsnorm(hidden: int | None = None, eps: float = 1e-6) -> Graph:
    """RMSNorm of [R, H] rows with a weight, as Llama-style models write it."""
    b = GraphBuilder("rmsnorm")
    R, H = b.symbol("R"), _hidden(b, hidden)
    x, w = b.input("x", "f32", [R, H]), b.input("w", "f32", [H])
    n = broadcast(b, b.convert(b.get_dimension_size(x, dimension=1), dtype="f32"), [R], [])
    ms = b.div(b.reduce(b.mul(x, x), kind="sum", axes=[1]), n)
    rs = b.rsqrt(b.add(ms, splat(b, eps, [R])))
    return b.build(b.mul(b.mul(x, broadcast(b, rs, [R, H], [0])), broadcast(b, w, [R, H], [1])))


def layernorm_backward(hidden: int | None = None, eps: float = 1e-5) -> Graph:
    """dx, dgamma, dbeta of LayerNorm over [N, H] rows, statistics recomputed from x."""
    b = GraphBuilder("layernorm_backward")
    N, H = b.symbol("N"), _hidden(b, hidden)
    x, dy = b.input("x", "f32", [N, H]), b.input("dy", "f32", [N, H])
    g = b.input("gamma", "f32", [H])
    n = broadcast(b, b.convert(b.get_dimension_size(x, dimension=1), dtype="f32"), [N], [])

    def rows(v: Value) -> Value:
        return broadcast(b, v, [N, H], [0])

    mean = b.div(b.reduce(x, kind="sum", axes=[1]), n)
    xc = b.sub(x, rows(mean))
    var = b.div(b.reduce(b.mul(xc, xc), kind="sum", axes=[1]), n)
    rstd = b.rsqrt(b.add(var, splat(b, eps, [N])))
    xhat = b.mul(xc, rows(rstd))
    dgamma = b.reduce(b.mul(dy, xhat), kind="sum", axes=[0])
    dbeta = b.reduce(dy, kind="sum", axes=[0])
    dxhat = b.mul(dy, broadcast(b, g, [N, H], [1]))
    a = b.div(b.reduce(dxhat, kind="sum", axes=[1]), n)
    c = b.div(b.reduce(b.mul(dxhat, xhat), kind="sum", axes=[1]), n)
    dx = b.mul(rows(rstd), b.sub(b.sub(dxhat, rows(a)), b.mul(xhat, rows(c))))
    return b.build(dx, dgamma, dbeta)
