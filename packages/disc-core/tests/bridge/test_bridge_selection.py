"""DISC_BISECT_CLUSTERS and DISC_BISECT_DUMP: which built clusters run compiled (the kit's
compile_clusters/record_attempts honour it), and the input dump of a reproducer."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from disc_core.bridge import (
    FallbackNotice,
    ReasonCode,
    compile_clusters,
    record_attempts,
    selection,
)
from disc_core.bridge.fallback import DiscFallbackWarning
from disc_core.clustering import Cluster, ClusteringResult
from disc_core.report import Collector, Engine, Status, graph_report

KEY_A, KEY_B = "a" * 64, "b" * 64


@pytest.fixture
def keys_file(tmp_path, monkeypatch):
    def write(*lines: str):
        path = tmp_path / "clusters.txt"
        path.write_text("".join(f"{line}\n" for line in lines))
        monkeypatch.setenv("DISC_BISECT_CLUSTERS", str(path))
        return path

    monkeypatch.delenv("DISC_BISECT_CLUSTERS", raising=False)
    return write


def test_no_selection_allows_every_cluster(keys_file):
    assert selection.allowed_keys() is None
    assert selection.allows(KEY_A) and selection.allows(None)


def test_a_key_file_allows_its_keys_and_prefixes_only(keys_file):
    keys_file(f"{KEY_A}  # graph forward_0, cluster 2", "", "# a comment", "bbbbbbbb")
    assert selection.allowed_keys() == {KEY_A, "bbbbbbbb"}
    assert selection.allows(KEY_A) and selection.allows(KEY_B)
    assert not selection.allows("c" * 64) and not selection.allows(None)
    keys_file("bbb")  # too short to stand for a key
    assert not selection.allows(KEY_B)


def test_an_empty_file_excludes_everything(keys_file):
    keys_file()
    assert selection.allowed_keys() == frozenset() and not selection.allows(KEY_A)


def test_an_unreadable_file_excludes_everything_and_warns(tmp_path, monkeypatch):
    monkeypatch.setenv("DISC_BISECT_CLUSTERS", str(tmp_path / "missing.txt"))
    with pytest.warns(DiscFallbackWarning, match="cannot be read"):
        assert not selection.allows(KEY_A)


def _lowered(n_outputs: int = 1):
    return SimpleNamespace(graph=SimpleNamespace(outputs=[object()] * n_outputs))


def _exe(key: str):
    artifact = SimpleNamespace(key=key, metadata={"native": {}}, engine="native",
                               target="native")
    return SimpleNamespace(artifact=artifact)


def _recorded_graph(clusters: list[list[str]]):
    nodes = [n for c in clusters for n in c]
    clustering = ClusteringResult()
    for cid, members in enumerate(clusters):
        clustering.clusters.append(Cluster(cid, tuple(members)))
        for n in members:
            clustering.cluster_of[n] = cid
    report = graph_report("g", nodes, clustering, op_type=lambda n: "Op")
    return Collector().add_graph(report, framework="fake")


def test_the_kit_leaves_a_cluster_out_by_its_key_and_reports_it(keys_file):
    keys_file(KEY_B)
    keys = {"n0": KEY_A, "n2": KEY_B}
    attempts = compile_clusters(
        [["n0", "n1"], ["n2", "n3"]],
        lambda members: SimpleNamespace(graph=SimpleNamespace(outputs=[1]), first=members[0]),
        None, need_native=True, min_size=1,
        compile=lambda low: (_exe(keys[low.first]), "miss", 0.1))
    assert [(a.key, a.excluded, a.ok) for a in attempts] == [
        (KEY_A, True, False), (KEY_B, False, True)]
    recorder = _recorded_graph([["n0", "n1"], ["n2", "n3"]])
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        record_attempts(recorder, attempts, FallbackNotice(DiscFallbackWarning, "in Fake"))
    graph = recorder.graph
    graph.validate()
    left, kept = graph.clusters
    assert (left.key, left.engine, kept.key, kept.engine) == (
        KEY_A, Engine.FRAMEWORK, KEY_B, Engine.NATIVE)
    by_name = {n.name: n for n in graph.nodes}
    assert (by_name["n0"].status, by_name["n0"].reason) == (
        Status.FALLBACK, ReasonCode.EXCLUDED_BY_USER)
    assert by_name["n2"].status is Status.COMPILED


def test_without_a_selection_the_kit_records_every_key(keys_file):
    attempts = compile_clusters([["n0"]], lambda m: _lowered(), None, need_native=True,
                                min_size=1, compile=lambda low: (_exe(KEY_A), "disk", 0.0))
    recorder = _recorded_graph([["n0"]])
    record_attempts(recorder, attempts, FallbackNotice(DiscFallbackWarning, "in Fake"))
    assert recorder.graph.clusters[0].key == KEY_A
    assert recorder.graph.clusters[0].engine is Engine.NATIVE


def test_dump_saves_a_clusters_first_inputs_once(tmp_path, monkeypatch):
    monkeypatch.delenv("DISC_BISECT_DUMP", raising=False)
    assert selection.dump_inputs("k" * 64, [np.zeros(2)]) is None  # not asked for
    monkeypatch.setenv("DISC_BISECT_DUMP", str(tmp_path))
    key = "d" * 63 + "1"
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    folder = selection.dump_inputs(key, [x, np.empty((4, 0), np.uint8)], lambda: [x * 2])
    assert folder == tmp_path / key and (folder / "done").is_file()
    np.testing.assert_array_equal(np.load(folder / "input_0.npy"), x)
    assert np.load(folder / "input_1.npy").shape == (4, 0)
    np.testing.assert_array_equal(np.load(folder / "framework_0.npy"), x * 2)
    assert selection.dump_inputs(key, [x + 1]) is None  # the first call only
    np.testing.assert_array_equal(np.load(folder / "input_0.npy"), x)


def test_a_failing_framework_run_still_leaves_the_inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("DISC_BISECT_DUMP", str(tmp_path))
    key = "e" * 64

    def broken():
        raise RuntimeError("no eager run")

    with pytest.warns(DiscFallbackWarning, match="were not saved"):
        folder = selection.dump_inputs(key, [np.ones(1)], broken)
    assert (folder / "input_0.npy").is_file() and not (folder / "framework_0.npy").exists()
