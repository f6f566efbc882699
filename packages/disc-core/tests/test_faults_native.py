"""Runtime faults with real native modules (C compiled, dlopened): a damaged cache entry is
detected by its sha256 and rebuilt; two processes compiling one cluster at once both
succeed with one entry; 8 threads calling one executable get right results; 10,000 calls
grow memory by < 1 MB; without a C compiler DISC warns once and interprets, correctly.

disc-runtime's tests/test_faults_runtime.py covers the same promises without a compiler (every
damage to every file, four-process races) and docs/reliability.md lists them all.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, catalog, interpret
from disc_runtime import CacheCorruptionWarning, CompileCache

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
RNG = np.random.default_rng(0)


def stitched():
    """Softmax rows, a column sum over the leading dims and a GEMM: one row, one column
    kernel and a BLAS call, so the faults below hit more than one kind of step."""
    b = GraphBuilder("faults")
    B, S, H = b.symbol("B"), b.symbol("S"), b.symbol("H")
    x, w = b.input("x", "f32", [B, S, H]), b.input("w", "f32", [H, 8])
    mx = b.reduce(x, kind="max", axes=[2])
    e = b.exp(b.sub(x, b.broadcast_in_dim(mx, shape=[B, S, H], broadcast_dimensions=[0, 1])))
    sm = b.div(e, b.broadcast_in_dim(b.reduce(e, kind="sum", axes=[2]), shape=[B, S, H],
                                     broadcast_dimensions=[0, 1]))
    col = b.reduce(b.mul(x, sm), kind="sum", axes=[0, 1])
    y = b.dot_general(sm, w, lhs_batch=[], rhs_batch=[], lhs_contract=[2], rhs_contract=[0])
    return b.build(sm, col, y)


def inputs(b: int, s: int, h: int) -> list[np.ndarray]:
    return [RNG.standard_normal((b, s, h)).astype(np.float32),
            RNG.standard_normal((h, 8)).astype(np.float32)]


def check(exe, xs) -> None:
    for got, want in zip(exe.run(xs), interpret(stitched(), xs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def entry_of(cache: CompileCache) -> Path:
    (entry,) = [p for shard in cache.root.iterdir() if not shard.name.startswith(".")
                for p in shard.iterdir()]
    return entry


# -- a damaged entry is detected and rebuilt --------------------------------------------------

def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    else:  # one flipped bit in the middle: the file still loads (an .so still dlopens)
        i = len(data) // 2
        path.write_bytes(data[:i] + bytes([data[i] ^ 0x10]) + data[i + 1:])


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A cache directory holding the entry of stitched(), compiled once."""
    root = tmp_path_factory.mktemp("pristine")
    assert Compiler(CompileCache(root), target="native").compile(stitched()).artifact.engine \
        == "native"
    return root


def copy_of(pristine: Path, dest: Path) -> Path:
    """A copy at a path this process never loaded a module from: a module's file that is
    damaged while this process has it mapped (dlopen) would crash it (SIGBUS on a
    truncated mapping), and dlopen of a path already loaded returns the loaded module
    (see test_rebuilt_entry_is_the_module_that_runs)."""
    shutil.copytree(pristine, dest)
    return dest


@pytest.mark.parametrize("target, how", [
    ("native/module.so", "truncate"), ("native/module.so", "flip"),
    ("native/module.so", "empty"), ("graph.disc", "flip"), ("manifest.json", "truncate"),
    ("manifest.json", "flip"), ("manifest.sha256", "empty"),
])
def test_damaged_native_entry_is_rebuilt(pristine, tmp_path, target: str, how: str) -> None:
    root = copy_of(pristine, tmp_path / "cache")
    _damage(entry_of(CompileCache(root)) / target, how)
    again = Compiler(CompileCache(root), target="native")
    with pytest.warns(CacheCorruptionWarning, match="corrupt"):
        exe = again.compile(stitched())
    assert again.cache.rebuilt_corrupt == 1 and again.stats.compiles == 1
    assert exe.artifact.engine == "native"
    check(exe, inputs(3, 5, 7))
    with warnings.catch_warnings():  # the rebuilt entry is sound
        warnings.simplefilter("error", CacheCorruptionWarning)
        third = Compiler(CompileCache(root), target="native")
        check(third.compile(stitched()), inputs(2, 1, 9))
    assert third.stats.disk_hits == 1 and third.stats.compiles == 0


