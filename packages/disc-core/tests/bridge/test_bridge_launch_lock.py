"""The launch library's build lock (``disc_core.bridge.launch.build_lock``): processes that
start on one cold cache at once (the ranks of a job) build a library once; the others
wait and find it published. Without the lock every one of them builds."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from disc_core.bridge.launch import build_lock

#: one "build": a slow write of the library, published atomically, counted in a log
_WORKER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from disc_core.bridge.launch import build_lock, publish

    target, log, go, locked = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    while not go.exists():  # start together
        time.sleep(0.005)

    def build():
        if target.exists():
            return
        tmp = target.parent / f"built-{os.getpid()}"
        time.sleep(0.5)
        tmp.write_text("library")
        publish(tmp, target)
        tmp.unlink()
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\\n")

    if locked == "1":
        with build_lock(target):
            build()
    else:
        build()
""")


def _race(tmp_path: Path, n: int, locked: bool) -> list[str]:
    target = tmp_path / "lib" / "ops.so"
    target.parent.mkdir()
    log, go = tmp_path / "builds.log", tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, str(target), str(log), str(go),
                               "1" if locked else "0"], env=env) for _ in range(n)]
    go.touch()
    for p in procs:
        assert p.wait(timeout=60) == 0
    assert target.read_text() == "library"
    return log.read_text().split() if log.exists() else []


def test_processes_on_a_cold_cache_build_the_library_once(tmp_path: Path) -> None:
    assert len(_race(tmp_path, 3, locked=True)) == 1


def test_without_the_lock_each_process_builds(tmp_path: Path) -> None:
    """What the lock prevents (and the check above would miss if the race never happened:
    the same start barrier lets every unlocked process build)."""
    assert len(_race(tmp_path, 3, locked=False)) == 3


def test_a_lock_not_had_in_time_lets_the_build_go_ahead(tmp_path: Path) -> None:
    target = tmp_path / "ops.so"
    with build_lock(target, timeout=5) as held:
        assert held
        # the same file opened again conflicts, as another process's open would
        with build_lock(target, timeout=0.2) as second:
            assert not second
    with build_lock(target, timeout=0) as off:  # 0: never wait (DISC_CACHE_LOCK_TIMEOUT=0)
        assert not off
