"""``disc bisect`` on a TensorFlow program whose Tanh converter is wrong on purpose (a
script-level patch: Tanh lowered as sin): it finds exactly the cluster holding Tanh and
writes a reproducer with synthetic inputs (TF runs clusters inside its C++ launch op, which
does not hand their inputs back), which ``disc-run`` executes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np

SCRIPT = '''
import dataclasses
import sys

import numpy as np
import tensorflow as tf

import disc_tf
from disc_tf.converters import math as tf_math
from disc_tf.converters.registry import CONVERTERS

# the bug to find: DISC lowers Tanh as sin
CONVERTERS._entries["Tanh"] = dataclasses.replace(CONVERTERS._entries["Tanh"],
                                                  fn=tf_math._unary("sin"))


@disc_tf.function
def model(x):
    h = tf.nn.relu(x * 2.0 + 1.0)
    h = tf.sigmoid(h)  # excluded (DISC_EXCLUDE_OPS): the clusters end here
    return tf.tanh(h * 3.0 - 1.0) + x


rng = np.random.default_rng(0)
outs = {f"batch{n}": model(tf.constant(rng.standard_normal((n, 5)), tf.float32)).numpy()
        for n in (3, 4)}
np.savez(sys.argv[1], **outs)
'''


def test_bisect_finds_the_cluster_with_the_wrong_converter(tmp_path):
    script = tmp_path / "model.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "DISC_EXCLUDE_OPS": "Sigmoid"}
    subprocess.run([sys.executable, str(script), str(tmp_path / "plain.npz")], check=True,
                   env={**env, "DISC_REPORT": str(tmp_path / "plain.json")},
                   capture_output=True, cwd=tmp_path, timeout=600)
    clusters = [c for g in json.loads((tmp_path / "plain.json").read_text())["graphs"]
                for c in g["clusters"]]
    assert len(clusters) == 2 and all(c.get("key") for c in clusters)
    [wrong] = [c["key"] for c in clusters if any("Tanh" in n for n in c["nodes"])]

    done = subprocess.run(
        [sys.executable, "-m", "disc_core.cli", "bisect", "--output", "out.npz", "--repro",
         "repro", "--", sys.executable, str(script), "out.npz"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert re.findall(r"^  key (\w+)$", out, re.M) == [wrong]
    assert "(tensorflow), cluster 1:" in out and "Tanh" in out
    assert "(inputs synthetic: random arrays matching the signature;" in out
    assert "native engine vs reference interpreter: agree" in out
    assert "converter (lowering) bug is likely but unconfirmed" in out

    folder = tmp_path / "repro" / wrong[:16]
    command = re.search(r"^disc-run .*$", (folder / "README.md").read_text(), re.M).group(0)
    run = subprocess.run([sys.executable, "-m", "disc_runtime", *command.split()[1:]],
                         cwd=folder, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    np.testing.assert_allclose(np.load(folder / "out" / "output_0.npy"),
                               np.load(folder / "expected" / "reference_0.npy"), rtol=1e-5,
                               atol=1e-6)