def _mapped(path: Path) -> list[str]:
    with open("/proc/self/maps") as f:
        return sorted({ln.split(None, 5)[5].strip() for ln in f
                       if len(ln.split(None, 5)) == 6 and str(path) in ln})


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux /proc")
def test_rebuilt_entry_is_the_module_that_runs(pristine, tmp_path) -> None:
    root = copy_of(pristine, tmp_path / "cache")
    entry = entry_of(CompileCache(root))
    Compiler(CompileCache(root), target="native").compile(stitched())  # loads module.so
    _damage(entry / "graph.disc", "flip")  # damage that cannot crash a mapped module
    with pytest.warns(CacheCorruptionWarning):
        Compiler(CompileCache(root), target="native").compile(stitched())
    module = entry / "native" / "module.so"
    assert _mapped(module) == [str(module)], _mapped(module)  # not "... (deleted)"


# -- two processes compile one cluster at once ------------------------------------------------

_RACER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import numpy as np
    import test_faults_native as t
    from disc_core import Compiler
    from disc_runtime import CompileCache
    cache_dir, go, out = sys.argv[1:4]
    c = Compiler(CompileCache(cache_dir), target="native")
    Path(out + ".ready").write_text("ready")
    deadline = time.monotonic() + 60
    while not Path(go).exists() and time.monotonic() < deadline:
        time.sleep(0.001)
    exe = c.compile(t.stitched())
    t.check(exe, t.inputs(2, 3, 33))
    Path(out).write_text(json.dumps({"engine": exe.artifact.engine,
                                     "dir": str(exe.artifact.directory),
                                     "compiles": c.stats.compiles,
                                     "disk_hits": c.stats.disk_hits}))
