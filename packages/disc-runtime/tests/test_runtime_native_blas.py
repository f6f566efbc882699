"""The BLAS lookup of the native engine is public API: bridges with their own C ops (disc-tf's
launch kernel) call ``disc_run`` themselves and must pass the same GEMMs and per-thread
thread-count setter that the engine passes."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import sys

import pytest
from disc_runtime_testkit import subprocess_env

from disc_runtime import native


def test_blas_functions_are_found_in_numpys_openblas() -> None:
    fns = native.blas_functions()
    assert isinstance(fns, native.BlasFunctions)
    assert fns.sgemm and fns.dgemm  # numpy wheels ship an ILP64 OpenBLAS
    assert native.find_blas() == (fns.sgemm, fns.dgemm)


def test_blas_thread_setter_sets_the_calling_threads_count() -> None:
    address = native.blas_thread_setter()
    assert address == native.blas_functions().set_num_threads_local
    assert address, "numpy's OpenBLAS (>= 0.3.27) exports openblas_set_num_threads_local"
    setter = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(address)
    previous = setter(1)
    try:
        assert previous >= 1
        assert setter(1) == 1  # the count just set comes back as the previous one
    finally:
        setter(previous)


def test_blas_functions_unpack_into_four_addresses() -> None:
    """disc-tf's custom_op.py unpacks ``blas_functions()`` into four addresses."""
    sgemm, dgemm, local, rowmajor = native.blas_functions()
    fns = native.blas_functions()
    assert (sgemm, dgemm, local, rowmajor) == (fns.sgemm, fns.dgemm, fns.set_num_threads_local,
                                               fns.sgemm_rowmajor)


_ONEDNN_CHOICE = """
import sys
from disc_runtime import native
native._onednn_sgemm = lambda: 4096  # stands in for an installed oneDNN's dnnl_sgemm
if sys.argv[1] == "prefer":
    native.use_blas_library(sys.argv[2])
print(native.blas_functions().sgemm_rowmajor)
"""


@pytest.mark.parametrize("how, expected", [("default", "4096"), ("prefer", "0"),
                                           ("override", "0")])
def test_onednn_takes_f32_gemms_only_beside_numpys_openblas(how, expected) -> None:
    """oneDNN joins numpy's OpenBLAS (which keeps f64); a bridge's own BLAS or
    ``DISC_BLAS_LIB`` is used alone, so either turns oneDNN off."""
    env = subprocess_env()
    env.pop("DISC_BLAS_LIB", None)
    if how == "override":
        env["DISC_BLAS_LIB"] = _openblas_path()
    r = subprocess.run([sys.executable, "-c", _ONEDNN_CHOICE, how, _openblas_path()],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [expected]


def test_onednn_library_is_found_through_its_distribution(monkeypatch, tmp_path) -> None:
    from importlib import metadata

    lib = tmp_path / "lib" / "libdnnl.so.3"
    target = metadata.PackagePath("../../lib/libdnnl.so.3")
    target.locate = lambda: lib  # type: ignore[method-assign]

    class Dist:
        files = [metadata.PackagePath("../../lib/README"), target, metadata.PackagePath("x")]

    def distribution(name: str) -> Dist:
        if name != "onednn-cpu-gomp":
            raise metadata.PackageNotFoundError(name)
        return Dist()

    monkeypatch.setattr(metadata, "distribution", distribution)
    assert native.onednn_library() == str(lib)
    monkeypatch.setattr(native, "ONEDNN_DISTRIBUTIONS", ("not-installed",))
    assert native.onednn_library() is None
    assert native._onednn_sgemm() == 0


def test_no_blas_library_gives_zeros(tmp_path) -> None:
    code = ("import numpy, os, glob\n"
            "from disc_runtime import native\n"
            "native.glob.glob = lambda pattern: []\n"  # hide numpy's OpenBLAS
            "print(tuple(native.blas_functions()), native.blas_thread_setter())\n")
    env = subprocess_env()
    env["DISC_BLAS_LIB"] = str(tmp_path / "missing.so")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["(0,", "0,", "0,", "0)", "0"]


def _openblas_path() -> str:
    import glob
    import os

    import numpy as np

    paths = glob.glob(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs",
                                   "libscipy_openblas64_*.so"))
    assert paths, "numpy wheels ship an ILP64 OpenBLAS"
    return paths[0]


def _fortran_sgemm(address: int):
    i64p = ctypes.POINTER(ctypes.c_int64)
    fp = ctypes.POINTER(ctypes.c_float)
    return ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, i64p, i64p, i64p, fp, fp,
                            i64p, fp, i64p, fp, fp, i64p)(address)


