"""``disc bisect`` end to end without a framework: a fake program whose three "clusters"
are real DISC artifacts (run when the selection allows them, else computed by numpy, its
"framework"), one or more of them lowered wrongly on purpose (``FAKE_WRONG=tanh:sin``: ``sin`` for
``tanh``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from disc_runtime import Artifact, CompileCache

PROGRAM = r'''
import os
import sys

import numpy as np

from disc_core import Compiler, parse_graph
from disc_core.bridge import selection
from disc_core.clustering import Cluster, ClusteringResult
from disc_core.report import get_collector, graph_report

FRAMEWORK = {"exp": np.exp, "neg": np.negative, "tanh": np.tanh}
WRONG = dict(w.split(":") for w in os.environ.get("FAKE_WRONG", "").split(",") if w)
TEXT = "func @f(%x: f32[N]) -> (f32[N]) {{\n  %0 = {op}(%x) : f32[N]\n  return %0\n}}\n"
names = list(FRAMEWORK)
clustering = ClusteringResult()
for cid, name in enumerate(names):
    clustering.clusters.append(Cluster(cid, (name,)))
    clustering.cluster_of[name] = cid
report = graph_report("fake_graph", names, clustering, op_type=lambda n: "fake." + n)
recorder = get_collector().add_graph(report, framework="fake")
x = np.linspace(-1, 1, 7, dtype=np.float32)
if os.environ.get("FAKE_NOISE"):
    x = x + np.float32(np.random.default_rng().standard_normal())
results = {}
compiler = Compiler()
for cid, name in enumerate(names):
    exe = compiler.compile(parse_graph(TEXT.format(op=WRONG.get(name, name))))
    if selection.admit(recorder, cid, exe.artifact.key):
        if os.environ.get("FAKE_CRASH") == name:  # DISC breaking the program
            raise SystemExit(f"{name} crashed")
        recorder.cluster_compiled(cid, engine=exe.artifact.engine)
        selection.dump_inputs(exe.artifact.key, [x], lambda: [FRAMEWORK[name](x)])
        results[name] = exe.run([x])[0]
    else:
        results[name] = FRAMEWORK[name](x)
if not os.environ.get("FAKE_SILENT"):
    np.savez(sys.argv[1], **results)
'''


@pytest.fixture
def program(tmp_path, monkeypatch):
    monkeypatch.setenv("DISC_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "program.py"
    path.write_text(PROGRAM)
    return path


def bisect(program: Path, *options: str, **env: str) -> subprocess.CompletedProcess:
    cwd = program.parent
    return subprocess.run(
        [sys.executable, "-m", "disc_core.cli", "bisect", "--output", "out.npz", *options,
         "--", sys.executable, str(program), "out.npz"],
        capture_output=True, text=True, cwd=cwd, timeout=300, env={**os.environ, **env})


def culprit_keys(stdout: str) -> list[list[str]]:
    """The keys of each culprit set, as printed."""
    sets: list[list[str]] = []
    for line in stdout.splitlines():
        if line.startswith("culprit "):
            sets.append([])
        elif (m := re.fullmatch(r"  key ([0-9a-f]{64})", line)) and sets:
            sets[-1].append(m.group(1))
    return sets


def core_ops(key: str) -> str:
    graph = Artifact.load(CompileCache().entry_path(key)).read_text("graph.disc")
    return " ".join(sorted(set(re.findall(r"= (\w+)\(", graph))))


def test_finds_the_wrong_cluster_and_writes_a_reproducer_disc_run_runs(program):
    done = bisect(program, "--repro", "repro", FAKE_WRONG="tanh:sin")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "every cluster compiled (3 cluster keys): tanh: 6 of 7 values differ" in out
    [[key]] = culprit_keys(out)
    assert core_ops(key) == "sin"
    assert "graph 'fake_graph' (fake), cluster 2: 1 ops: fake.tanh" in out
    assert "input #0 x: float32 ['N']" in out
    assert "(inputs recorded: the cluster's real inputs on its first call)" in out
    assert "      inputs: float32 (7,)\n" in out
    assert "native engine vs reference interpreter: agree" in out
    assert "reference interpreter vs fake: output #0: " in out
    assert "a converter (lowering) bug" in out
    folder = program.parent / "repro" / key[:16]
    x = np.linspace(-1, 1, 7, dtype=np.float32)
    np.testing.assert_array_equal(np.load(folder / "inputs" / "input_0.npy"), x)
    np.testing.assert_allclose(np.load(folder / "expected" / "framework_0.npy"), np.tanh(x))
    readme = (folder / "README.md").read_text()
    command = re.search(r"^disc-run .*$", readme, re.M).group(0)
    run = subprocess.run([sys.executable, "-m", "disc_core.cli", "run",
                          *command.split()[1:]], cwd=folder, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    np.testing.assert_allclose(np.load(folder / "out" / "output_0.npy"), np.sin(x), rtol=1e-5)


def test_two_wrong_clusters_are_two_culprits(program):
    done = bisect(program, "--repro", "repro", FAKE_WRONG="exp:cos,tanh:sin")
    assert done.returncode == 0, done.stdout + done.stderr
    found = culprit_keys(done.stdout)
    assert sorted(core_ops(k) for c in found for k in c) == ["cos", "sin"]
    assert [len(c) for c in found] == [1, 1]
    assert "disc bisect: 2 culprit set(s) found" in done.stdout
    for key in (c[0] for c in found):
        assert (program.parent / "repro" / key[:16] / "artifact").is_dir()


def test_clusters_with_one_core_graph_share_a_key_and_a_verdict(program):
    """exp and tanh both lowered to sin: one artifact, so one key standing for both."""
    done = bisect(program, FAKE_WRONG="exp:sin,tanh:sin")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every cluster compiled (2 cluster keys)" in done.stdout
    [[key]] = culprit_keys(done.stdout)
    assert core_ops(key) == "sin"
    assert "cluster 0: 1 ops: fake.exp" in done.stdout
    assert "cluster 2: 1 ops: fake.tanh" in done.stdout


def test_a_cluster_that_breaks_the_program_is_found_like_a_wrong_one(program):
    done = bisect(program, FAKE_CRASH="neg")
    assert done.returncode == 0, done.stdout + done.stderr
    # the program stops at the broken cluster: the clusters after it were never built
    assert "every cluster compiled (2 cluster keys): failed (the command exited with " \
        "status 1" in done.stdout
    assert "neg crashed" in done.stdout
    assert "culprit 1: 1 cluster key(s) whose compilation makes the program fail" in \
        done.stdout
    assert "(inputs synthetic: random arrays matching the signature, none were recorded)" \
        in done.stdout
    [[key]] = culprit_keys(done.stdout)
    assert core_ops(key) == "neg" and "cluster 1: 1 ops: fake.neg" in done.stdout


def test_nothing_to_bisect_when_every_cluster_is_right(program):
    done = bisect(program)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every cluster compiled (3 cluster keys): same" in done.stdout
    assert "nothing to bisect" in done.stdout and "culprit" not in done.stdout


@pytest.mark.parametrize(("env", "message"), [
    ({"FAKE_SILENT": "1"}, "did not write"),
    ({"FAKE_NOISE": "1"}, "results change between two runs with no cluster compiled"),
])
def test_a_program_that_cannot_be_bisected_is_one_error_line(program, env, message):
    done = bisect(program, **env)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("disc: error: ") and message in lines[0]


def test_usage_errors(program):
    done = subprocess.run([sys.executable, "-m", "disc_core.cli", "bisect", "--output", "o.npz",
                           "python", "x.py"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "after --" in done.stderr
