"""The Keras training demo (examples/tf_keras_train.py) runs end to end with small
settings: losses match plain TensorFlow within its tolerance (its exit status), and the
report says the train step's math ran compiled."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "tf_keras_train.py"


def test_keras_training_demo(capsys):
    spec = importlib.util.spec_from_file_location("tf_keras_train", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--quick", "--steps", "22"]) == 0
    out = capsys.readouterr().out
    assert "max rel diff" in out and "speedup" in out and "DISC compilations" in out
    step = next(line for line in out.splitlines() if line.startswith("train step:"))
    compiled, total = (int(v) for v in step.split()[2].split("/"))
    assert compiled > total // 2, step