def test_the_gemm_found_is_the_fortran_ilp64_interface() -> None:
    """Modules call ``sgemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)``
    with every argument by pointer and 64-bit integers (column-major)."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5), dtype=np.float32)  # row-major A[3,5], B[5,4]
    b = rng.standard_normal((5, 4), dtype=np.float32)
    c = np.full((3, 4), np.nan, np.float32)  # beta = 0 must not read C
    sgemm = _fortran_sgemm(native.blas_functions().sgemm)
    i64 = ctypes.c_int64

    def ptr(x):
        return x.ctypes.data_as(ctypes.POINTER(ctypes.c_float))

    # column-major C' (4x3) = B' (4x5) A' (5x3)
    sgemm(b"N", b"N", i64(4), i64(3), i64(5), ctypes.c_float(1), ptr(b), i64(4), ptr(a),
          i64(5), ctypes.c_float(0), ptr(c), i64(4))
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_use_blas_library_is_preferred_until_the_environment_overrides_it(tmp_path) -> None:
    path = _openblas_path()
    code = ("import sys\n"
            "from disc_runtime import native\n"
            "from disc_runtime.errors import EngineError\n"
            "before = native.blas_functions()\n"
            "try:\n"
            "    native.use_blas_library(sys.argv[1])\n"
            "except EngineError as exc:\n"
            "    print('refused', 'no ILP64 Fortran-interface sgemm' in str(exc))\n"
            "found = native.use_blas_library(sys.argv[2])\n"
            "print(found == native.blas_functions(), found.sgemm != 0)\n")
    libc = ctypes.util.find_library("c")
    env = subprocess_env()
    r = subprocess.run([sys.executable, "-c", code, libc, path], capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["refused", "True", "True", "True"]
    # DISC_BLAS_LIB wins over a bridge's preference: a second copy of the library (loaded
    # at other addresses) named by the environment is the one used
    copy = tmp_path / "libcopy_openblas64.so"
    copy.write_bytes(open(path, "rb").read())
    env["DISC_BLAS_LIB"] = str(copy)
    code2 = ("import ctypes, sys\n"
             "from disc_runtime import native\n"
             "native.use_blas_library(sys.argv[1])\n"
             "chosen = native.blas_functions().sgemm\n"
             "addr = lambda p: ctypes.cast(ctypes.CDLL(p).scipy_sgemm_64_, ctypes.c_void_p).value\n"
             "print(chosen == addr(sys.argv[2]), chosen == addr(sys.argv[1]))\n")
    r = subprocess.run([sys.executable, "-c", code2, path, str(copy)], capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "False"]


# -- the measured choice between a bridge's BLAS and numpy's OpenBLAS ----------------------

@pytest.fixture
def preferred_copy(tmp_path, monkeypatch):
    """A second copy of numpy's OpenBLAS (other addresses) preferred as a bridge would
    prefer its framework's BLAS; the process-wide choice is restored afterwards."""
    copy = tmp_path / "libpreferred_openblas64.so"
    copy.write_bytes(open(_openblas_path(), "rb").read())
    monkeypatch.delenv("DISC_BLAS_LIB", raising=False)
    monkeypatch.delenv("DISC_BLAS_TUNE", raising=False)
    saved = list(native._preferred)
    native._preferred[:] = [str(copy)]
    native.blas_functions.cache_clear()
    yield str(copy)
    native._preferred[:] = saved
    native.blas_functions.cache_clear()


def _timed(monkeypatch, seconds_by_path: dict[str, float]) -> list[int]:
    """Make the GEMM timer report ``seconds_by_path`` (by library); returns the sgemm
    addresses it was asked to time."""
    asked: list[int] = []
    by_address = {native._load_blas(p).sgemm: s for p, s in seconds_by_path.items()}

    def fake(fns: native.BlasFunctions) -> float:
        asked.append(fns.sgemm)
        return by_address[fns.sgemm]

    monkeypatch.setattr(native, "_gemm_seconds", fake)
    return asked


