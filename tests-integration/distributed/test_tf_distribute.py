"""Keras ``fit`` under tf.distribute with DISC: MirroredStrategy over two logical CPUs in
one process (and a custom training loop there), and MultiWorkerMirroredStrategy with two
local worker processes (gRPC collectives on localhost).

Each job trains plain TensorFlow and then DISC from the same initial weights
(``tf_jobs.py``). Checked here: the final weights and per-epoch losses of both against a
float64 NumPy run of the same SGD on the whole global batches (what data parallelism must
reproduce) and against each other; collectives stay in TensorFlow; DISC compiled each
distinct cluster once, replicas and workers included (the workers share one cold cache:
one builds each entry, and the DiscLaunch op library, the other waits on its lock and
loads it); no fallback.

Needs TensorFlow (the ``tf`` tox env runs this file); 1-2 minutes on 2 cores.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("disc_tf")

import tf_jobs  # noqa: E402  (the problem's constants and data; imports no TensorFlow)
from ranks import child_env, free_port, run_job  # noqa: E402

from disc_core.report import Report, load  # noqa: E402

JOBS = Path(__file__).parent / "tf_jobs.py"

#: relative error allowed per variable (norm) and per epoch loss, float32 against float64
RTOL = 1e-4
TIME_LIMIT = 240


def _env(cache: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = child_env({"DISC_CACHE_DIR": str(cache), "TF_CPP_MIN_LOG_LEVEL": "2"})
    for inherited in ("DISC_REPORT", "TF_CONFIG"):  # only what the job sets
        env.pop(inherited, None)
    env.update(extra or {})
    return env


# -- the reference: the same training in float64 NumPy, one process, global batches -----

def reference_training() -> tuple[list[float], list[np.ndarray]]:
    """Per-epoch losses (Keras's: batch losses weighted by batch size) and final weights
    of SGD on the MSE of Dense(tanh) -> Dense, batch after batch in order."""
    x, y, weights = tf_jobs.problem()
    x, y = x.astype(np.float64), y.astype(np.float64)
    w1, b1, w2, b2 = (w.astype(np.float64) for w in weights)
    losses = []
    for _epoch in range(tf_jobs.EPOCHS):
        total = 0.0
        for start in range(0, tf_jobs.SAMPLES, tf_jobs.GLOBAL_BATCH):
            xb, yb = x[start:start + tf_jobs.GLOBAL_BATCH], y[start:start + tf_jobs.GLOBAL_BATCH]
            n = len(xb)
            h = np.tanh(xb @ w1 + b1)
            err = h @ w2 + b2 - yb
            total += float(np.mean(err ** 2)) * n
            dp = 2.0 * err / err.size
            dz = (dp @ w2.T) * (1.0 - h ** 2)
            grads = (xb.T @ dz, dz.sum(0), h.T @ dp, dp.sum(0))
            w1, b1, w2, b2 = (w - tf_jobs.LEARNING_RATE * g
                              for w, g in zip((w1, b1, w2, b2), grads))
        losses.append(total / tf_jobs.SAMPLES)
    return losses, [w1, b1, w2, b2]


def assert_training_matches(run: dict, ref_losses: list[float], ref_weights: list[np.ndarray],
                            what: str) -> None:
    for i, (got, want) in enumerate(zip(run["weights"], ref_weights)):
        got = np.asarray(got, dtype=np.float64)
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err < RTOL, f"{what}: weight {i} off by {err:.2e} (relative norm)"
    np.testing.assert_allclose(run["losses"], ref_losses, rtol=RTOL, err_msg=what)


def test_reference_trains():
    """The reference is a training run, not a constant: the loss falls and weights move."""
    losses, weights = reference_training()
    _, _, initial = tf_jobs.problem()
    assert losses[-1] < losses[0]
    assert all(np.linalg.norm(w - w0) > 1e-3 for w, w0 in zip(weights, initial))


# -- what the reports say ---------------------------------------------------------------

def clusters_by_key(report: Report) -> dict[str, list[tuple[int, object]]]:
    """Cluster key -> [(index of the run that recorded it, cluster record)]."""
    runs = {run.id: i for i, run in enumerate(report.runs)}
    out: dict[str, list[tuple[int, object]]] = defaultdict(list)
    for graph in report.graphs:
        for cluster in graph.clusters:
            out[cluster.key].append((runs[graph.run], cluster))
    return out


def assert_collectives_stay_in_tf(report: Report) -> None:
    nodes = [n for g in report.graphs for n in g.nodes]
    collectives = [n for n in nodes if n.op.startswith("Collective")]
    assert collectives, "the replicated step has no collective: nothing was distributed"
    for n in collectives:
        assert n.status.value == "fallback" and n.reason.value == "framework_op", n
    clustered = {name for g in report.graphs for c in g.clusters for name in c.nodes}
    assert not clustered & {n.name for n in collectives}


def assert_ran_compiled(report: Report, steps: int) -> None:
    assert report.graphs
    for graph in report.graphs:
        assert graph.clusters, f"{graph.name}: no cluster"
        for c in graph.clusters:
            assert c.engine is not None and c.engine.value == "native", c
            assert c.calls == graph.calls == steps, (graph.name, c)


def steps_per_fit() -> int:
    return tf_jobs.EPOCHS * -(-tf_jobs.SAMPLES // tf_jobs.GLOBAL_BATCH)


#: the conv model's steps
EPOCHS_STEPS_CONV = tf_jobs.EPOCHS * -(-tf_jobs.CONV_SAMPLES // tf_jobs.GLOBAL_BATCH)


# -- the jobs -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mirrored_job(tmp_path_factory) -> tuple[dict, Report]:
    """The MirroredStrategy process's results and DISC report (Keras fit, then a custom
    loop, each plain and with DISC), from a cold cache."""
    tmp = tmp_path_factory.mktemp("mirrored")
    cache = tmp / "cache"
    out, report_path = tmp / "mirrored.json", tmp / "report.json"
    run_job([[sys.executable, str(JOBS), "mirrored", str(out)]],
            envs=[_env(cache, {"DISC_REPORT": str(report_path)})], timeout=TIME_LIMIT)
    return json.loads(out.read_text()), load(report_path)


def _only(report: Report, graph_name: str, index: int = 0) -> Report:
    """The ``index``-th graph named ``graph_name`` (in the order the process traced them:
    the MLP's Keras train function is the first ``multi_step_on_iterator``, the conv
    model's the second)."""
    graphs = [g for g in report.graphs if g.name == graph_name]
    return Report(runs=report.runs, graphs=graphs[index:index + 1])


def _mlp_graphs(report: Report) -> list:
    return _only(report, "multi_step_on_iterator").graphs + _only(report, "train_step").graphs


def test_mirrored_strategy_compiles_each_cluster_once(mirrored_job):
    """Across the whole process (both trainings, both replicas): every distinct cluster
    compiled once, every other occurrence loaded; the replicas' copies of the forward and
    backward pass are the same graph on another device and share their compilation."""
    result, report = mirrored_job
    by_key = clusters_by_key(report)
    for key, records in by_key.items():
        assert sum(c.cache_misses for _, c in records) == 1, (key, records)
        assert all(c.cache_misses + c.cache_hits == 1 for _, c in records)
    assert sum(result[run]["compiles"] for run in ("disc", "loop_disc", "conv_disc")) == \
        len(by_key)
    assert result["loop_disc"]["op_library_builds"] == 1  # cold cache: built once
    for graph in _mlp_graphs(report):
        # each replica's backward pass is one cluster, the same graph on its own device
        # (a replica's forward may differ: replica 0's takes in ops of the cross-replica
        # reduction placed on its device)
        name = graph.name
        backward = [c for c in graph.clusters if any("TanhGrad" in n for n in c.nodes)]
        assert len(backward) == 2, (name, backward)
        assert backward[0].key == backward[1].key, name
        assert sum(c.cache_misses for c in backward) <= 1, name


def test_mirrored_strategy_keras_fit(mirrored_job):
    result, report = mirrored_job
    assert result["replicas"] == 2
    ref_losses, ref_weights = reference_training()
    assert_training_matches(result["plain"], ref_losses, ref_weights, "plain TF, mirrored")
    assert_training_matches(result["disc"], ref_losses, ref_weights, "DISC, mirrored")
    assert result["disc"]["fallback_warnings"] == []
    fit = _only(report, "multi_step_on_iterator")
    assert len(fit.graphs) == 1  # one train function, traced once for both epochs
    assert_ran_compiled(fit, steps_per_fit())
    assert_collectives_stay_in_tf(fit)


def test_mirrored_strategy_custom_loop(mirrored_job):
    """``strategy.run`` inside a tf.function, gradients all-reduced by the step itself."""
    result, report = mirrored_job
    ref_losses, ref_weights = reference_training()
    assert_training_matches(result["loop_plain"], ref_losses, ref_weights, "plain TF, loop")
    assert_training_matches(result["loop_disc"], ref_losses, ref_weights, "DISC, loop")
    assert result["loop_disc"]["fallback_warnings"] == []
    loop = _only(report, "train_step")
    assert len(loop.graphs) == 1  # a new iterator each epoch, one trace
    assert_ran_compiled(loop, steps_per_fit())
    assert_collectives_stay_in_tf(loop)


@pytest.fixture(scope="module")
def multi_worker_job(tmp_path_factory) -> tuple[list[dict], list[Report]]:
    """Two MultiWorkerMirroredStrategy workers on localhost sharing one cold cache: each
    one's results and DISC report, in task order."""
    tmp = tmp_path_factory.mktemp("workers")
    cache = tmp / "cache"  # cold: no op library, no compiled cluster
    workers = 2
    cluster = {"worker": [f"localhost:{free_port()}" for _ in range(workers)]}
    outs = [tmp / f"worker{i}.json" for i in range(workers)]
    reports = [tmp / f"report{i}.json" for i in range(workers)]
    envs = [_env(cache, {"TF_CONFIG": json.dumps({"cluster": cluster,
                                                  "task": {"type": "worker", "index": i}}),
                         "DISC_REPORT": str(reports[i])})
            for i in range(workers)]
    run_job([[sys.executable, str(JOBS), "worker", str(out)] for out in outs], envs=envs,
            timeout=TIME_LIMIT)
    results = [json.loads(out.read_text()) for out in outs]
    assert [r["task"] for r in results] == list(range(workers))
    return results, [load(p) for p in reports]


def test_mirrored_strategy_conv_batchnorm_adam(mirrored_job):
    """Batch norm's moving statistics, Adam's slots and the metrics under MirroredStrategy:
    every weight (moving statistics included) and loss as plain TensorFlow's."""
    result, report = mirrored_job
    plain, disc = result["conv_plain"], result["conv_disc"]
    assert disc["fallback_warnings"] == []
    assert len(plain["weights"]) == len(disc["weights"]) == 7  # BN: 2 weights, 2 statistics
    for i, (a, b) in enumerate(zip(plain["weights"], disc["weights"])):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        err = np.linalg.norm(b - a) / np.linalg.norm(a)
        assert err < RTOL, f"weight {i} off by {err:.2e}"
    np.testing.assert_allclose(disc["losses"], plain["losses"], rtol=RTOL)
    assert plain["losses"][-1] < plain["losses"][0]
    conv = _only(report, "multi_step_on_iterator", 1)
    assert len(conv.graphs) == 1
    assert_ran_compiled(conv, EPOCHS_STEPS_CONV)
    assert_collectives_stay_in_tf(conv)
    ops = {n.op for g in conv.graphs for n in g.nodes if n.status.value == "compiled"}
    assert {"Conv2D", "Conv2DBackpropFilter"} <= ops, ops


def test_multi_worker_mirrored_strategy_keras_fit(multi_worker_job):
    results, worker_reports = multi_worker_job
    workers = len(results)
    ref_losses, ref_weights = reference_training()
    for r in results:
        assert r["replicas"] == workers
        assert_training_matches(r["plain"], ref_losses, ref_weights,
                                f"plain TF, worker {r['task']}")
        assert_training_matches(r["disc"], ref_losses, ref_weights,
                                f"DISC, worker {r['task']}")
        assert r["disc"]["fallback_warnings"] == []
    # the workers hold one model: their weights agree exactly after the all-reduces
    for a, b in zip(results[0]["disc"]["weights"], results[1]["disc"]["weights"]):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

    for r in worker_reports:  # the DISC training's train function, then the mixed one's
        assert [g.name for g in r.graphs] == ["multi_step_on_iterator"] * 2
    merged = Report.merge(Report(runs=r.runs, graphs=r.graphs[:1]) for r in worker_reports)
    assert len(merged.runs) == workers
    assert_ran_compiled(merged, steps_per_fit())
    assert_collectives_stay_in_tf(merged)
    by_key = clusters_by_key(merged)
    assert by_key
    # one compile for all ranks: each cluster built by one worker, loaded by the other
    for key, records in by_key.items():
        assert sorted(run for run, _ in records) == list(range(workers)), (key, records)
        assert sum(c.cache_misses for _, c in records) == 1, (key, records)
        assert sum(c.cache_hits for _, c in records) == workers - 1, (key, records)
    assert sum(r["disc"]["compiles"] for r in results) == len(by_key)
    # the DiscLaunch op library too: one worker built it, the other waited and loaded it
    assert sorted(r["disc"]["op_library_builds"] for r in results) == [0, 1]


def test_multi_worker_job_survives_one_worker_falling_back(multi_worker_job):
    """DISC's compiler fails on worker 1 only: its step runs in TensorFlow (warnings and
    compile_error in its report) while worker 0 runs DISC's; the collectives still pair
    up, the training is the reference's and the workers' weights stay equal."""
    results, worker_reports = multi_worker_job
    ref_losses, ref_weights = reference_training()
    for r in results:
        assert_training_matches(r["mixed"], ref_losses, ref_weights, f"mixed, worker {r['task']}")
    for a, b in zip(results[0]["mixed"]["weights"], results[1]["mixed"]["weights"]):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert results[0]["mixed"]["fallback_warnings"] == []
    assert results[0]["mixed"]["compiles"] == 0  # loads what the first DISC training built
    warned = results[1]["mixed"]["fallback_warnings"]
    assert warned and all("injected compile failure" in w for w in warned), warned
    disc_graph, failing_graph = worker_reports[0].graphs[1], worker_reports[1].graphs[1]
    assert disc_graph.clusters and all(
        c.engine is not None and c.engine.value == "native" and c.calls == disc_graph.calls
        for c in disc_graph.clusters)
    reasons = {n.reason.value for n in failing_graph.nodes if n.reason is not None}
    assert "compile_error" in reasons
    assert not any(c.engine is not None and c.engine.value == "native"
                   for c in failing_graph.clusters)