""")


def test_two_processes_compile_one_cluster_at_once(tmp_path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]))
    go = tmp_path / "go"
    outs = [tmp_path / f"r{i}.json" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, str(tmp_path / "cache"), str(go),
                               str(out)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for out in outs]
    deadline = time.monotonic() + 120
    while not all(Path(str(o) + ".ready").exists() for o in outs):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
            [p.communicate()[1] for p in procs if p.poll() is not None]
        time.sleep(0.01)
    go.write_text("go")
    for p in procs:
        _out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    results = [json.loads(o.read_text()) for o in outs]
    assert all(r["engine"] == "native" for r in results)
    assert len({r["dir"] for r in results}) == 1  # both run the one published entry
    assert sum(r["compiles"] for r in results) >= 1
    cache = CompileCache(tmp_path / "cache")
    assert cache.info()["entries"] == 1
    assert not list((cache.root / ".staging").iterdir())


# -- 8 threads, one executable ----------------------------------------------------------------

def test_eight_threads_call_one_native_executable(tmp_path) -> None:
    """Each thread its own shapes (serial and OpenMP-parallel sizes, a size-0 and size-1
    dim): symbol bindings, output buffers and the arena are per call."""
    exe = Compiler(CompileCache(tmp_path), target="native").compile(stitched())
    shapes = [(1, 1, 1), (2, 3, 5), (0, 4, 7), (3, 0, 2), (4, 64, 130), (1, 257, 129),
              (7, 9, 33), (2, 300, 64)]
    data = [inputs(*s) for s in shapes]
    wants = [interpret(stitched(), xs) for xs in data]
    errors: list[str] = []
    barrier = threading.Barrier(8)

    def work(i: int) -> None:
        barrier.wait()
        for _ in range(25):
            for got, want in zip(exe.run(data[i]), wants[i]):
                if got.shape != want.shape or not np.allclose(got, want, rtol=1e-4,
                                                              atol=1e-4):
                    errors.append(f"thread {i} shape {shapes[i]}")
                    return

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


# -- memory over 10,000 calls -----------------------------------------------------------------

def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs Linux /proc")
def test_ten_thousand_calls_grow_memory_by_less_than_1mb(tmp_path) -> None:
    """Both measures, because they see different leaks: tracemalloc sees every Python
    allocation (outputs, signatures, stats), the resident set size sees the C side too
    (the module's arena and the runtime's cffi buffers; a leak of 100 bytes per call
    would be 1 MB). Inputs are small so the calls, not the data, dominate."""
    exe = Compiler(CompileCache(tmp_path), target="native").compile(stitched())
    xs = inputs(2, 3, 16)
    for _ in range(500):  # warm-up: allocator pools, lazily created objects
        exe.run(xs)
    gc.collect()
    tracemalloc.start()
    try:
        rss0, traced0 = _rss(), tracemalloc.get_traced_memory()[0]
        for _ in range(10_000):
            exe.run(xs)
        gc.collect()
        traced = tracemalloc.get_traced_memory()[0] - traced0
        rss = _rss() - rss0
    finally:
        tracemalloc.stop()
    assert traced < 1 << 20, f"10,000 calls: tracemalloc grew by {traced} bytes"
    assert rss < 1 << 20, f"10,000 calls: the resident set grew by {rss} bytes"


# -- no C compiler ----------------------------------------------------------------------------

_NO_CC = textwrap.dedent("""
    import warnings
    import numpy as np
    from disc_core import Compiler, catalog, interpret, jit
    from disc_runtime import CompileCache
    import sys
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c1 = Compiler(CompileCache(sys.argv[1]))
        c2 = Compiler(CompileCache(sys.argv[1]))
        f = jit(catalog.softmax(), cache=CompileCache(sys.argv[1]))
        x = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32)
        y = f(x)[0]
    assert c1.target == c2.target == "reference", c1.target
    exe = c2.compile(catalog.layernorm())
    assert exe.artifact.engine == "reference"
    ln = [np.ones((2, 3, 4), np.float32), np.ones(4, np.float32), np.zeros(4, np.float32)]
    np.testing.assert_allclose(exe.run(ln)[0], interpret(catalog.layernorm(), ln)[0])
    np.testing.assert_allclose(y, interpret(catalog.softmax(), [x])[0], rtol=1e-6)
    try:
        Compiler(CompileCache(sys.argv[1]), target="native")
    except RuntimeError as exc:
        native_error = str(exc)
    else:
        native_error = ""
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    print("WARNINGS", len(msgs))
    for m in msgs:
        print("MESSAGE", m)
    print("NATIVE", native_error)
""")


def test_missing_c_compiler_warns_once_and_interprets(tmp_path) -> None:
    """DISC_CC names a compiler that does not exist, CC is unset and PATH is empty, so no
    cc/gcc/clang can be found (native/toolchain.find_toolchain's search order)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "DISC_CC", "PATH")}
    env.update(DISC_CC=str(tmp_path / "no-such-cc"), PATH="",
               PYTHONPATH=os.pathsep.join([os.path.dirname(__file__),
                                           os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", _NO_CC, str(tmp_path / "cache")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "WARNINGS 1" in lines, r.stdout
    (message,) = [ln for ln in lines if ln.startswith("MESSAGE")]
    assert "no C compiler" in message and "reference interpreter" in message
    assert f"DISC_CC ({tmp_path / 'no-such-cc'})" in message  # names what was asked for
    assert "needs a C compiler" in next(ln for ln in lines if ln.startswith("NATIVE"))


def test_a_named_compiler_that_does_not_run_is_not_replaced(tmp_path, monkeypatch) -> None:
    """DISC_CC naming nothing runnable is an error naming it, even with cc on PATH."""
    from disc_core.native.toolchain import CompilerNotFound, find_toolchain

    monkeypatch.setenv("DISC_CC", str(tmp_path / "typo-gcc"))
    with pytest.raises(CompilerNotFound, match="DISC_CC .*typo-gcc.* is not an executable"):
        find_toolchain()
    with pytest.raises(CompilerNotFound, match="the compiler asked for .*nope"):
        find_toolchain(str(tmp_path / "nope"))
    monkeypatch.delenv("DISC_CC")
    assert find_toolchain().cc  # the machine's own compiler, as before


def test_catalog_graphs_used_here_exist() -> None:
    """The subprocess scripts above use these catalog entries."""
    assert catalog.softmax().outputs and catalog.layernorm().outputs
