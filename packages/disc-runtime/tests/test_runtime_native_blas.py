"""The BLAS lookup of the native engine is public API: bridges with their own C ops (disc-tf's
launch kernel) call ``disc_run`` themselves and must pass the same GEMMs and per-thread
thread-count setter that the engine passes."""

from __future__ import annotations

import ctypes
import subprocess
import sys

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


def test_blas_functions_unpack_into_three_addresses() -> None:
    """disc-tf's custom_op.py unpacks ``blas_functions()`` into three addresses."""
    sgemm, dgemm, local = native.blas_functions()
    fns = native.blas_functions()
    assert (sgemm, dgemm, local) == (fns.sgemm, fns.dgemm, fns.set_num_threads_local)


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
    assert r.stdout.split() == ["(0,", "0,", "0)", "0"]
