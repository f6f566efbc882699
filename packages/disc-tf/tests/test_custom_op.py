"""The DiscLaunch op library: built once per TensorFlow version, cached, rebuilt when the
cache is cleared."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

from disc_core.bridge.launch import lock_path
from disc_tf import custom_op

SCRIPT = textwrap.dedent("""
    import tensorflow as tf
    import disc_tf
    from disc_tf import custom_op
    lib = custom_op.load_library()
    f = disc_tf.function(lambda x: tf.nn.relu(x) * 2.0 + 1.0)
    out = f(tf.constant([[-1.0, 2.0]]))
    assert out.numpy().tolist() == [[1.0, 5.0]], out
    assert f.uses_disc()
    print("BUILDS", custom_op.build_count(), lib.path)
""")


def _run(cache: str) -> tuple[int, str]:
    env = dict(os.environ, DISC_CACHE_DIR=cache, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("BUILDS")][0]
    _, count, path = line.split(" ", 2)
    return int(count), path


def test_library_is_cached_and_rebuilt_after_clearing(tmp_path):
    cache = str(tmp_path / "cache")
    builds, path = _run(cache)
    assert builds == 1 and os.path.exists(path) and path.startswith(cache)
    assert _run(cache) == (0, path)  # a second process loads the cached library
    shutil.rmtree(os.path.join(cache, "tf_ops"))
    assert _run(cache) == (1, path)  # cleared: built again


def test_a_build_held_by_another_process_is_waited_for_not_repeated(tmp_path, monkeypatch):
    """The workers of a distributed job start on a cold cache together: while one holds the
    build lock, another waits for it, then takes the library it published (here a file
    that is not a library, so loading it fails) instead of building its own."""
    import fcntl
    import threading
    import time

    builds: list[object] = []
    monkeypatch.setattr(custom_op, "_build", lambda target: builds.append(target))
    target = custom_op.library_dir(tmp_path) / custom_op.LIB_NAME
    target.parent.mkdir(parents=True)
    fd = os.open(lock_path(target), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another process is building
    outcome: dict[str, BaseException] = {}

    def load() -> None:
        try:
            custom_op.load_library(tmp_path)
        except BaseException as exc:  # noqa: BLE001  (the result is checked below)
            outcome["error"] = exc

    waiter = threading.Thread(target=load)
    waiter.start()
    time.sleep(1.0)
    assert waiter.is_alive()  # waiting on the lock, not building
    target.write_bytes(b"published by the other process")
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    waiter.join(60)
    assert not waiter.is_alive()
    assert builds == []  # it found the published file after the wait
    assert "error" in outcome and not isinstance(outcome["error"], custom_op.CustomOpUnavailable)


def test_without_a_competitor_the_lock_builds_once(tmp_path, monkeypatch):
    builds: list[object] = []

    def fake_build(target):
        builds.append(target)
        raise custom_op.CustomOpUnavailable("fake build")

    monkeypatch.setattr(custom_op, "_build", fake_build)
    for _ in range(2):  # a failed build is not retried in the same process
        try:
            custom_op.load_library(tmp_path)
        except custom_op.CustomOpUnavailable as exc:
            assert "fake build" in str(exc)
    assert builds == [custom_op.library_dir(tmp_path) / custom_op.LIB_NAME]


def test_library_key_names_the_tensorflow_version():
    import tensorflow as tf

    assert custom_op.library_dir("/x").name.startswith(f"tf{tf.__version__}-")


NO_CXX = textwrap.dedent("""
    import warnings
    import tensorflow as tf
    import disc_tf
    from disc_tf import custom_op
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        f = disc_tf.function(lambda x: tf.nn.relu(x) * 2.0 + 1.0)
        g = disc_tf.function(lambda x: tf.exp(x) - 1.0)
        assert f(tf.constant([[-1.0, 2.0]])).numpy().tolist() == [[1.0, 5.0]]
        assert g(tf.constant([0.0])).numpy().tolist() == [0.0]
    assert f.uses_disc() and g.uses_disc()  # compiled, run through tf.numpy_function
    msgs = [str(w.message) for w in seen if "custom op is unavailable" in str(w.message)]
    assert len(msgs) == 1, msgs
    assert "DISC_CXX=/nonexistent/g++" in msgs[0] and "numpy_function" in msgs[0], msgs
    assert custom_op.build_count() == 0
    print("OK")
""")


def test_missing_compiler_warns_once_and_uses_numpy_function(tmp_path):
    """No C++ compiler: one clear warning, clusters still run (tf.numpy_function)."""
    env = dict(os.environ, DISC_CACHE_DIR=str(tmp_path / "cache"), TF_CPP_MIN_LOG_LEVEL="2",
               DISC_CXX="/nonexistent/g++")
    proc = subprocess.run([sys.executable, "-c", NO_CXX], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]


def test_launch_ops_load_modules_by_file_identity():
    """DiscLaunch dlopens the module itself: it gets the runtime's per-file name, so a cache
    entry rebuilt in this process is loaded anew rather than the discarded file reused."""
    import tensorflow as tf

    import disc_tf
    from disc_runtime.abi import MODULE_FILE

    f = disc_tf.function(lambda x: tf.exp(x) * 2.0 + x, execution="custom_op")
    f(tf.ones([3, 2]))
    entry = next(e for e in f._entries.values() if e.rebuilt is not None)  # noqa: SLF001
    nodes = [n for n in entry.rebuilt.graph.as_graph_def().node if n.op == "DiscLaunch"]
    assert nodes and entry.launches
    path = nodes[0].attr["module_path"].s.decode()
    module = entry.launches[0].executable.artifact.path(MODULE_FILE)
    st = os.stat(module)
    assert os.path.basename(path) == f"{st.st_dev}-{st.st_ino}.so"
    assert os.path.realpath(path) == os.path.realpath(module)
