"""Differential test: every exported case on XLA's CPU backend (through jax) against DISC's
native engine, on shape bindings neither saw at compile time.

DISC compiles each graph once, symbolically; XLA gets the module DISC wrote (``?`` dims,
dynamic ops) and refines it at each call's shapes (``xla_runner.py`` here). A binding
with a zero-sized symbol goes to XLA as a module exported with the symbols bound (jax's
dimension variables are >= 1): that is the ``static`` mode, the others are ``dynamic``.
Both are also checked against the reference interpreter, so a disagreement names the side
that is wrong.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jaxlib")
pytest.importorskip("jax")

from cases import BINDINGS, Case, all_cases  # noqa: E402
from xla_runner import run_on_xla  # noqa: E402

from disc_core.compiler import Compiler  # noqa: E402
from disc_core.dtypes import dtype_of  # noqa: E402
from disc_core.interpreter import interpret  # noqa: E402

CASES = all_cases()


@pytest.fixture(scope="module")
def compiler(tmp_path_factory: pytest.TempPathFactory) -> Compiler:
    from disc_runtime import CompileCache

    return Compiler(CompileCache(tmp_path_factory.mktemp("disc-cache")))


def _close(got: np.ndarray, want: np.ndarray, rtol: float, what: str) -> None:
    """Exact for integers and bools (and floats with ``rtol`` 0, NaN in the same places),
    else within ``rtol`` (relative and absolute, NaN in the same places)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    if not dtype_of(want.dtype).is_float:
        assert np.array_equal(got, want), (what, got, want)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, equal_nan=True, err_msg=what)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_xla_vs_native(case: Case, compiler: Compiler) -> None:
    exe = compiler.compile(case.graph)
    modes = set()
    for k, binding in enumerate(BINDINGS):
        inputs = case.draw(binding, seed=100 + k)
        ref = interpret(case.graph, inputs)
        native = [np.asarray(o) for o in exe.run(inputs)]
        xla = run_on_xla(case.graph, inputs)
        modes.add(xla.mode)
        for j, (r, n, x) in enumerate(zip(ref, native, xla.outputs)):
            what = f"{case.id} {binding} output {j}"
            _close(x, n, case.rtol, what + " (XLA vs native)")
            _close(n, r, case.rtol, what + " (native vs reference)")
    if case.graph.free_symbols():
        # the dynamic module itself ran on XLA, not only its static specializations
        assert "dynamic" in modes
