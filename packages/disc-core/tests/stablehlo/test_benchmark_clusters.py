"""The clusters disc-torch's converters produce for the GPT and CNN benchmark models
(benchmarks/torch_models.py, quick sizes; inference, training forward and backward),
recorded from a compile cache as graph text (data/*.disc): each exports, round-trips, and
runs on XLA and on DISC's native engine with the same results, on shapes the cluster was
not traced or compiled for."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jaxlib")

from disc_core.interpreter import interpret  # noqa: E402
from disc_core.ir import Graph  # noqa: E402
from disc_core.parser import parse_graph  # noqa: E402
from disc_core.stablehlo import export, import_  # noqa: E402

DATA = Path(__file__).parent / "data"
FILES = sorted(DATA.glob("*.disc"))
#: every symbol takes the k-th value (sizes the models were not run with: they ran on
#: batch 4 / 8 and lengths 32, 43 / images 16, 18)
VALUES = [6, 9, 13]


def _inputs(graph: Graph, value: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    env = {s: value for s in graph.free_symbols()}
    out = []
    for v in graph.inputs:
        shape = tuple(d.evaluate(env) for d in v.shape)
        if v.dtype.is_int:  # token ids, class labels: indices are clamped, any value runs
            out.append(rng.integers(0, 10, size=shape).astype(v.dtype.np))
        elif v.dtype.is_bool:
            out.append(rng.random(shape) < 0.5)
        else:
            out.append((rng.standard_normal(shape) * 0.5).astype(v.dtype.np))
    return out


def test_the_recorded_clusters_are_the_benchmarks() -> None:
    names = {f.stem for f in FILES}
    assert {"gpt_inference", "gpt_forward", "gpt_backward", "cnn_inference", "cnn_forward",
            "cnn_backward"} <= names


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_cluster_roundtrip(path: Path) -> None:
    graph = parse_graph(path.read_text())
    back = import_(export(graph).bytecode())
    assert [v.type for v in back.inputs] == [v.type for v in graph.inputs]
    for k, value in enumerate(VALUES[:2]):
        inputs = _inputs(graph, value, k)
        for a, b in zip(interpret(back, inputs), interpret(graph, inputs)):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_cluster_xla_vs_native(path: Path, tmp_path: Path) -> None:
    pytest.importorskip("jax")
    from xla_runner import run_on_xla

    from disc_core.compiler import Compiler
    from disc_runtime import CompileCache

    graph = parse_graph(path.read_text())
    exe = Compiler(CompileCache(tmp_path)).compile(graph)
    for k, value in enumerate(VALUES):
        inputs = _inputs(graph, value, 10 + k)
        native = exe.run(inputs)
        xla = run_on_xla(graph, inputs)
        assert xla.mode == "dynamic"  # XLA compiled the module with ? dims and dynamic ops
        ref = interpret(graph, inputs)
        for j, (n, x, r) in enumerate(zip(native, xla.outputs, ref)):
            n, x = np.asarray(n), np.asarray(x)
            assert n.shape == x.shape == r.shape and n.dtype == x.dtype, (path.stem, j)
            # f32 end to end, summed in different orders (GEMMs, reductions; the reference
            # accumulates in f64): a weight gradient of magnitude 1e3 has elements near 0
            # that are differences of such sums, so the absolute tolerance scales with the
            # output's largest element
            atol = 2e-4 + 1e-5 * float(np.max(np.abs(r), initial=0.0))
            what = f"{path.stem} symbols={value} output {j}"
            np.testing.assert_allclose(x, r, rtol=2e-4, atol=atol, err_msg=what + " XLA")
            np.testing.assert_allclose(n, r, rtol=2e-4, atol=atol, err_msg=what + " native")
