"""gather, gather_elements, scatter_add, scatter_elements_add: shape rules, facts,
reference numerics against numpy (np.take(mode="clip"), np.take_along_axis, np.add.at on
explicitly clamped indices, per-batch loops for batch_dims), verifier and interpreter
errors.

Gathers move values, so they are compared exactly for every dtype. Scatters: integers
exactly (with wrap-around), floats against a float64 oracle with rtol/atol f64 1e-12,
f32 1e-6, f16 2**-10, bf16 2**-7 (one ulp of the result; the reference accumulates
f16/bf16 in f32 and f32 in f64 and rounds once).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disc_core.dtypes import ALL_DTYPES, NUMERIC_DTYPES, DType
from disc_core.ir import TensorType, Value
from disc_core.opdef import Env, InterpretError, VerifyError, get_op
from disc_core.shape_facts import Eq
from disc_core.symbolic import as_expr

TOL = {DType.F64: 1e-12, DType.F32: 1e-6, DType.F16: 2**-10, DType.BF16: 2**-7}
INDEX = (np.int32, np.int64)


def types(name, operand_types, **attrs):
    op = get_op(name)
    return op.result_types([TensorType.of(*t) for t in operand_types], op.normalize_attrs(attrs))


def run(name, inputs, env=None, **attrs):
    op = get_op(name)
    return op.run(inputs, op.normalize_attrs(attrs), Env(env or {}))


def build(name, operand_types, **attrs):
    return get_op(name).build([Value(TensorType.of(*t)) for t in operand_types], attrs)


def rand(rng, shape, dt):
    if dt is DType.BOOL:
        return rng.random(shape) < 0.5
    if dt.is_int:
        info = np.iinfo(dt.np)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt.np)
    return rng.standard_normal(shape).astype(dt.np)


def rand_idx(rng, shape, size, itype):
    """Mostly in range, some negative and some past the end (both get clamped)."""
    return rng.integers(-2, size + 2, size=shape).astype(itype)


def assert_scatter(got, want, dt):
    """``want``: float64 (floats) or int64 (integers, wrapped here) oracle."""
    assert got.dtype == dt.np and got.shape == want.shape
    if dt.is_int:
        np.testing.assert_array_equal(got, want.astype(dt.np))
    else:
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=TOL[dt], atol=TOL[dt])


# -- gather --------------------------------------------------------------------------

def gather_oracle(x, idx, axis, b):
    if b == 0:
        return np.take(x, idx.astype(np.int64), axis=axis, mode="clip")
    bshape = x.shape[:b]
    nb = int(np.prod(bshape))
    xs = x.reshape((nb,) + x.shape[b:])
    ids = idx.reshape((nb,) + idx.shape[b:])
    parts = [np.take(xs[i], ids[i].astype(np.int64), axis=axis - b, mode="clip")
             for i in range(xs.shape[0])]
    inner = x.shape[b:axis] + idx.shape[b:] + x.shape[axis + 1:]
    return np.array(parts, x.dtype).reshape(bshape + inner)


GATHER_CASES = [  # operand shape, indices shape, axis, batch_dims
    ((5, 4), (3,), 0, 0),
    ((5, 4), (2, 3), 1, 0),
    ((5, 4), (), 0, 0),  # a scalar index drops the axis
    ((1,), (4,), 0, 0),
    ((6, 0), (3,), 0, 0),  # empty slices
    ((6, 3), (0,), 0, 0),  # no indices
    ((2, 3, 7, 2), (2, 3, 4), 2, 2),  # batch_dims = 2
    ((3, 5, 4), (3, 2), 1, 1),
    ((3, 2, 5, 4), (3, 6), 2, 1),  # a non-batch dim before axis
    ((0, 5), (0, 2), 1, 1),  # empty batch
    ((2, 1, 3), (2, 1, 1), 2, 1),
]


@pytest.mark.parametrize("dt", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("itype", INDEX, ids=lambda t: np.dtype(t).name)
def test_gather_numerics(dt, itype):
    rng = np.random.default_rng(1)
    for xs, ishape, axis, b in GATHER_CASES:
        x = rand(rng, xs, dt)
        idx = rand_idx(rng, ishape, xs[axis], itype)
        (got,) = run("gather", [x, idx], axis=axis, batch_dims=b)
        want = gather_oracle(x, idx, axis, b)
        assert got.dtype == dt.np and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_gather_clamps_and_does_not_wrap():
    x = np.array([10.0, 11.0, 12.0], np.float32)
    (got,) = run("gather", [x, np.array([-1, 5, 2, -100], np.int64)], axis=0)
    np.testing.assert_array_equal(got, [10.0, 12.0, 12.0, 10.0])


def test_gather_shape_rule():
    emb = ("f32", ["V", 768])
    assert types("gather", [emb, ("i64", ["B", "S"])], axis=0) == [
        TensorType.of("f32", ["B", "S", 768])]
    assert types("gather", [("f32", ["B", "S", 768]), ("i32", ["K"])], axis=1) == [
        TensorType.of("f32", ["B", "K", 768])]
    assert types("gather", [("f32", ["B", "S", 768]), ("i64", ["B", "K"])], axis=1,
                 batch_dims=1) == [TensorType.of("f32", ["B", "K", 768])]
    # static beats symbolic for the shared batch dim
    assert types("gather", [("bf16", ["B", "S", 8]), ("i64", [4, "K", 2])], axis=1,
                 batch_dims=1) == [TensorType.of("bf16", [4, "K", 2, 8])]
    assert types("gather", [("bool", [5, 6]), ("i64", [])], axis=0) == [
        TensorType.of("bool", [6])]


def test_gather_facts():
    op = build("gather", [("f32", ["B", "S", 8]), ("i64", ["C", "K"])], axis=1, batch_dims=1)
    assert op.results[0].type == TensorType.of("f32", ["B", "K", 8])
    assert list(get_op("gather").facts(op)) == [Eq(as_expr("B"), as_expr("C"))]
    op = build("gather", [("f32", ["B", "S", 8]), ("i64", ["C", "K"])], axis=1)
    assert list(get_op("gather").facts(op)) == []


@pytest.mark.parametrize("operands,attrs,match", [
    ((("f32", [5, 4]), ("f32", [3])), {"axis": 0},
     r"operand #1 'indices' has dtype f32, expected an index dtype: i32, i64"),
    ((("f32", [5, 4]), ("i16", [3])), {"axis": 0}, r"operand #1 'indices' has dtype i16"),
    ((("f32", [5, 4]), ("i64", [3])), {"axis": 2}, r"attribute axis=2 is out of range"),
    ((("f32", [5, 4]), ("i64", [5, 3])), {"axis": 0, "batch_dims": 1},
     r"attribute batch_dims=1 must satisfy 0 <= batch_dims <= axis=0"),
    ((("f32", [5, 4]), ("i64", [5, 3])), {"axis": 1, "batch_dims": -1},
     r"attribute batch_dims=-1 must satisfy"),
    ((("f32", [5, 4, 3]), ("i64", [5])), {"axis": 2, "batch_dims": 2},
     r"attribute batch_dims=2 exceeds the rank of operand #1 'indices'"),
    ((("f32", [5, 4]), ("i64", [6, 3])), {"axis": 1, "batch_dims": 1},
     r"batch dim 0 of operand #0 'operand' \(f32\[5, 4\]\) vs operand #1 'indices' "
     r"\(i64\[6, 3\]\): dimension 5 does not match 6"),
    ((("f32", [5, 4]), ("i64", [3])), {}, r"missing required attribute 'axis'"),
])
def test_gather_verify_errors(operands, attrs, match):
    with pytest.raises(VerifyError, match="^gather: " + match):
        types("gather", list(operands), **attrs)


def test_gather_interpret_errors():
    with pytest.raises(InterpretError, match="gather: cannot index axis 0 of size 0"):
        run("gather", [np.zeros((0, 3), np.float32), np.zeros((2,), np.int64)], axis=0)
    # nothing read: fine
    (got,) = run("gather", [np.zeros((0, 3), np.float32), np.zeros((0,), np.int64)], axis=0)
    assert got.shape == (0, 3)
    with pytest.raises(InterpretError, match="gather: the batch dims \\(2,\\) of the operand "
                                             "differ from the batch dims \\(3,\\)"):
        run("gather", [np.zeros((2, 3), np.float32), np.zeros((3, 1), np.int64)], axis=1,
            batch_dims=1)


# -- scatter_add -----------------------------------------------------------------------

def scatter_oracle(x, idx, upd, axis, b):
    acc = x.astype(np.float64 if x.dtype.kind in "fV" else np.int64)
    u = upd.astype(acc.dtype)
    size = x.shape[axis]
    ic = np.clip(idx.astype(np.int64), 0, size - 1)
    nb = int(np.prod(x.shape[:b]))
    accs = acc.reshape((nb,) + x.shape[b:])
    ics = ic.reshape((nb,) + idx.shape[b:])
    us = u.reshape((nb,) + upd.shape[b:])
    ni = idx.ndim - b
    for i in range(nb):  # per batch: move the axis first, then np.add.at along it
        view = np.moveaxis(accs[i], axis - b, 0)
        ui = np.moveaxis(us[i], list(range(axis - b, axis - b + ni)), list(range(ni)))
        np.add.at(view, ics[i], ui)
    return acc


@pytest.mark.parametrize("dt", NUMERIC_DTYPES, ids=str)
@pytest.mark.parametrize("itype", INDEX, ids=lambda t: np.dtype(t).name)
def test_scatter_add_numerics(dt, itype):
    rng = np.random.default_rng(2)
    for xs, ishape, axis, b in GATHER_CASES:
        if xs[axis] == 0:
            continue
        x = rand(rng, xs, dt)
        idx = rand_idx(rng, ishape, xs[axis], itype)  # duplicates are likely
        ushape = xs[:axis] + ishape[b:] + xs[axis + 1:]
        upd = rand(rng, ushape, dt)
        (got,) = run("scatter_add", [x, idx, upd], axis=axis, batch_dims=b)
        assert_scatter(got, scatter_oracle(x, idx, upd, axis, b), dt)


def test_scatter_add_duplicates_accumulate_and_clamp():
    x = np.zeros(3, np.float32)
    (got,) = run("scatter_add", [x, np.array([1, 1, -5, 9], np.int32),
                                 np.array([1.0, 2.0, 4.0, 8.0], np.float32)], axis=0)
    np.testing.assert_array_equal(got, [4.0, 3.0, 8.0])
    assert x.tolist() == [0.0, 0.0, 0.0]  # the input is not modified
    (got,) = run("scatter_add", [np.array([120], np.int8), np.array([0, 0], np.int64),
                                 np.array([5, 5], np.int8)], axis=0)
    assert got[0] == np.int8(-126)  # wraps
    h = np.array([2048.0], np.float16)
    (got,) = run("scatter_add", [h, np.zeros(4, np.int64), np.ones(4, np.float16)], axis=0)
    assert got[0] == 2052  # accumulated in f32: an f16 accumulator stays at 2048


def test_scatter_add_shape_rule_and_facts():
    assert types("scatter_add", [("f32", ["V", 768]), ("i64", ["B", "S"]),
                                 ("f32", ["B", "S", 768])], axis=0) == [
        TensorType.of("f32", ["V", 768])]
    # dims of operand refined by the (static) updates and indices
    assert types("scatter_add", [("f32", ["B", "S", "D"]), ("i32", [2, "K"]),
                                 ("f32", ["B", "K", 8])], axis=1, batch_dims=1) == [
        TensorType.of("f32", [2, "S", 8])]
    op = build("scatter_add", [("f32", ["B", "S", "D"]), ("i32", ["C", "K"]),
                               ("f32", ["B", "J", "D"])], axis=1, batch_dims=1)
    assert list(get_op("scatter_add").facts(op)) == [
        Eq(as_expr("B"), as_expr("C")), Eq(as_expr("K"), as_expr("J"))]


@pytest.mark.parametrize("operands,attrs,match", [
    ((("f32", [5, 4]), ("i64", [3]), ("f32", [3, 5])), {"axis": 0},
     r"dim 1 of operand #2 'updates' \(f32\[3, 5\]\) vs the gathered shape \[3, 4\]: "
     r"dimension 4 does not match 5"),
    ((("f32", [5, 4]), ("i64", [3]), ("f32", [3])), {"axis": 0},
     r"operand #2 'updates' \(f32\[3\]\) has rank 1, expected the gathered shape \[3, 4\]"),
    ((("f32", [5, 4]), ("i64", [3]), ("f16", [3, 4])), {"axis": 0},
     r"operand #2 'updates' has dtype f16, expected f32"),
    ((("bool", [5, 4]), ("i64", [3]), ("bool", [3, 4])), {"axis": 0},
     r"operand #0 'operand' has dtype bool, expected a numeric dtype"),
    ((("f32", [5, 4]), ("f32", [3]), ("f32", [3, 4])), {"axis": 0},
     r"operand #1 'indices' has dtype f32"),
    ((("f32", [5, 4]), ("i64", [5, 3]), ("f32", [5, 3])), {"axis": 1, "batch_dims": 2},
     r"attribute batch_dims=2 must satisfy"),
])
def test_scatter_add_verify_errors(operands, attrs, match):
    with pytest.raises(VerifyError, match="^scatter_add: " + match):
        types("scatter_add", list(operands), **attrs)


def test_scatter_add_interpret_errors():
    with pytest.raises(InterpretError, match="scatter_add: updates have shape \\(2, 3\\), "
                                             "expected the gathered shape \\(2, 4\\)"):
        run("scatter_add", [np.zeros((5, 4), np.float32), np.zeros(2, np.int64),
                            np.zeros((2, 3), np.float32)], axis=0)
    with pytest.raises(InterpretError, match="scatter_add: cannot index axis 0 of size 0"):
        run("scatter_add", [np.zeros((0, 4), np.float32), np.zeros(2, np.int64),
                            np.zeros((2, 4), np.float32)], axis=0)
    (got,) = run("scatter_add", [np.ones((0, 4), np.float32), np.zeros(0, np.int64),
                                 np.zeros((0, 4), np.float32)], axis=0)
    assert got.shape == (0, 4)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_gather_scatter_hypothesis(data):
    rank = data.draw(st.integers(1, 4))
    xs = tuple(data.draw(st.lists(st.integers(0, 3), min_size=rank, max_size=rank)))
    axis = data.draw(st.integers(0, rank - 1))
    b = data.draw(st.integers(0, axis))
    ishape = xs[:b] + tuple(data.draw(st.lists(st.integers(0, 3), max_size=2)))
    dt = data.draw(st.sampled_from(NUMERIC_DTYPES))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = rand(rng, xs, dt)
    idx = rand_idx(rng, ishape, xs[axis], data.draw(st.sampled_from(INDEX)))
    ushape = xs[:axis] + ishape[b:] + xs[axis + 1:]
    nonempty = int(np.prod(ushape)) > 0
    if xs[axis] == 0 and nonempty:
        with pytest.raises(InterpretError):
            run("gather", [x, idx], axis=axis, batch_dims=b)
        return
    (g,) = run("gather", [x, idx], axis=axis, batch_dims=b)
    np.testing.assert_array_equal(g, gather_oracle(x, idx, axis, b))
    (t,) = types("gather", [(dt.short, xs), ("i64", ishape)], axis=axis, batch_dims=b)
    assert tuple(d.value for d in t.shape) == g.shape
    if xs[axis]:
        upd = rand(rng, ushape, dt)
        (got,) = run("scatter_add", [x, idx, upd], axis=axis, batch_dims=b)
        assert_scatter(got, scatter_oracle(x, idx, upd, axis, b), dt)


# -- gather_elements / scatter_elements_add -------------------------------------------

ELEM_CASES = [  # operand shape, indices shape, axis
    ((4, 5), (4, 5), 1),
    ((4, 5), (6, 5), 0),  # more indices than the axis has elements
    ((4, 5), (2, 3), 1),  # smaller off the axis (torch allows it)
    ((1,), (3,), 0),
    ((3, 1, 2), (3, 1, 4), 2),
    ((3, 4), (0, 4), 0),
    ((3, 0), (3, 0), 0),
    ((2, 3, 4), (1, 3, 2), 0),
]


def elements_oracle_gather(x, idx, axis):
    ic = np.clip(idx.astype(np.int64), 0, x.shape[axis] - 1)
    sub = x[tuple(slice(None) if k == axis else slice(0, n) for k, n in enumerate(idx.shape))]
    return np.take_along_axis(sub, ic, axis)


def elements_oracle_scatter(x, idx, upd, axis):
    acc = x.astype(np.float64 if x.dtype.kind in "fV" else np.int64)
    for pos in np.ndindex(*idx.shape):
        tgt = list(pos)
        tgt[axis] = min(max(int(idx[pos]), 0), x.shape[axis] - 1)
        with np.errstate(over="ignore"):  # int64 wraps, like the op
            acc[tuple(tgt)] += upd[pos].astype(acc.dtype)
    return acc


@pytest.mark.parametrize("dt", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("itype", INDEX, ids=lambda t: np.dtype(t).name)
def test_gather_elements_numerics(dt, itype):
    rng = np.random.default_rng(3)
    for xs, ishape, axis in ELEM_CASES:
        if xs[axis] == 0:
            continue
        x = rand(rng, xs, dt)
        idx = rand_idx(rng, ishape, xs[axis], itype)
        (got,) = run("gather_elements", [x, idx], axis=axis)
        assert got.dtype == dt.np and got.shape == ishape
        np.testing.assert_array_equal(got, elements_oracle_gather(x, idx, axis))


@pytest.mark.parametrize("dt", NUMERIC_DTYPES, ids=str)
@pytest.mark.parametrize("itype", INDEX, ids=lambda t: np.dtype(t).name)
def test_scatter_elements_add_numerics(dt, itype):
    rng = np.random.default_rng(4)
    for xs, ishape, axis in ELEM_CASES:
        if xs[axis] == 0:
            continue
        x = rand(rng, xs, dt)
        idx = rand_idx(rng, ishape, xs[axis], itype)
        upd = rand(rng, ishape, dt)
        (got,) = run("scatter_elements_add", [x, idx, upd], axis=axis)
        assert_scatter(got, elements_oracle_scatter(x, idx, upd, axis), dt)


def test_elements_small_example():
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    idx = np.array([[3, 0], [-1, 7]], np.int64)  # clamped: [[3, 0], [0, 3]]
    (got,) = run("gather_elements", [x, idx], axis=1)
    np.testing.assert_array_equal(got, [[3, 0], [4, 7]])
    (got,) = run("scatter_elements_add", [np.zeros((3, 4), np.int32), idx,
                                          np.array([[1, 2], [3, 4]], np.int32)], axis=1)
    np.testing.assert_array_equal(got, [[2, 0, 0, 1], [3, 0, 0, 4], [0, 0, 0, 0]])


def test_elements_shape_rules_and_facts():
    assert types("gather_elements", [("f32", ["B", "S"]), ("i64", ["B", "K"])], axis=1) == [
        TensorType.of("i64", ["B", "K"]).with_dtype("f32")]
    assert types("gather_elements", [("bool", [4, 5]), ("i32", [2, 9])], axis=1) == [
        TensorType.of("bool", [2, 9])]
    assert types("scatter_elements_add", [("f32", ["B", "S"]), ("i64", ["B", "K"]),
                                          ("f32", ["B", 3])], axis=1) == [
        TensorType.of("f32", ["B", "S"])]
    op = build("scatter_elements_add", [("f32", ["B", "S"]), ("i64", ["B", "K"]),
                                        ("f32", ["B", "J"])], axis=1)
    assert list(get_op("scatter_elements_add").facts(op)) == [Eq(as_expr("K"), as_expr("J"))]


@pytest.mark.parametrize("name,operands,attrs,match", [
    ("gather_elements", (("f32", [4, 5]), ("i64", [4])), {"axis": 0},
     r"operand #1 'indices' has rank 1 \(i64\[4\]\), expected rank 2"),
    ("gather_elements", (("f32", [4, 5]), ("i64", [5, 5])), {"axis": 1},
     r"operand #1 'indices' \(i64\[5, 5\]\) is larger than operand #0 'operand' "
     r"\(f32\[4, 5\]\) in dim 0"),
    ("gather_elements", (("f32", [4, 5]), ("u8", [4, 5])), {"axis": 1},
     r"operand #1 'indices' has dtype u8, expected an index dtype"),
    ("gather_elements", (("f32", [4, 5]), ("i64", [4, 5])), {"axis": -1},
     r"attribute axis=-1 is out of range"),
    ("scatter_elements_add", (("f32", [4, 5]), ("i64", [4, 5]), ("f32", [4, 4])), {"axis": 1},
     r"operand #2 'updates' has shape f32\[4, 4\], expected dim 1 to be 5 like operand #1 "
     r"'indices'"),
    ("scatter_elements_add", (("f32", [4, 5]), ("i64", [4, 5]), ("i32", [4, 5])), {"axis": 1},
     r"operand #2 'updates' has dtype i32, expected f32"),
    ("scatter_elements_add", (("bool", [4, 5]), ("i64", [4, 5]), ("bool", [4, 5])),
     {"axis": 1}, r"operand #0 'operand' has dtype bool"),
    ("scatter_elements_add", (("f32", [4, 5]), ("i64", [4, 6]), ("f32", [4, 6])), {"axis": 0},
     r"operand #1 'indices' \(i64\[4, 6\]\) is larger than operand #0 'operand' "
     r"\(f32\[4, 5\]\) in dim 1"),
])
def test_elements_verify_errors(name, operands, attrs, match):
    with pytest.raises(VerifyError, match=f"^{name}: " + match):
        types(name, list(operands), **attrs)


def test_elements_interpret_errors():
    with pytest.raises(InterpretError, match="gather_elements: indices of shape \\(3, 2\\) "
                                             "are larger than the operand"):
        run("gather_elements", [np.zeros((2, 2), np.float32), np.zeros((3, 2), np.int64)],
            axis=1)
    with pytest.raises(InterpretError, match="gather_elements: cannot index axis 1 of size 0"):
        run("gather_elements", [np.zeros((2, 0), np.float32), np.zeros((2, 1), np.int64)],
            axis=1)
    with pytest.raises(InterpretError, match="scatter_elements_add: updates of shape"):
        run("scatter_elements_add", [np.zeros((2, 2), np.float32), np.zeros((2, 2), np.int64),
                                     np.zeros((2, 1), np.float32)], axis=1)
    with pytest.raises(InterpretError, match="scatter_elements_add: cannot index axis 0"):
        run("scatter_elements_add", [np.zeros((0, 2), np.float32), np.zeros((1, 2), np.int64),
                                     np.zeros((1, 2), np.float32)], axis=0)
    (got,) = run("gather_elements", [np.zeros((2, 0), np.float32), np.zeros((2, 0), np.int64)],
                 axis=1)
    assert got.shape == (2, 0)
