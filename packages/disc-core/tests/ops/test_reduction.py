"""reduce, argmax, argmin: shape rules, reference numerics against naive Python loops,
verifier and interpreter errors.

Tolerances (floats; the reference rounds an accurate accumulator once, the oracle here is
exact): f64 rtol 1e-12, f32 rtol 1e-6, f16 rtol 2**-10, bf16 rtol 2**-7 (one ulp of the
result), plus atol 1e-6 for cancellation in the half types' float32 accumulator.
Integers, bool, max/min and arg* are compared exactly.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disc_core.dtypes import ALL_DTYPES, FLOAT_DTYPES, NUMERIC_DTYPES, DType
from disc_core.ir import TensorType, Value
from disc_core.opdef import Env, InterpretError, Rewriter, VerifyError, get_op

RTOL = {DType.F64: 1e-12, DType.F32: 1e-6, DType.F16: 2**-10, DType.BF16: 2**-7}
ATOL = {DType.F64: 1e-12, DType.F32: 1e-9, DType.F16: 1e-6, DType.BF16: 1e-6}


def types(name, operand_types, **attrs):
    op = get_op(name)
    return op.result_types([TensorType.of(*t) for t in operand_types], op.normalize_attrs(attrs))


def run(name, inputs, env=None, **attrs):
    op = get_op(name)
    return op.run(inputs, op.normalize_attrs(attrs), Env(env or {}))


def rand(rng, shape, dt, kind="normal"):
    if dt is DType.BOOL:
        return rng.random(shape) < 0.5
    if dt.is_int:
        info = np.iinfo(dt.np)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt.np)
    if kind == "near_one":
        vals = rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
    else:
        vals = rng.standard_normal(shape)
    return vals.astype(dt.np)


def wrap(v: int, dt: DType) -> int:
    m = 1 << dt.bits
    v %= m
    return v - m if dt.is_signed and v >= m // 2 else v


def naive_reduce(x: np.ndarray, kind: str, axes, dt: DType) -> np.ndarray:
    """Row-by-row Python reduction: exact sums (fsum / Python ints), Python products."""
    keep = [i for i in range(x.ndim) if i not in axes]
    out_shape = tuple(x.shape[i] for i in keep)
    k = math.prod(x.shape[i] for i in axes)
    rows = np.transpose(x, keep + sorted(axes)).reshape(math.prod(out_shape), k)
    out = []
    for row in rows:
        vals = [v.item() for v in (row.astype(np.float64) if dt.is_float else row)]
        if kind == "sum":
            r = math.fsum(vals) if dt.is_float else wrap(sum(int(v) for v in vals), dt)
        elif kind == "prod":
            r = math.prod(vals) if dt.is_float else wrap(math.prod(int(v) for v in vals), dt)
        elif kind in ("max", "min"):
            if any(v != v for v in vals):
                r = math.nan
            elif not vals:
                if dt.is_float:
                    r = -math.inf if kind == "max" else math.inf
                elif dt.is_bool:
                    r = kind == "min"
                else:
                    info = np.iinfo(dt.np)
                    r = int(info.min if kind == "max" else info.max)
            else:
                r = max(vals) if kind == "max" else min(vals)
        elif kind == "and":
            r = all(vals)
        else:
            r = any(vals)
        out.append(r)
    if dt.is_float:
        return np.array(out, np.float64).reshape(out_shape)
    return np.array(out, dt.np).reshape(out_shape)


def check_reduce(x, kind, axes, dt):
    (got,) = run("reduce", [x], kind=kind, axes=list(axes))
    want = naive_reduce(x, kind, list(axes), dt)
    assert got.dtype == dt.np and got.shape == want.shape
    if dt.is_float and kind in ("sum", "prod"):
        g = got.astype(np.float64)
        if kind == "prod":  # compare in the result dtype (both overflow to inf alike)
            want = want.astype(dt.np).astype(np.float64)
        np.testing.assert_allclose(g, want, rtol=RTOL[dt], atol=ATOL[dt])
    else:
        np.testing.assert_array_equal(got.astype(np.float64) if dt.is_float else got,
                                      want)


SHAPES = [(0,), (1,), (5,), (3, 7), (2, 0, 3), (4, 1, 5), (2, 3, 1, 4)]


def axes_choices(rank):
    out = {(), tuple(range(rank))}
    out |= {(a,) for a in range(rank)}
    if rank >= 2:
        out.add((rank - 1, 0))  # unordered
    return sorted(out)


KIND_DTYPES = [("sum", NUMERIC_DTYPES), ("prod", NUMERIC_DTYPES), ("max", ALL_DTYPES),
               ("min", ALL_DTYPES), ("and", (DType.BOOL,)), ("or", (DType.BOOL,))]


@pytest.mark.parametrize("kind,dt", [(k, d) for k, ds in KIND_DTYPES for d in ds],
                         ids=lambda v: str(v))
def test_reduce_numerics(kind, dt):
    rng = np.random.default_rng(hash((kind, dt.value)) % 2**32)
    for shape in SHAPES:
        x = rand(rng, shape, dt, "near_one" if kind == "prod" else "normal")
        for axes in axes_choices(len(shape)):
            check_reduce(x, kind, axes, dt)


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=str)
def test_reduce_max_min_nan_and_inf(dt):
    x = np.array([[1.0, np.nan, 3.0], [-np.inf, 2.0, np.inf], [np.nan, np.nan, 0.0]], dt.np)
    for kind in ("max", "min"):
        for axes in ([0], [1], [0, 1]):
            check_reduce(x, kind, axes, dt)
    (got,) = run("reduce", [x[1:2]], kind="max", axes=[1])
    assert got[0] == np.inf


@pytest.mark.parametrize("kind,dt,want", [
    ("sum", DType.F32, 0.0), ("prod", DType.BF16, 1.0), ("max", DType.F16, -np.inf),
    ("min", DType.F64, np.inf), ("max", DType.I8, -128), ("min", DType.I8, 127),
    ("max", DType.U8, 0), ("min", DType.U8, 255), ("min", DType.I64, 2**63 - 1),
    ("max", DType.BOOL, False), ("min", DType.BOOL, True), ("and", DType.BOOL, True),
    ("or", DType.BOOL, False), ("sum", DType.I32, 0), ("prod", DType.U8, 1),
], ids=str)
def test_reduce_empty_identity(kind, dt, want):
    (got,) = run("reduce", [np.zeros((2, 0), dt.np)], kind=kind, axes=[1])
    assert got.dtype == dt.np and got.shape == (2,)
    assert all(v == want for v in got.tolist())


def test_reduce_half_sums_accumulate_in_f32():
    # A half-precision accumulator would stick at 2048 (f16) / 256 (bf16).
    x16 = np.array([2048.0] + [1.0] * 16, np.float16)
    assert run("reduce", [x16], kind="sum", axes=[0])[0] == np.float16(2064)
    xb = np.array([256.0] + [1.0] * 16, ml_dtypes.bfloat16)
    assert float(run("reduce", [xb], kind="sum", axes=[0])[0]) == 272.0


def test_reduce_f32_sum_accumulates_in_f64():
    x = np.array([1e8] + [1.0] * 8 + [-1e8], np.float32)
    (got,) = run("reduce", [x], kind="sum", axes=[0])
    assert got.dtype == np.float32 and got == 8.0  # an f32 accumulator gives 0


def test_reduce_integers_wrap():
    assert run("reduce", [np.array([100, 100], np.int8)], kind="sum", axes=[0])[0] == -56
    assert run("reduce", [np.array([16, 16], np.uint8)], kind="prod", axes=[0])[0] == 0
    big = np.array([2**62, 2**62], np.int64)
    assert run("reduce", [big], kind="sum", axes=[0])[0] == -(2**63)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_reduce_hypothesis(data):
    kind, dts = data.draw(st.sampled_from(KIND_DTYPES))
    dt = data.draw(st.sampled_from(dts))
    shape = tuple(data.draw(st.lists(st.integers(0, 4), min_size=0, max_size=4)))
    axes = data.draw(st.lists(st.integers(0, max(len(shape) - 1, 0)), unique=True,
                              max_size=len(shape)))
    seed = data.draw(st.integers(0, 2**32 - 1))
    x = rand(np.random.default_rng(seed), shape, dt, "near_one")
    check_reduce(x, kind, axes, dt)


def test_reduce_shape_rule():
    t = ("f32", ["B", "S", 768])
    assert types("reduce", [t], kind="sum", axes=[2]) == [TensorType.of("f32", ["B", "S"])]
    assert types("reduce", [t], kind="max", axes=[2, 0]) == [TensorType.of("f32", ["S"])]
    assert types("reduce", [t], kind="prod", axes=[]) == [TensorType.of("f32", ["B", "S", 768])]
    assert types("reduce", [t], kind="min", axes=[0, 1, 2]) == [TensorType.of("f32", [])]
    assert types("reduce", [("bool", [3, "N"])], kind="and", axes=[1]) == [
        TensorType.of("bool", [3])]
    assert types("reduce", [("bf16", [2, 5])], kind="sum", axes=[0]) == [
        TensorType.of("bf16", [5])]


def test_reduce_empty_axes_canonicalizes_to_operand():
    x = Value(TensorType.of("f32", ["B", 4]))
    op = get_op("reduce").build([x], {"kind": "sum", "axes": []})
    assert get_op("reduce").canonicalize(op, Rewriter()) is x
    op2 = get_op("reduce").build([x], {"kind": "sum", "axes": [1]})
    assert get_op("reduce").canonicalize(op2, Rewriter()) is None


@pytest.mark.parametrize("operand,attrs,match", [
    (("f32", [2, 3]), {"kind": "mean", "axes": [0]}, r"reduce: attribute kind=.mean. is not"),
    (("bool", [2, 3]), {"kind": "sum", "axes": [0]},
     r"reduce: operand #0 'x' has dtype bool, expected for kind=sum one of"),
    (("f32", [2, 3]), {"kind": "and", "axes": [0]},
     r"reduce: operand #0 'x' has dtype f32, expected for kind=and one of bool"),
    (("i32", [2, 3]), {"kind": "or", "axes": [0]}, r"reduce: operand #0 'x' has dtype i32"),
    (("f32", [2, 3]), {"kind": "sum", "axes": [2]}, r"reduce: attribute axes=2 is out of range"),
    (("f32", [2, 3]), {"kind": "sum", "axes": [-1]}, r"reduce: attribute axes=-1 is out of"),
    (("f32", [2, 3]), {"kind": "sum", "axes": [1, 1]}, r"reduce: attribute axes=\[1, 1\] repeats"),
    (("f32", [2, 3]), {"kind": "sum"}, r"reduce: missing required attribute 'axes'"),
])
def test_reduce_verify_errors(operand, attrs, match):
    with pytest.raises(VerifyError, match=match):
        types("reduce", [operand], **attrs)


def test_reduce_interpret_error():
    with pytest.raises(InterpretError, match="reduce: axes"):
        run("reduce", [np.zeros((2, 3), np.float32)], kind="sum", axes=[2])


# -- argmax / argmin -------------------------------------------------------------------

def naive_arg(x: np.ndarray, axis: int, is_max: bool) -> np.ndarray:
    xm = np.moveaxis(x, axis, -1)
    out = np.zeros(xm.shape[:-1], np.int64)
    for pos in np.ndindex(*xm.shape[:-1]):
        row = xm[pos]
        vals = [v.item() for v in (row.astype(np.float64) if row.dtype.kind in "fV" else row)]
        best = 0
        for i, v in enumerate(vals):
            if v != v:  # the first NaN wins
                best = i
                break
            if (v > vals[best]) if is_max else (v < vals[best]):
                best = i
        out[pos] = best
    return out


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=str)
def test_arg_numerics(name, dt):
    rng = np.random.default_rng(7)
    for shape in [(1,), (6,), (3, 5), (4, 1, 3), (2, 0, 3), (3, 4, 2)]:
        if dt.is_bool:
            x = rng.random(shape) < 0.5
        else:  # few distinct values: many ties
            x = rng.integers(0, 4, shape).astype(dt.np)
        if dt.is_float and x.size:
            flat = x.reshape(-1)
            flat[rng.integers(0, x.size, 2)] = np.nan
        for axis in range(len(shape)):
            if shape[axis] == 0:
                continue
            for idt in ("i32", "i64"):
                (got,) = run(name, [x], axis=axis, index_dtype=idt)
                assert got.dtype == np.dtype(DType(idt).np)
                np.testing.assert_array_equal(got, naive_arg(x, axis, name == "argmax"))


def test_arg_ties_and_nan():
    x = np.array([1.0, 3.0, 3.0, np.nan, 0.0, np.nan], np.float32)
    assert run("argmax", [x], axis=0)[0] == 3
    assert run("argmin", [x], axis=0)[0] == 3
    y = np.array([2, 0, 2, 0], np.int8)
    assert run("argmax", [y], axis=0)[0] == 0
    assert run("argmin", [y], axis=0)[0] == 1


def test_arg_shape_rule():
    t = ("f32", ["B", "S", 768])
    assert types("argmax", [t], axis=2) == [TensorType.of("i64", ["B", "S"])]
    assert types("argmin", [t], axis=0, index_dtype="i32") == [TensorType.of("i32", ["S", 768])]
    assert types("argmax", [("bf16", [7])], axis=0) == [TensorType.of("i64", [])]
    assert types("argmax", [("f32", [0, 3])], axis=1) == [TensorType.of("i64", [0])]
    assert types("argmax", [("f32", ["N", 0])], axis=1) == [TensorType.of("i64", ["N"])]


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("operand,attrs,match", [
    (("f32", [2, 3]), {"axis": 2}, r"attribute axis=2 is out of range for rank 2"),
    (("f32", [2, 3]), {}, r"missing required attribute 'axis'"),
    (("f32", [2, 3]), {"axis": 0, "index_dtype": "i16"}, r"attribute index_dtype=.* is not one"),
    (("f32", [2, 0]), {"axis": 1}, r"operand #0 'x' \(f32\[2, 0\]\) has size 0 along axis=1"),
])
def test_arg_verify_errors(name, operand, attrs, match):
    with pytest.raises(VerifyError, match=f"{name}: {match}"):
        types(name, [operand], **attrs)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_interpret_errors(name):
    # f32[N, M] with M = 0 at run time and N > 0: no index to return.
    with pytest.raises(InterpretError, match=f"{name}: the input of shape \\(2, 0\\) is empty"):
        run(name, [np.zeros((2, 0), np.float32)], env={"N": 2, "M": 0}, axis=1)
    (got,) = run(name, [np.zeros((0, 0), np.float32)], axis=1)
    assert got.shape == (0,) and got.dtype == np.int64

