"""The reproducer folder and its diagnosis: which engine disagrees with which."""

from __future__ import annotations

import numpy as np
import pytest

from disc_core import Compiler, parse_graph
from disc_core.bisect.repro import synthetic_inputs, write_reproducer
from disc_runtime import CompileCache, Executable, Signature

EXP = "func @f(%x: f32[N]) -> (f32[N]) {\n  %0 = exp(%x) : f32[N]\n  return %0\n}\n"
X = np.linspace(-1, 1, 5, dtype=np.float32)


def artifact(tmp_path, target="native"):
    exe = Compiler(CompileCache(tmp_path / "cache"), target=target).compile(parse_graph(EXP))
    return exe.artifact.key, exe.artifact.directory


def write(tmp_path, recorded, target="native"):
    key, directory = artifact(tmp_path, target)
    return write_reproducer(tmp_path / "repro", key, directory, recorded=recorded,
                            framework="torch", rtol=1e-5, atol=1e-6)


def test_recorded_inputs_that_match_the_framework(tmp_path):
    repro = write(tmp_path, ([X], [np.exp(X)]))
    assert repro.inputs_kind == "recorded" and all(c.same for c in repro.checks)
    assert [c.what for c in repro.checks] == [
        "native engine vs reference interpreter", "reference interpreter vs torch",
        "native engine vs torch"]
    assert repro.verdict.startswith("on these inputs the cluster matches torch")
    np.testing.assert_array_equal(np.load(repro.input_files[0]), X)
    np.testing.assert_allclose(np.load(repro.folder / "expected" / "reference_0.npy"),
                               np.exp(X), rtol=1e-6)
    readme = (repro.folder / "README.md").read_text()
    assert "disc-run artifact --inputs inputs/input_0.npy --out out" in readme
    assert "* input #0 `x`: float32 ['N']" in readme and "Inputs: recorded" in readme


def test_a_core_graph_that_is_not_the_framework_is_a_converter_bug(tmp_path):
    repro = write(tmp_path, ([X], [np.tanh(X)]))
    assert [c.same for c in repro.checks] == [True, False, False]
    assert "output #0: 5 of 5 values differ" in repro.checks[1].detail
    assert "vs torch" in repro.checks[1].detail
    assert repro.verdict.startswith("the native engine agrees with the interpreter, but the "
                                    "cluster's core graph computes other values than torch")


def test_native_code_that_is_not_the_interpreter_is_a_codegen_bug(tmp_path, monkeypatch):
    run = Executable.run
    monkeypatch.setattr(Executable, "run",
                        lambda self, inputs, **kw: [r + 1 for r in run(self, inputs, **kw)])
    repro = write(tmp_path, ([X], [np.exp(X)]))
    assert not repro.checks[0].same
    assert "native code generation" in repro.verdict


def test_a_native_engine_that_fails_says_so(tmp_path, monkeypatch):
    def boom(self, inputs, **kw):
        raise RuntimeError("segfault averted")

    monkeypatch.setattr(Executable, "run", boom)
    repro = write(tmp_path, ([X], [np.exp(X)]))
    assert repro.checks[0].detail == "failed: RuntimeError: segfault averted"
    assert "native engine fails" in repro.verdict


def test_synthetic_inputs_follow_the_signature(tmp_path):
    repro = write(tmp_path, None)
    assert repro.inputs_kind == "synthetic"
    assert np.load(repro.input_files[0]).shape == (4,) and repro.shapes == ["float32 (4,)"]
    assert [c.what for c in repro.checks] == ["native engine vs reference interpreter"]
    assert "unconfirmed" in repro.verdict
    assert "Inputs: synthetic" in (repro.folder / "README.md").read_text()


def test_an_interpreted_artifact_has_no_native_check(tmp_path):
    repro = write(tmp_path, ([X], [np.tanh(X)]), target="reference")
    assert repro.checks[0].detail.startswith("none: the artifact runs on the reference")
    assert repro.verdict.startswith("the cluster's core graph computes other values")


def test_synthetic_sizes_are_tried_until_the_graph_accepts_them():
    sig = Signature(inputs=[{"name": "a", "dtype": "int64", "dims": ["B", 3]},
                            {"name": "b", "dtype": "float32", "dims": ["B*2"]},
                            {"name": "m", "dtype": "bool", "dims": []}], outputs=[])
    seen = []

    def runs(arrays):
        seen.append(arrays[0].shape[0])
        if arrays[0].shape[0] != 2:
            raise ValueError("B must be 2")

    arrays, env = synthetic_inputs(sig, runs)
    assert env == {"B": 2} and seen == [4, 3, 2]
    assert arrays[0].shape == (2, 3) and arrays[0].dtype == np.int64
    assert arrays[0].min() >= 0 and arrays[0].max() < 3
    assert arrays[1].shape == (4,) and arrays[2].dtype == bool
    with pytest.raises(RuntimeError, match="no synthetic inputs fit"):
        synthetic_inputs(sig, lambda arrays: 1 / 0)
