"""``profile=True`` / ``DISC_PROFILE=1``: every compiled cluster's kernels, GEMMs and host
work are timed on both execution paths (the DiscLaunch op passes the executable's slots to
the module it calls; the numpy_function path runs the executable itself), and the report's
clusters list them, one call counted per run, while the results stay TF's."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import rand

import disc_tf
from disc_tf.config import DiscConfig


def _profiles(fn) -> list:
    """The profile of each cluster of ``fn``'s graph, as a report snapshot brings it in."""
    disc_tf.report()  # runs the flush hooks that read the modules' slots
    return [c.profile for c in fn.coverage().clusters]


@pytest.mark.parametrize("execution", ["custom_op", "numpy_function"])
def test_profile_times_every_step_of_every_call(execution):
    w = tf.constant(rand([24, 40], tf.float32, 1))
    # a constant of its own per path: the compile cache would otherwise hand both tests one
    # executable, whose slots count the calls of every launch that runs it
    shift = 1.0 if execution == "custom_op" else 2.0

    def fn(x):
        return tf.nn.relu(tf.matmul(x, w) + shift) * 2.0

    f = disc_tf.function(fn, execution=execution, profile=True,
                         input_signature=[tf.TensorSpec([None, 24], tf.float32)])
    calls = 0
    for n in (5, 1, 33, 0, 7):
        x = rand([n, 24], tf.float32, n)
        np.testing.assert_allclose(f(x).numpy(), fn(x).numpy(), rtol=1e-5, atol=1e-6)
        calls += 1
    (profile,) = _profiles(f)
    assert profile, "no profile recorded"
    kinds = {step.kind for step in profile}
    assert {"host", "library"} <= kinds, kinds  # the GEMM and the module's host work
    assert all(step.calls == calls for step in profile), [s.calls for s in profile]
    assert all(step.seconds >= 0 for step in profile)
    assert sum(step.seconds for step in profile) > 0
    assert any("dot_general" in step.ops for step in profile if step.kind == "library")


def test_profile_is_off_by_default_and_read_from_the_environment(monkeypatch):
    assert DiscConfig.resolve().profile is False
    monkeypatch.setenv("DISC_PROFILE", "1")
    assert DiscConfig.resolve().profile is True

    def fn(x):
        return tf.tanh(x) * 3.0 + 1.0

    monkeypatch.delenv("DISC_PROFILE")
    f = disc_tf.function(fn, input_signature=[tf.TensorSpec([None], tf.float32)])
    f(rand([9], tf.float32, 2))
    assert _profiles(f) == [None]
