from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from disc_runtime_testkit import AFFINE_SIGNATURE, TESTS, slow_affine_builder, subprocess_env

from disc_runtime import (
    Artifact,
    CacheCorruptionWarning,
    CompileCache,
    DiscRuntimeError,
    Executable,
    cache_key,
    default_cache,
    default_cache_dir,
)


def graph_key(x: np.ndarray, y: np.ndarray) -> str:
    """What a compiler would hash: fingerprint, dtypes, ranks, versions, target - no dims."""
    return cache_key(
        {
            "graph": "affine-fingerprint",
            "inputs": [[a.dtype.name, a.ndim] for a in (x, y)],
            "versions": {"disc-runtime": "0.1.0"},
            "target": "cpu",
        }
    )


def test_cache_key_is_canonical() -> None:
    a = cache_key({"b": [1, 2], "a": {"y": 1, "x": "s"}})
    b = cache_key({"a": {"x": "s", "y": 1}, "b": (1, 2)})
    assert a == b and len(a) == 64 and int(a, 16) >= 0
    assert cache_key({"a": 1}) != cache_key({"a": "1"})
    with pytest.raises(TypeError):
        cache_key({"a": {1, 2}})
    with pytest.raises(TypeError):
        cache_key({1: "a"})  # type: ignore[dict-item]


def test_five_shapes_one_entry_one_build(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path)
    builds: list = []
    sources = []
    for b, s in [(1, 1), (2, 3), (4, 5), (7, 2), (3, 9)]:
        x = np.ones((b, s), np.float32)
        y = np.full((b, s), 0.5, np.float32)
        key = graph_key(x, y)
        artifact, source = cache.get_or_build(key, slow_affine_builder(key, log=builds))
        sources.append(source)
        (z,) = Executable.load(artifact)(x, y)
        np.testing.assert_allclose(z, x * 2 + y)
    assert len(builds) == 1
    assert sources == ["miss", "memory", "memory", "memory", "memory"]
    assert cache.info()["entries"] == 1
    assert (cache.misses, cache.memory_hits, cache.disk_hits) == (1, 4, 0)


def test_memory_hit_then_disk_hit_in_new_instance(tmp_path: Path) -> None:
    key = cache_key({"g": 1})
    first = CompileCache(tmp_path)
    art, source = first.get_or_build(key, slow_affine_builder(key))
    assert source == "miss"
    assert art.directory == first.entry_path(key) == tmp_path / "v1" / key[:2] / key
    assert art.key == key
    assert first.get_or_build(key, _never)[1] == "memory"

    second = CompileCache(tmp_path)
    art2, source2 = second.get_or_build(key, _never)
    assert source2 == "disk" and art2.directory == art.directory
    assert second.get_or_build(key, _never)[1] == "memory"
    assert second.stats.snapshot() == {
        "memory_hits": 1,
        "disk_hits": 1,
        "misses": 0,
        "rebuilt_corrupt": 0,
    }
    no_memory = CompileCache(tmp_path, memory=False)
    assert [no_memory.get_or_build(key, _never)[1] for _ in range(2)] == ["disk", "disk"]


def _never(path: Path) -> Artifact:
    raise AssertionError("build must not be called")


@pytest.mark.parametrize("damage", ["tamper", "truncate_manifest", "delete_file", "wrong_key"])
def test_corrupt_entry_warned_discarded_rebuilt(tmp_path: Path, damage: str) -> None:
    key = cache_key({"g": damage})
    CompileCache(tmp_path).get_or_build(key, slow_affine_builder(key))
    entry = tmp_path / "v1" / key[:2] / key
    if damage == "tamper":
        (entry / "params.json").write_text('{"scale": 1000.0}')
    elif damage == "truncate_manifest":
        text = (entry / "manifest.json").read_text()
        (entry / "manifest.json").write_text(text[:40])
    elif damage == "delete_file":
        (entry / "params.json").unlink()
    else:
        manifest = json.loads((entry / "manifest.json").read_text())
        manifest["key"] = "0" * 64
        (entry / "manifest.json").write_text(json.dumps(manifest))

    cache = CompileCache(tmp_path)
    builds: list = []
    with pytest.warns(CacheCorruptionWarning) as record:
        art, source = cache.get_or_build(key, slow_affine_builder(key, log=builds))
    assert source == "miss" and len(builds) == 1
    assert cache.rebuilt_corrupt == 1 and cache.misses == 1
    message = str(record[0].message)
    assert str(entry) in message and "corrupt" in message
    reloaded = Artifact.load(entry)
    assert json.loads(reloaded.read_text("params.json")) == {"scale": 2.0}
    x = np.ones((1, 2), np.float32)
    np.testing.assert_allclose(Executable.load(art)(x, x)[0], x * 3)
    # and the next fresh instance finds a sound entry again, without warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert CompileCache(tmp_path).get_or_build(key, _never)[1] == "disk"
    assert not list((tmp_path / "v1" / ".trash").iterdir())


