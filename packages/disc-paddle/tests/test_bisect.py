"""``disc bisect`` on a Paddle program whose tanh converter is wrong on purpose (a
script-level patch: pd_op.tanh lowered as sin): it finds exactly the cluster holding tanh
and writes a reproducer with synthetic inputs (Paddle runs clusters inside its launch op,
which does not hand their inputs back), which ``disc-run`` executes."""

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
import paddle

import disc_paddle
from disc_paddle.converters import math as pd_math
from disc_paddle.converters.registry import CONVERTERS

# the bug to find: DISC lowers pd_op.tanh as sin
CONVERTERS._entries["pd_op.tanh"] = dataclasses.replace(CONVERTERS._entries["pd_op.tanh"],
                                                        fn=pd_math._unary("sin"))


class Model(paddle.nn.Layer):
    def forward(self, x):
        h = paddle.nn.functional.relu(x * 2.0 + 1.0)
        h = paddle.nn.functional.sigmoid(h)  # excluded: the clusters end here
        return paddle.tanh(h * 3.0 - 1.0) + x


model = disc_paddle.compile(Model(), excluded_ops="pd_op.sigmoid")
rng = np.random.default_rng(0)
outs = {f"batch{n}": model(paddle.to_tensor(rng.standard_normal((n, 5)).astype("float32")))
        .numpy() for n in (3, 4)}
np.savez(sys.argv[1], **outs)
'''


def test_bisect_finds_the_cluster_with_the_wrong_converter(tmp_path):
    script = tmp_path / "model.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    subprocess.run([sys.executable, str(script), str(tmp_path / "plain.npz")], check=True,
                   env={**env, "DISC_REPORT": str(tmp_path / "plain.json")},
                   capture_output=True, cwd=tmp_path, timeout=600)
    report = json.loads((tmp_path / "plain.json").read_text())
    ops = {(g["name"], n["name"]): n["op"] for g in report["graphs"] for n in g["nodes"]}
    clusters = [(g["name"], c) for g in report["graphs"] for c in g["clusters"]]
    assert len(clusters) == 2 and all(c.get("key") for _, c in clusters)
    [wrong] = [c["key"] for g, c in clusters
               if "pd_op.tanh" in {ops[g, n] for n in c["nodes"]}]

    done = subprocess.run(
        [sys.executable, "-m", "disc_core.cli", "bisect", "--output", "out.npz", "--repro",
         "repro", "--", sys.executable, str(script), "out.npz"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert re.findall(r"^  key (\w+)$", out, re.M) == [wrong]
    assert "(paddle), cluster 1:" in out and "pd_op.tanh" in out
    assert "(inputs synthetic: random arrays matching the signature;" in out
    assert "native engine vs reference interpreter: agree" in out

    folder = tmp_path / "repro" / wrong[:16]
    command = re.search(r"^disc-run .*$", (folder / "README.md").read_text(), re.M).group(0)
    run = subprocess.run([sys.executable, "-m", "disc_runtime", *command.split()[1:]],
                         cwd=folder, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    np.testing.assert_allclose(np.load(folder / "out" / "output_0.npy"),
                               np.load(folder / "expected" / "reference_0.npy"), rtol=1e-5,
                               atol=1e-6)