@pytest.mark.parametrize("openblas_seconds,switch", [(0.85, True), (0.95, False), (1.2, False)])
def test_a_preferred_blas_gives_way_only_to_a_clearly_faster_one(
        monkeypatch, preferred_copy, openblas_seconds, switch) -> None:
    asked = _timed(monkeypatch, {preferred_copy: 1.0, _openblas_path(): openblas_seconds})
    chosen = native.blas_functions()
    winner = _openblas_path() if switch else preferred_copy
    assert chosen.sgemm == native._load_blas(winner).sgemm
    # numpy's OpenBLAS comes with oneDNN for f32 when installed (and is measured so)
    assert chosen.sgemm_rowmajor == (native._onednn_sgemm() if switch else 0)
    assert len(asked) == 4  # each library twice, alternately
    choice = native.blas_choice()
    assert choice["library"] == winner
    assert choice["f32_gemm"] == (native.onednn_library() or winner if switch else winner)
    assert choice["seconds"] == {preferred_copy: 1.0, _openblas_path(): openblas_seconds}


def test_a_measurement_is_kept_for_the_next_process(monkeypatch, preferred_copy) -> None:
    asked = _timed(monkeypatch, {preferred_copy: 1.0, _openblas_path(): 0.5})
    native.blas_functions()
    assert len(asked) == 4
    first = native.blas_choice()
    native.blas_functions.cache_clear()  # as a new process starts
    chosen = native.blas_functions()
    assert len(asked) == 4, "measured again with the same libraries on the same CPU"
    assert chosen.sgemm == native._load_blas(_openblas_path()).sgemm
    again = native.blas_choice()
    assert again["seconds"] == first["seconds"]
    assert again["reason"].endswith("(measured by an earlier process on this machine)")
    # a changed library (here: rewritten, so its modification time differs) is measured
    os.utime(preferred_copy, ns=(1, 1))
    native.blas_functions.cache_clear()
    native.blas_functions()
    assert len(asked) == 8


def test_the_preference_holds_unmeasured_when_tuning_is_off_or_overridden(
        monkeypatch, preferred_copy) -> None:
    asked = _timed(monkeypatch, {preferred_copy: 1.0, _openblas_path(): 0.1})
    monkeypatch.setenv("DISC_BLAS_TUNE", "0")
    native.blas_functions.cache_clear()
    assert native.blas_functions().sgemm == native._load_blas(preferred_copy).sgemm
    assert native.blas_choice() == {"library": preferred_copy, "f32_gemm": preferred_copy,
                                    "reason": "preferred by the bridge"}
    monkeypatch.delenv("DISC_BLAS_TUNE")
    monkeypatch.setenv("DISC_BLAS_LIB", preferred_copy)
    native.blas_functions.cache_clear()
    assert native.blas_functions().sgemm == native._load_blas(preferred_copy).sgemm
    assert native.blas_choice()["reason"] == "DISC_BLAS_LIB"
    assert asked == []


def test_gemm_timing_calls_every_layout_correctly() -> None:
    """The timer's row-major wrapper computes op(A) op(B) for each measured layout, so the
    times are of real products (and a wrong calling convention would show here)."""
    import numpy as np

    from disc_runtime import blas_timing

    fns = native._load_blas(_openblas_path())
    rng = np.random.default_rng(3)
    for ta, tb, m, n, k in blas_timing.GEMM_SHAPES:
        m, n, k = m // 8 + 1, n // 8 + 3, k // 8 + 2  # small, odd: layouts, not speed
        a = rng.standard_normal((k, m) if ta else (m, k), dtype=np.float32)
        b = rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
        c = np.full((m, n), np.nan, np.float32)
        blas_timing.fortran_sgemm(fns.sgemm, ta, tb, a, b, c)
        np.testing.assert_allclose(c, (a.T if ta else a) @ (b.T if tb else b), rtol=1e-4,
                                   atol=1e-4)
    seconds = blas_timing.sgemm_seconds(fns.sgemm, fns.set_num_threads_local, repeats=1)
    assert 0 < seconds < 10


def test_onednn_timing_calls_every_layout_correctly() -> None:
    """The same for oneDNN's row-major sgemm, when the onednn extra is installed."""
    import numpy as np

    from disc_runtime import blas_timing

    address = native._onednn_sgemm()
    if not address:
        pytest.skip("oneDNN is not installed (pip install disc-runtime[onednn])")
    rng = np.random.default_rng(4)
    for ta, tb, m, n, k in blas_timing.GEMM_SHAPES:
        m, n, k = m // 8 + 1, n // 8 + 3, k // 8 + 2
        a = rng.standard_normal((k, m) if ta else (m, k), dtype=np.float32)
        b = rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
        c = np.full((m, n), np.nan, np.float32)
        blas_timing.onednn_sgemm(address, ta, tb, a, b, c)
        np.testing.assert_allclose(c, (a.T if ta else a) @ (b.T if tb else b), rtol=1e-4,
                                   atol=1e-4)
    assert 0 < blas_timing.onednn_sgemm_seconds(address, repeats=1) < 10
