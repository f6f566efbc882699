"""sort and top_k: shape rules, reference semantics against Python's stable ``sorted``
(NaN as the largest value, ties by index), verifier and interpreter errors.

Sorting only moves values, so every dtype is compared exactly (NaN == NaN).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disc_core.dtypes import ALL_DTYPES, NUMERIC_DTYPES, DType
from disc_core.ir import TensorType
from disc_core.opdef import Env, InterpretError, VerifyError, get_op


def types(name, operand_types, **attrs):
    op = get_op(name)
    return op.result_types([TensorType.of(*t) for t in operand_types], op.normalize_attrs(attrs))


def run(name, inputs, env=None, **attrs):
    op = get_op(name)
    return op.run(inputs, op.normalize_attrs(attrs), Env(env or {}))


def rand(rng, shape, dt):
    """Few distinct values (many ties); floats get NaN, +-inf and -0.0."""
    if dt is DType.BOOL:
        return rng.random(shape) < 0.5
    if dt.is_int:
        info = np.iinfo(dt.np)
        pool = np.array([info.min, info.max, 0, 1, 2, info.max - 1], dt.np)
        return rng.choice(pool, shape)
    pool = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.0, 3.0], np.float64)
    return rng.choice(pool, shape).astype(dt.np)


def order(row, descending):
    """Stable order with NaN as the largest value."""
    vals = [v.item() for v in (row.astype(np.float64) if row.dtype.kind in "fV" else row)]

    def key(i):
        v = vals[i]
        nan = isinstance(v, float) and math.isnan(v)
        if descending:
            return (0, 0) if nan else (1, -v)
        return (1, 0) if nan else (0, v)

    return sorted(range(len(vals)), key=key)


def oracle(x, axis, descending):
    xm = np.moveaxis(x, axis, -1)
    idx = np.zeros(xm.shape, np.int64)
    for pos in np.ndindex(*xm.shape[:-1]):
        idx[pos] = order(xm[pos], descending)
    idx = np.moveaxis(idx, -1, axis)
    return np.take_along_axis(x, idx, axis), idx


def assert_same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind == "V":  # bfloat16: numpy's NaN-aware compare needs a native float
        got, want = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(got, want)


SHAPES = [(0,), (1,), (7,), (3, 5), (2, 0, 3), (4, 1, 6), (2, 3, 4)]


@pytest.mark.parametrize("dt", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("descending", [False, True])
def test_sort_numerics(dt, descending):
    rng = np.random.default_rng(5)
    for shape in SHAPES:
        x = rand(rng, shape, dt)
        for axis in range(len(shape)):
            vals, idx = run("sort", [x], dimension=axis, descending=descending)
            want_vals, want_idx = oracle(x, axis, descending)
            assert_same(idx, want_idx)
            assert_same(vals, want_vals)


def test_sort_nan_and_ties():
    x = np.array([1.0, np.nan, 3.0, np.nan, 1.0, -0.0, 0.0], np.float32)
    vals, idx = run("sort", [x], dimension=0)
    assert idx.tolist() == [5, 6, 0, 4, 2, 1, 3]
    vals, idx = run("sort", [x], dimension=0, descending=True)
    assert idx.tolist() == [1, 3, 2, 0, 4, 5, 6]
    assert np.isnan(vals[:2]).all() and vals[2:].tolist() == [3.0, 1.0, 1.0, 0.0, 0.0]


@pytest.mark.parametrize("dt", NUMERIC_DTYPES, ids=str)
def test_top_k_numerics(dt):
    rng = np.random.default_rng(6)
    for shape in [(1,), (7,), (3, 5), (2, 0, 4), (4, 1, 6), (0, 3)]:
        x = rand(rng, shape, dt)
        want_vals, want_idx = oracle(x, -1, True)
        for k in sorted({0, 1, shape[-1] // 2, shape[-1]}):
            vals, idx = run("top_k", [x], k=k)
            assert_same(idx, np.ascontiguousarray(want_idx[..., :k]))
            assert_same(vals, np.ascontiguousarray(want_vals[..., :k]))


def test_top_k_ties_and_nan():
    vals, idx = run("top_k", [np.array([1, 3, 3, 2, 3], np.int32)], k=2)
    assert vals.tolist() == [3, 3] and idx.tolist() == [1, 2]
    vals, idx = run("top_k", [np.array([1.0, np.nan, 3.0, np.nan], np.float32)], k=3)
    assert idx.tolist() == [1, 3, 2] and vals[2] == 3.0


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_sort_top_k_hypothesis(data):
    shape = tuple(data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=3)))
    dt = data.draw(st.sampled_from(NUMERIC_DTYPES))
    axis = data.draw(st.integers(0, len(shape) - 1))
    descending = data.draw(st.booleans())
    x = rand(np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))), shape, dt)
    vals, idx = run("sort", [x], dimension=axis, descending=descending)
    want_vals, want_idx = oracle(x, axis, descending)
    assert_same(idx, want_idx)
    assert_same(vals, want_vals)
    k = data.draw(st.integers(0, shape[-1]))
    vals, idx = run("top_k", [x], k=k)
    want_vals, want_idx = oracle(x, -1, True)
    assert_same(idx, np.ascontiguousarray(want_idx[..., :k]))


def test_shape_rules():
    t = ("f32", ["B", "S", 768])
    assert types("sort", [t], dimension=2) == [TensorType.of(*t), TensorType.of("i64", t[1])]
    assert types("sort", [("bool", ["N"])], dimension=0, descending=True) == [
        TensorType.of("bool", ["N"]), TensorType.of("i64", ["N"])]
    assert types("top_k", [t], k=5) == [TensorType.of("f32", ["B", "S", 5]),
                                        TensorType.of("i64", ["B", "S", 5])]
    assert types("top_k", [("bf16", ["B", "V"])], k=50) == [  # k checked at run time
        TensorType.of("bf16", ["B", 50]), TensorType.of("i64", ["B", 50])]
    assert types("top_k", [("i8", [4])], k=4) == [TensorType.of("i8", [4]),
                                                  TensorType.of("i64", [4])]


@pytest.mark.parametrize("name,operand,attrs,match", [
    ("sort", ("f32", [3, 4]), {"dimension": 2}, r"attribute dimension=2 is out of range"),
    ("sort", ("f32", []), {"dimension": 0}, r"attribute dimension=0 is out of range for rank 0"),
    ("sort", ("f32", [3]), {"dimension": 0, "descending": 1},
     r"attribute descending: expected true or false"),
    ("top_k", ("f32", [3, 4]), {"k": 5}, r"attribute k=5 exceeds the last dim of operand #0 "
                                         r"'x' \(f32\[3, 4\]\)"),
    ("top_k", ("f32", [3, 4]), {"k": -1}, r"attribute k=-1 must be >= 0"),
    ("top_k", ("f32", []), {"k": 0}, r"operand #0 'x' \(f32\[\]\) must have rank >= 1"),
    ("top_k", ("bool", [4]), {"k": 1}, r"operand #0 'x' has dtype bool, expected a numeric"),
    ("top_k", ("f32", [4]), {}, r"missing required attribute 'k'"),
])
def test_verify_errors(name, operand, attrs, match):
    with pytest.raises(VerifyError, match=f"^{name}: " + match):
        types(name, [operand], **attrs)


def test_interpret_errors():
    # top_k over f32[B, V] with V = 3 at run time and k = 5
    with pytest.raises(InterpretError, match=r"top_k: k=5 does not fit the last dim of an "
                                             r"input of shape \(2, 3\)"):
        run("top_k", [np.zeros((2, 3), np.float32)], env={"B": 2, "V": 3}, k=5)
    with pytest.raises(InterpretError, match="sort: dimension=1 out of range"):
        run("sort", [np.zeros(3, np.float32)], dimension=1)
