"""DISC demo: one dynamic-shape LayerNorm graph, compiled once, run for several shapes.

Builds LayerNorm over [batch, seq, hidden] with batch and seq symbolic, prints its IR,
runs it for three shapes, checks each against numpy, and prints the compilation count.
"""

from __future__ import annotations

import tempfile

import numpy as np

from disc_core import GraphBuilder, jit
from disc_runtime import CompileCache

HIDDEN = 64


def layernorm_graph(hidden: int = HIDDEN, eps: float = 1e-5):
    b = GraphBuilder("layernorm")
    batch, seq = b.symbol("batch", min=1), b.symbol("seq", min=1)
    x = b.input("x", "f32", [batch, seq, hidden])
    gamma, beta = b.input("gamma", "f32", [hidden]), b.input("beta", "f32", [hidden])

    def rows(v):  # [batch, seq] -> [batch, seq, hidden]
        return b.broadcast_in_dim(v, shape=[batch, seq, hidden], broadcast_dimensions=[0, 1])

    def per_row(value):
        return b.broadcast_in_dim(b.constant(np.float32(value)), shape=[batch, seq],
                                  broadcast_dimensions=[])

    def params(v):
        return b.broadcast_in_dim(v, shape=[batch, seq, hidden], broadcast_dimensions=[2])

    mean = b.div(b.reduce(x, kind="sum", axes=[2]), per_row(hidden))
    centered = b.sub(x, rows(mean))
    var = b.div(b.reduce(b.mul(centered, centered), kind="sum", axes=[2]), per_row(hidden))
    normed = b.mul(centered, rows(b.rsqrt(b.add(var, per_row(eps)))))
    return b.build(b.add(b.mul(normed, params(gamma)), params(beta)))


def main() -> None:
    graph = layernorm_graph()
    print(graph)
    with tempfile.TemporaryDirectory() as cache_dir:
        fn = jit(graph, cache=CompileCache(cache_dir))
        rng = np.random.default_rng(0)
        gamma = rng.standard_normal(HIDDEN).astype(np.float32)
        beta = rng.standard_normal(HIDDEN).astype(np.float32)
        for shape in [(2, 7), (4, 128), (1, 33)]:
            x = rng.standard_normal(shape + (HIDDEN,)).astype(np.float32)
            (y,) = fn(x, gamma, beta)
            mu = x.mean(-1, keepdims=True)
            want = (x - mu) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * gamma + beta
            err = float(np.abs(y - want).max())
            print(f"x{list(x.shape)} -> y{list(y.shape)}  max |disc - numpy| = {err:.2e}")
            assert err < 1e-4, err
        print(f"compilations: {fn.stats.compiles} for 3 shapes "
              f"(memory cache hits: {fn.stats.memory_hits})")


if __name__ == "__main__":
    main()
