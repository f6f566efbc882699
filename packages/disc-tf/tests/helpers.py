"""Parity helpers: run a function through DISC and through TF eager, compare."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

import disc_tf

TOL = {tf.float32: (1e-5, 1e-6), tf.float64: (1e-12, 1e-13)}


def assert_same(got: Any, want: Any) -> None:
    got_l, want_l = tf.nest.flatten(got), tf.nest.flatten(want)
    assert len(got_l) == len(want_l)
    for g, w in zip(got_l, want_l):
        g, w = tf.convert_to_tensor(g), tf.convert_to_tensor(w)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert tuple(g.shape) == tuple(w.shape), (g.shape, w.shape)
        if w.dtype.is_floating:
            rtol, atol = TOL[w.dtype]
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g.numpy(), w.numpy())


def assert_within_sum_bound(got: Any, exact: np.ndarray, magnitude: np.ndarray,
                            terms: int) -> None:
    """``got`` (a float32 sum of ``terms`` products per element, in any order) against the
    float64 ``exact`` value, within the a priori rounding bound of such a sum:
    |got − exact| ≤ terms·ε·Σ|products| (Higham's γₙ, ``magnitude`` = Σ|products|). Where
    a sum cancels, its float32 result is off by far more than a relative tolerance of
    the result allows, in TF as in DISC, differently for each summation order."""
    got = np.asarray(got)
    assert got.shape == exact.shape, (got.shape, exact.shape)
    error = np.abs(got.astype(np.float64) - exact)
    bound = terms * np.finfo(got.dtype).eps * magnitude
    worst = np.unravel_index(np.argmax(error - bound), error.shape)
    assert np.all(error <= bound), (worst, got[worst], exact[worst], bound[worst])


def check_parity(fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]], *,
                 compiled_ops: Sequence[str] = (), min_cluster_size: int = 1,
                 input_signature: Sequence[tf.TensorSpec] | None = None,
                 reference: Callable[..., Any] | None = None) -> Any:
    """Run ``fn`` through DISC on every input set (one rank/dtype signature, many shapes)
    and compare with TF eager (``reference`` instead of ``fn`` where TF's CPU kernels
    lack the form ``fn`` traces, e.g. NCHW convolutions); the ops in ``compiled_ops``
    must have been compiled, and the whole stream must cost exactly one compilation."""
    f = disc_tf.function(fn, min_cluster_size=min_cluster_size, input_signature=input_signature)
    before = disc_tf.compile_count()
    for inputs in input_sets:
        assert_same(f(*inputs), (reference or fn)(*inputs))
    assert f.uses_disc(), "nothing ran through DISC"
    graph = f.coverage()
    status = {n.op: n.status.value for n in graph.nodes}
    for op in compiled_ops:
        assert op in status, f"{op} not in the traced graph ({sorted(status)})"
        bad = [(n.name, n.detail) for n in graph.nodes if n.op == op and
               n.status.value != "compiled"]
        assert not bad, f"{op} not compiled: {bad}"
    # one compilation (or cache lookup) per cluster for the whole stream of shapes, and
    # every call of every cluster ran compiled code
    assert graph.clusters
    forwarding = {n.name for n in graph.nodes if n.detail and "nothing to compute" in n.detail}
    for c in graph.clusters:
        if set(c.nodes) <= forwarding:
            continue  # a cluster that only forwards inputs (Identity) launches nothing
        assert c.cache_misses + c.cache_hits == 1, c
        assert c.calls == len(input_sets), c
    assert disc_tf.compile_count() - before <= len(graph.clusters)
    return f


def rand(shape: Sequence[int], dtype: tf.DType = tf.float32, seed: int = 0,
         low: float = -2.0, high: float = 2.0) -> tf.Tensor:
    rng = np.random.default_rng(seed + sum(shape) * 31 + len(shape))
    if dtype.is_floating:
        return tf.constant(rng.uniform(low, high, shape).astype(dtype.as_numpy_dtype))
    if dtype == tf.bool:
        return tf.constant(rng.integers(0, 2, shape).astype(bool))
    return tf.constant(rng.integers(int(low) - 3, int(high) + 4, shape).astype(
        dtype.as_numpy_dtype))


def dilated_kernel(w, d):
    """The kernel with ``d - 1`` zeros between taps: a dilated convolution is the plain
    convolution with it. TF's CPU kernels have no dilated backprop, so the dilated cases
    are checked against the gradients of this equivalent form."""
    for axis in (0, 1):
        k = w.shape[axis]
        w = tf.stack([w] + [tf.zeros_like(w)] * (d - 1), axis=axis + 1)
        shape = list(w.shape)
        w = tf.reshape(w, shape[:axis] + [k * d] + shape[axis + 2:])
        w = tf.gather(w, tf.range((k - 1) * d + 1), axis=axis)
    return w
