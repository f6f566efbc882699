"""export -> import round trip of every core op, every dtype it accepts.

The exported module is verified by MLIR (``export`` does it) and read back through both
the text and the bytecode form; the imported graph must keep the input types (symbol
names included, through the ``disc.dims`` argument attribute) and compute, on every shape
binding, bit for bit what the original computes in the reference interpreter.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jaxlib")

from cases import BINDINGS, Case, all_cases  # noqa: E402

from disc_core.interpreter import interpret  # noqa: E402
from disc_core.opdef import registry  # noqa: E402
from disc_core.stablehlo import export, import_, mapping  # noqa: E402

CASES = all_cases()


def test_every_core_op_has_a_case() -> None:
    """A new op without a StableHLO mapping and a case here fails this test."""
    assert {c.op for c in CASES} == set(registry())


def test_mapping_table_names_every_core_op() -> None:
    assert {r.disc for r in mapping.table()} == set(registry())


def _same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes(), \
        (what, got, want)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_roundtrip(case: Case) -> None:
    module = export(case.graph)
    text, code = module.text, module.bytecode()
    assert "func.func public @main" in text
    g_text, g_code = import_(text), import_(code)
    assert str(g_text) == str(g_code)
    assert [v.type for v in g_text.inputs] == [v.type for v in case.graph.inputs]
    assert [(v.dtype, v.rank) for v in g_text.outputs] == \
        [(v.dtype, v.rank) for v in case.graph.outputs]
    for k, binding in enumerate(BINDINGS):
        inputs = case.draw(binding, seed=k)
        want = interpret(case.graph, inputs)
        got = interpret(g_text, inputs)
        for j, (a, b) in enumerate(zip(got, want)):
            _same(a, b, f"{case.id} {binding} output {j}")
