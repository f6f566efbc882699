"""DISC demo: one dynamic-shape LayerNorm graph, compiled once, run for several shapes.

Builds LayerNorm over [batch, seq, hidden] with batch and seq symbolic, prints its IR,
runs it for three shapes (natively when a C compiler is present), checks each against
numpy, and prints the compilation count and the fusion plan.
"""

from __future__ import annotations

import tempfile

import numpy as np

from disc_core import catalog, jit
from disc_runtime import CompileCache

HIDDEN = 64


def main() -> None:
    graph = catalog.layernorm(hidden=HIDDEN)
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
        meta = fn.compiler.compile(graph).artifact.metadata
        native = meta.get("native")
        print("ran on " + (f"native code, fusion {native['fusion']}" if native
                           else f"the reference interpreter ({meta.get('native_fallback')})"))


if __name__ == "__main__":
    main()