def test_build_failure_leaves_nothing(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path)
    key = cache_key({"g": "fail"})

    def build(path: Path) -> Artifact:
        write_partial = path.parent / "junk"
        write_partial.write_text("half")
        raise RuntimeError("compiler crashed")

    with pytest.raises(RuntimeError, match="compiler crashed"):
        cache.get_or_build(key, build)
    assert cache.info()["entries"] == 0
    assert not list((tmp_path / "v1" / ".staging").iterdir())
    assert cache.get_or_build(key, slow_affine_builder(key))[1] == "miss"


def test_build_contract_violations(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path)
    key = cache_key({"g": "contract"})
    with pytest.raises(DiscRuntimeError, match="expected '" + key):
        cache.get_or_build(key, slow_affine_builder("f" * 64))
    with pytest.raises(DiscRuntimeError, match="did not write an artifact"):
        cache.get_or_build(key, lambda path: None)
    with pytest.raises(ValueError, match="invalid cache key"):
        cache.get_or_build("../../etc", _never)


def test_info_and_clear(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path)
    for i in range(3):
        key = cache_key({"g": i})
        cache.get_or_build(key, slow_affine_builder(key))
    info = cache.info()
    assert info["root"] == str(tmp_path / "v1")
    assert info["entries"] == 3 and info["total_bytes"] > 0 and info["memory_entries"] == 3
    assert cache.clear() == 3
    assert cache.info()["entries"] == 0 and cache.info()["memory_entries"] == 0
    key = cache_key({"g": 0})
    assert cache.get_or_build(key, slow_affine_builder(key))[1] == "miss"


def test_default_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISC_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "disc"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "disc"
    monkeypatch.setenv("DISC_CACHE_DIR", str(tmp_path / "explicit"))
    assert default_cache_dir() == tmp_path / "explicit"
    cache = default_cache()
    assert cache is default_cache()
    assert cache.root == tmp_path / "explicit" / "v1"


def test_threads_build_once(tmp_path: Path) -> None:
    import threading

    cache = CompileCache(tmp_path)
    key = cache_key({"g": "threads"})
    builds: list = []
    results: list = []

    def worker() -> None:
        results.append(cache.get_or_build(key, slow_affine_builder(key, delay=0.2, log=builds)))

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1
    assert sorted(s for _, s in results) == ["memory"] * 5 + ["miss"]


def test_two_processes_race_on_one_key(tmp_path: Path) -> None:
    key = cache_key({"g": "race"})
    go = tmp_path / "go"
    procs = []
    for i in range(2):
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    str(TESTS / "cache_race_worker.py"),
                    str(tmp_path / "cache"),
                    key,
                    str(go),
                    str(tmp_path / f"result{i}.json"),
                ],
                env=subprocess_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    deadline = time.monotonic() + 60  # wait until both interpreters are up and waiting
    while not all((tmp_path / f"result{i}.json.ready").exists() for i in range(2)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    go.write_text("go")
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    results = [json.loads((tmp_path / f"result{i}.json").read_text()) for i in range(2)]
    # one builds (0.5 s); the other waits on its build lock and loads the published entry
    assert sorted((r["source"], r["built"]) for r in results) == [("disk", 0), ("miss", 1)]
    entry = tmp_path / "cache" / "v1" / key[:2] / key
    for r in results:
        assert r["directory"] == str(entry)
        assert r["z"] == [[3.0, 3.0], [3.0, 3.0]]
    final = Artifact.load(entry)
    assert final.key == key and final.signature == AFFINE_SIGNATURE
    cache = CompileCache(tmp_path / "cache")
    assert cache.info()["entries"] == 1
    assert cache.get_or_build(key, _never)[1] == "disk"
    # the loser cleaned up after itself
    assert not list((tmp_path / "cache" / "v1" / ".staging").iterdir())
    assert os.listdir(entry.parent) == [key]


def test_lost_publish_race_uses_winners_entry(tmp_path: Path) -> None:
    """Deterministic version of the race: a competitor publishes while we build."""
    key = cache_key({"g": "lost-race"})
    cache = CompileCache(tmp_path)
    winner: list[Artifact] = []

    def build(path: Path) -> Artifact:
        competitor = CompileCache(tmp_path)  # e.g. another process
        winner.append(competitor.get_or_build(key, slow_affine_builder(key))[0])
        return slow_affine_builder(key)(path)

    art, source = cache.get_or_build(key, build)
    assert source == "miss"
    assert art.directory == winner[0].directory == cache.entry_path(key)
    assert art.manifest == winner[0].manifest
    assert os.listdir(cache.entry_path(key).parent) == [key]
    assert not list((tmp_path / "v1" / ".staging").iterdir())


def test_lost_race_against_corrupt_entry_publishes_ours(tmp_path: Path) -> None:
    key = cache_key({"g": "corrupt-race"})
    cache = CompileCache(tmp_path)

    def build(path: Path) -> Artifact:
        bad = slow_affine_builder(key)(cache.entry_path(key))  # competitor's entry...
        (bad.directory / "params.json").write_text("{}")  # ...is damaged
        return slow_affine_builder(key)(path)

    with pytest.warns(CacheCorruptionWarning, match="corrupt"):
        art, source = cache.get_or_build(key, build)
    assert source == "miss"
    Artifact.load(art.directory)  # ours replaced it and verifies
    assert json.loads(art.read_text("params.json")) == {"scale": 2.0}
