"""``disc bisect`` on a torch program whose DISC lowering of tanh is wrong on purpose (a
script-level patch: tanh lowered as sin): it finds exactly the cluster holding tanh, records
its real inputs, and writes a reproducer that ``disc-run`` executes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

import disc_torch
from disc_core import report as disc_core_report

SCRIPT = '''
import sys

import numpy as np
import torch

import disc_torch
import disc_torch.converters.elementwise as elementwise

# the bug to find: DISC lowers aten.tanh as sin
elementwise._UNARY[torch.ops.aten.tanh.default] = "sin"


class Model(torch.nn.Module):
    def forward(self, x):
        h = torch.relu(x * 2.0 + 1.0)
        h = torch.sigmoid(h)  # excluded (DISC_EXCLUDE_OPS): the clusters end here
        h = torch.exp(h * 0.5) - 1.0
        h = torch.sigmoid(h)
        return torch.tanh(h * 3.0 - 1.0) + x


torch.manual_seed(0)
fn = disc_torch.optimize(Model())
with torch.no_grad():
    outs = {f"batch{n}": fn(torch.randn(n, 5)).numpy() for n in (3, 4)}
np.savez(sys.argv[1], **outs)
'''


def test_bisect_finds_the_cluster_with_the_wrong_lowering(tmp_path):
    script = tmp_path / "model.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "DISC_EXCLUDE_OPS": "aten.sigmoid.default",
           "DISC_CACHE_DIR": str(tmp_path / "cache")}
    # the cluster holding tanh, as a plain run's report names it
    subprocess.run([sys.executable, str(script), str(tmp_path / "plain.npz")], check=True,
                   env={**env, "DISC_REPORT": str(tmp_path / "plain.json")},
                   capture_output=True, cwd=tmp_path, timeout=300)
    clusters = [c for g in json.loads((tmp_path / "plain.json").read_text())["graphs"]
                for c in g["clusters"]]
    assert len(clusters) == 3 and all(c.get("key") for c in clusters)
    [wrong] = [c["key"] for c in clusters if "tanh" in c["nodes"]]

    done = subprocess.run(
        [sys.executable, "-m", "disc_core.cli", "bisect", "--output", "out.npz", "--repro",
         "repro", "--", sys.executable, str(script), "out.npz"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    print(out)  # the sample output docs/bisect.md shows
    assert "every cluster compiled (3 cluster keys): batch3: " in out
    assert re.findall(r"^  key (\w+)$", out, re.M) == [wrong]
    assert "disc bisect: 1 culprit set(s) found" in out
    assert "aten.tanh.default" in out and "(torch), cluster 2:" in out
    assert "(inputs recorded: the cluster's real inputs on its first call)" in out
    assert "      inputs: float32 (3, 5), float32 (3, 5)\n" in out  # the first call's batch
    assert "native engine vs reference interpreter: agree" in out
    assert "reference interpreter vs torch: output #0: " in out
    assert "a converter (lowering) bug in the bridge" in out

    folder = tmp_path / "repro" / wrong[:16]
    inputs = sorted((folder / "inputs").glob("input_*.npy"))
    h, x = (np.load(p) for p in inputs[:2])
    assert h.shape == x.shape == (3, 5)  # the first call's batch
    framework = np.load(folder / "expected" / "framework_0.npy")
    np.testing.assert_allclose(framework, np.tanh(h * 3 - 1) + x, rtol=1e-5, atol=1e-6)
    command = re.search(r"^disc-run .*$", (folder / "README.md").read_text(), re.M).group(0)
    run = subprocess.run([sys.executable, "-m", "disc_runtime", *command.split()[1:]],
                         cwd=folder, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    native = np.load(folder / "out" / "output_0.npy")
    np.testing.assert_allclose(native, np.sin(h * 3 - 1) + x, rtol=1e-5, atol=1e-6)
    assert not np.allclose(native, framework, rtol=1e-4, atol=1e-5)


class _Small(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x * 2.0 + 1.0)


def test_a_selection_leaves_clusters_out_and_keeps_no_traced_graphs(tmp_path, monkeypatch):
    """Under DISC_BISECT_CLUSTERS a left-out cluster runs eagerly, is reported with its key
    as excluded_by_user, and the traced-graph cache is not written: it would keep the
    cluster as failed for every later process, whatever that one selects."""
    keys = tmp_path / "keys.txt"
    keys.write_text("")
    monkeypatch.setenv("DISC_BISECT_CLUSTERS", str(keys))
    model = _Small()
    x = torch.randn(3, 4)
    with torch.no_grad():
        torch.testing.assert_close(disc_torch.optimize(model)(x), model(x))
    [cluster] = [c for g in disc_torch.report().graphs for c in g.clusters]
    graph = disc_torch.report().graphs[0]
    assert cluster.key and cluster.engine.value == "framework"
    assert {n.reason.value for n in graph.nodes if n.cluster == cluster.id} == {
        "excluded_by_user"}
    graphs = Path(os.environ["DISC_CACHE_DIR"]) / "torch-graphs-v1"
    assert not graphs.exists() or not any(graphs.iterdir())

    monkeypatch.delenv("DISC_BISECT_CLUSTERS")
    torch._dynamo.reset()
    disc_core_report.get_collector().clear()
    with torch.no_grad():
        torch.testing.assert_close(disc_torch.optimize(_Small())(x), model(x))
    [again] = [c for g in disc_torch.report().graphs for c in g.clusters]
    assert again.key and again.engine.value == "native"
    assert any(graphs.iterdir())  # without a selection the traced graphs are kept
