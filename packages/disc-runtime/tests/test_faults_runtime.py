"""Runtime faults, standalone (no compiler, no framework): every way a cache entry can be
damaged on disk is detected by its sha256 (or its manifest) and the entry rebuilt; several
processes racing on one key all succeed with one entry; one executable called from 8
threads at once gives every caller its own right answer; 10,000 calls do not grow memory.

disc-core's tests/test_faults_native.py repeats the compiler-dependent promises with real native
modules (C compilation, dlopen) and covers the missing C compiler.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import threading
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pytest
from disc_runtime_testkit import TESTS, slow_affine_builder, subprocess_env

from disc_runtime import (
    Artifact,
    CacheCorruptionWarning,
    CompileCache,
    Executable,
    cache_key,
)

DAMAGE = ("empty", "truncate", "flip_byte", "append", "delete", "replace_with_dir")


def _damage(file: Path, how: str) -> None:
    data = file.read_bytes()
    if how == "empty":
        file.write_bytes(b"")
    elif how == "truncate":
        file.write_bytes(data[: len(data) // 2])
    elif how == "flip_byte":
        i = len(data) // 3
        file.write_bytes(data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1:])
    elif how == "append":
        file.write_bytes(data + b"0")
    elif how == "delete":
        file.unlink()
    else:
        file.unlink()
        file.mkdir()


def _never(path: Path) -> Artifact:
    raise AssertionError("build must not be called")


@pytest.mark.parametrize("how", DAMAGE)
@pytest.mark.parametrize("target", ["manifest.json", "manifest.sha256", "params.json"])
def test_every_damage_to_every_file_is_detected_and_rebuilt(tmp_path: Path, target: str,
                                                            how: str) -> None:
    key = cache_key({"g": f"{target}-{how}"})
    CompileCache(tmp_path).get_or_build(key, slow_affine_builder(key))
    entry = tmp_path / "v1" / key[:2] / key
    _damage(entry / target, how)
    cache = CompileCache(tmp_path)
    builds: list = []
    with pytest.warns(CacheCorruptionWarning, match="corrupt"):
        artifact, source = cache.get_or_build(key, slow_affine_builder(key, log=builds))
    assert (source, len(builds), cache.rebuilt_corrupt) == ("miss", 1, 1)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(Executable.load(artifact)(x, x)[0], x * 3)
    with warnings.catch_warnings():  # the rebuilt entry is sound: a quiet disk hit
        warnings.simplefilter("error")
        assert CompileCache(tmp_path).get_or_build(key, _never)[1] == "disk"
    assert CompileCache(tmp_path).info()["entries"] == 1


def test_manifest_still_valid_json_after_damage_is_caught(tmp_path: Path) -> None:
    """The damage the seal exists for: a dim name changed in the signature leaves valid
    JSON that passes every field check, and would validate inputs against the wrong
    shapes."""
    key = cache_key({"g": "dims"})
    CompileCache(tmp_path).get_or_build(key, slow_affine_builder(key))
    manifest = tmp_path / "v1" / key[:2] / key / "manifest.json"
    text = manifest.read_text()
    assert text.count('"S"') == 3
    manifest.write_text(text.replace('"S"', '"T"', 1))
    with pytest.warns(CacheCorruptionWarning, match="does not match manifest.sha256"):
        assert CompileCache(tmp_path).get_or_build(key, slow_affine_builder(key))[1] == "miss"


def test_unsealed_artifacts_load_but_are_not_trusted_as_cache_entries(tmp_path: Path) -> None:
    """An artifact written before manifests were sealed still loads (``disc run``); as a
    cache entry, a missing seal is damage like any other."""
    key = cache_key({"g": "unsealed"})
    CompileCache(tmp_path).get_or_build(key, slow_affine_builder(key))
    entry = tmp_path / "v1" / key[:2] / key
    (entry / "manifest.sha256").unlink()
    assert not Artifact.load(entry).manifest_sealed
    with pytest.warns(CacheCorruptionWarning, match="no manifest.sha256"):
        artifact, source = CompileCache(tmp_path).get_or_build(key, slow_affine_builder(key))
    assert source == "miss" and artifact.manifest_sealed


def test_damage_after_loading_is_caught_by_verify(tmp_path: Path) -> None:
    """A loaded artifact whose file changes later fails ``verify()``; the next process's
    cache lookup discards and rebuilds it (the sha256 is checked on every disk load)."""
    key = cache_key({"g": "late"})
    artifact, _ = CompileCache(tmp_path).get_or_build(key, slow_affine_builder(key))
    _damage(artifact.path("params.json"), "flip_byte")
    with pytest.raises(Exception, match="sha256"):
        artifact.verify()
    with pytest.warns(CacheCorruptionWarning):
        assert CompileCache(tmp_path).get_or_build(key, slow_affine_builder(key))[1] == "miss"


def test_entry_replaced_by_a_file_is_rebuilt(tmp_path: Path) -> None:
    key = cache_key({"g": "file"})
    CompileCache(tmp_path).get_or_build(key, slow_affine_builder(key))
    entry = tmp_path / "v1" / key[:2] / key
    for f in entry.iterdir():
        f.unlink()
    entry.rmdir()
    entry.write_text("not a directory")
    cache = CompileCache(tmp_path)
    with pytest.warns(CacheCorruptionWarning):
        artifact, source = cache.get_or_build(key, slow_affine_builder(key))
    assert source == "miss" and entry.is_dir()


def _race(tmp_path: Path, key: str, n: int, env: dict[str, str]) -> list[dict]:
    """``n`` processes (cache_race_worker.py) released together on one key: their results."""
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, str(TESTS / "cache_race_worker.py"),
                               str(tmp_path / "cache"), key, str(go),
                               str(tmp_path / f"result{i}.json")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for i in range(n)]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"result{i}.json.ready").exists() for i in range(n)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    go.write_text("go")
    for p in procs:
        _out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    return [json.loads((tmp_path / f"result{i}.json").read_text()) for i in range(n)]


def test_four_processes_race_on_one_key(tmp_path: Path) -> None:
    """The two-process race of test_runtime_cache.py with four: all succeed, exactly one
    builds (the others wait on its build lock and load its entry: one compile and three
    disk hits, as the ranks of a job on one machine see it), one entry, nothing left in
    staging."""
    key = cache_key({"g": "race4"})
    results = _race(tmp_path, key, 4, subprocess_env())
    entry = tmp_path / "cache" / "v1" / key[:2] / key
    assert all(r["directory"] == str(entry) and r["z"] == [[3.0, 3.0], [3.0, 3.0]]
               for r in results)
    assert sorted((r["source"], r["built"]) for r in results) == [
        ("disk", 0), ("disk", 0), ("disk", 0), ("miss", 1)], results
    cache = CompileCache(tmp_path / "cache")
    assert cache.info()["entries"] == 1
    assert not list((tmp_path / "cache" / "v1" / ".staging").iterdir())


def test_eight_threads_call_one_executable(tmp_path: Path) -> None:
    """Each thread runs its own shapes 200 times; every result is its own (no state shared
    between calls leaks one caller's inputs or sizes into another's result)."""
    key = cache_key({"g": "threads"})
    artifact, _ = CompileCache(tmp_path).get_or_build(key, slow_affine_builder(key))
    exe = Executable.load(artifact)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((i + 1, 2 * i + 3)).astype(np.float32) for i in range(8)]
    errors: list[str] = []
    barrier = threading.Barrier(8)

    def work(i: int) -> None:
        barrier.wait()
        for _ in range(200):
            (z,) = exe(xs[i], xs[i])
            if z.shape != xs[i].shape or not np.array_equal(z, xs[i] * 3):
                errors.append(f"thread {i}: got {z.shape}")
                return

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert exe.stats.snapshot()["calls"] == 8 * 200


def test_ten_thousand_calls_do_not_grow_memory(tmp_path: Path) -> None:
    """tracemalloc counts every Python-level allocation (numpy's buffers included): after
    a warm-up, 10,000 calls may leave < 1 MB more allocated than before them (one leaked
    8-byte output per call would already be 80 KB of arrays plus their objects)."""
    key = cache_key({"g": "memory"})
    artifact, _ = CompileCache(tmp_path).get_or_build(key, slow_affine_builder(key))
    exe = Executable.load(artifact)
    x = np.ones((4, 8), np.float32)
    for _ in range(200):
        exe(x, x)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(10_000):
            exe(x, x)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 1 << 20, f"10,000 calls grew traced memory by {grown} bytes"


def test_without_the_build_lock_racing_builders_still_agree(tmp_path: Path) -> None:
    """DISC_CACHE_LOCK_TIMEOUT=0 (or a file system without locks): both processes build,
    the loser of the publishing rename uses the winner's entry; one entry either way."""
    key = cache_key({"g": "race-nolock"})
    results = _race(tmp_path, key, 2, {**subprocess_env(), "DISC_CACHE_LOCK_TIMEOUT": "0"})
    assert all(r["z"] == [[3.0, 3.0], [3.0, 3.0]] for r in results)
    assert [r["built"] for r in results] == [1, 1]  # no lock: both built
    assert CompileCache(tmp_path / "cache").info()["entries"] == 1


def test_a_build_that_builds_its_own_key_again_does_not_wait_on_itself(
        tmp_path: Path, monkeypatch) -> None:
    """flock conflicts between two opens of one file even in one process: a nested build
    of the key being built (another CompileCache on the same directory) must go ahead, not
    wait DISC_CACHE_LOCK_TIMEOUT for its own lock."""
    monkeypatch.setenv("DISC_CACHE_LOCK_TIMEOUT", "600")
    key = cache_key({"g": "nested-build"})
    done: list[str] = []

    def build(path: Path):
        CompileCache(tmp_path).get_or_build(key, slow_affine_builder(key))
        return slow_affine_builder(key)(path)

    worker = threading.Thread(
        target=lambda: done.append(CompileCache(tmp_path).get_or_build(key, build)[1]))
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "the nested build waited on its own build lock"
    assert done == ["miss"]
