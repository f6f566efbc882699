"""Converter parity: a static PIR program built op by op, run by Paddle and by DISC.

``check_ops(build, specs, input_sets)`` builds a program whose inputs are ``pd_op.data``
values of ``specs`` (dims ``-1`` are dynamic) and whose outputs are what ``build`` returns
(any ``pd_op``, gradient ops included: ``paddle._C_ops.matmul_grad(...)`` in static mode
adds that op). Every computation node must convert; all of them are lowered as ONE core
graph, compiled once (native code required by default), and run on every input set, whose
shapes the compilation never saw; results must match Paddle's executor on the same
program. Returns the lowered cluster (its graph for further checks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import paddle

from disc_core import Compiler
from disc_paddle import partition
from disc_paddle.lowering import core_dtype

TOL = {np.dtype(np.float32): (2e-5, 2e-6), np.dtype(np.float64): (1e-10, 1e-12)}


def _flatten(x: Any) -> list[Any]:
    if isinstance(x, (list, tuple)):
        return [y for item in x for y in _flatten(item)]
    return [] if x is None else [x]


def _run_paddle(main: Any, feeds: dict[str, np.ndarray], outs: Sequence[Any]) -> list[np.ndarray]:
    exe = paddle.static.Executor(paddle.CPUPlace())
    return [np.asarray(r) for r in exe.run(main, feed=feeds, fetch_list=list(outs))]


#: per output: (the float64 value, Σ|products| per element, products per element)
SumBounds = Callable[..., Sequence[tuple[np.ndarray, np.ndarray, int]]]


def within_sum_bound(got: np.ndarray, exact: np.ndarray, magnitude: np.ndarray,
                     terms: int) -> bool:
    """Whether ``got``, a sum of ``terms`` rounded products per element in any order, is
    within the a priori bound of such a sum: |got − exact| ≤ terms·ε·Σ|products|
    (Higham's γₙ). Where a sum cancels, a relative tolerance on the result judges only
    which summation order a library happened to use."""
    bound = terms * np.finfo(got.dtype).eps * magnitude
    return bool(np.all(np.abs(got.astype(np.float64) - exact) <= bound))


def check_ops(build: Callable[..., Any], specs: Sequence[tuple[Sequence[int], str]],
              input_sets: Sequence[Sequence[np.ndarray]], *, target: str = "native",
              required: Sequence[str] = (), tol: dict | None = None,
              sum_bounds: SumBounds | None = None) -> partition.LoweredCluster:
    """See the module docstring. ``required``: op names that must be in the program.
    ``sum_bounds(*arrays)``: for outputs that are float32 sums of products, their exact
    values and rounding bounds (:func:`within_sum_bound`), which DISC's results and
    Paddle's must both meet, instead of a tolerance around Paddle's."""
    paddle.enable_static()
    try:
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            xs = [paddle.static.data(f"x{i}", list(shape), dtype)
                  for i, (shape, dtype) in enumerate(specs)]
            outs = build(*xs)
            outs = _flatten(outs)
        names = [op.name() for op in main.global_block().ops]
        for r in required:
            assert r in names, f"{r} not in the program ({names})"
        analysis = partition.analyze(main, min_cluster_size=1, outputs=outs)
        bad = {n.name: analysis.verdicts[n].reason for n in analysis.nodes
               if not analysis.verdicts[n].supported}
        assert not bad, f"not converted: {bad}"
        members = list(analysis.nodes)
        low = partition.lower_cluster(analysis, members, "parity")
        exe = Compiler(target=target).compile(low.graph)
        if target == "native":
            assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
        order = [next(i for i, x in enumerate(xs) if x.id == v.id) for v in low.inputs]
        out_pos = {o.id: k for k, o in enumerate(low.outputs)}
        for arrays in input_sets:
            try:
                want = _run_paddle(main, {f"x{i}": a for i, a in enumerate(arrays)}, outs)
            except (ValueError, RuntimeError):
                # older Paddle releases (3.0) refuse some empty inputs that later ones
                # accept: with no reference, the set says nothing; any other failure is
                # the test's to report
                if any(np.asarray(a).size == 0 for a in arrays):
                    continue
                raise
            got_all = exe(*[arrays[i] for i in order])
            got_all = list(got_all) if isinstance(got_all, (list, tuple)) else [got_all]
            bounds = sum_bounds(*arrays) if sum_bounds else [None] * len(outs)
            for o, w, bound in zip(outs, want, bounds):
                k = out_pos.get(o.id)
                if k is None:  # an input passed through, or a value folded at compile time
                    pos = next((i for i, x in enumerate(xs) if x.id == o.id), None)
                    g = arrays[pos] if pos is not None else None
                    if g is None:
                        continue
                else:
                    idx = low.output_index[k]
                    g = np.asarray(got_all[idx]) if idx is not None else arrays[
                        next(i for i, x in enumerate(xs) if x.id == low.passthrough[k].id)]
                assert g.dtype == core_dtype(o.dtype).np, (g.dtype, o.dtype)
                assert g.shape == w.shape, (g.shape, w.shape)
                if bound is not None and w.dtype == np.float32:
                    assert within_sum_bound(w, *bound), "the bound fails Paddle's result"
                    assert within_sum_bound(g, *bound), (g, bound[0])
                elif np.issubdtype(w.dtype, np.floating):
                    rtol, atol = (tol or TOL)[w.dtype]
                    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
                else:
                    np.testing.assert_array_equal(g, w)
        return low
    finally:
        paddle.disable_static()


def rand(shape: Sequence[int], dtype: str = "float32", seed: int = 0, low: float = -2.0,
         high: float = 2.0) -> np.ndarray:
    rng = np.random.default_rng(seed + 31 * sum(shape) + len(shape))
    if np.issubdtype(np.dtype(dtype), np.floating):
        return rng.uniform(low, high, shape).astype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(int(low) - 3, int(high) + 4, shape).astype(dtype)
