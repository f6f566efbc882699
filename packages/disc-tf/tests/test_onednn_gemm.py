"""f32 GEMMs of compiled clusters run oneDNN's ``dnnl_sgemm``: disc-tf depends on
``disc-runtime[onednn]`` because TensorFlow exports no GEMM of its own, and oneDNN is
1.1-1.4x numpy's OpenBLAS on transformer GEMM shapes (benchmarks/tf_models.py)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

from disc_runtime import native


def test_the_declared_onednn_is_what_modules_are_given() -> None:
    path = native.onednn_library()
    assert path, "disc-tf depends on disc-runtime[onednn] (onednn-cpu-gomp)"
    address = ctypes.cast(ctypes.CDLL(path).dnnl_sgemm, ctypes.c_void_p).value
    assert native.blas_functions().sgemm_rowmajor == address


# oneDNN logs every dnnl_sgemm call ("gemm_api", problem MxK:KxN) under ONEDNN_VERBOSE=1,
# read when the library loads: the run must be a process of its own
_RUN = """
import numpy as np, tensorflow as tf, disc_tf

@disc_tf.function
def f(x, w, v):
    return tf.nn.relu(tf.matmul(x, w)) + tf.matmul(x, v, transpose_b=True)

rng = np.random.default_rng(0)
w = rng.standard_normal((32, 16)).astype(np.float32)
v = rng.standard_normal((16, 32)).astype(np.float32)
for m in (64, 5, 1, 0, 37):
    x = rng.standard_normal((m, 32)).astype(np.float32)
    want = tf.nn.relu(x @ w) + x @ v.T
    np.testing.assert_allclose(np.asarray(f(x, w, v)), want, rtol=1e-4, atol=1e-4)
print("done")
"""


def test_compiled_matmuls_call_onednn_on_every_shape() -> None:
    env = dict(os.environ, ONEDNN_VERBOSE="1")
    r = subprocess.run([sys.executable, "-c", _RUN], capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    gemms = [line.split(",") for line in r.stdout.splitlines()
             if line.startswith("onednn_verbose,exec,cpu,gemm_api")]
    problems = {fields[-2] for fields in gemms}
    for m in (64, 5, 1, 37):  # an empty product (m = 0) never reaches the GEMM
        assert f"{m}x32:32x16" in problems, (m, sorted(problems))
    assert len(gemms) == 2 * 4  # both products of every non-empty call
