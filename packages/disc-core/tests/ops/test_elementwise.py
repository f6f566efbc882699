"""Elementwise ops: shape rules, numerics against independent numpy/math, verifier errors."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from disc_core.dtypes import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, NUMERIC_DTYPES, DType
from disc_core.ir import TensorType, Value
from disc_core.opdef import Env, InterpretError, Rewriter, VerifyError, get_op
from disc_core.ops.elementwise import _BINARY, _UNARY

SHAPES = [(), (0,), (1,), (7,), (3, 5), (2, 0, 3), (2, 3, 17)]
TOL = {DType.F16: 2e-3, DType.BF16: 2e-2, DType.F32: 2e-6, DType.F64: 1e-12}


def run(name, inputs, **attrs):
    op = get_op(name)
    return op.run(list(inputs), op.normalize_attrs(attrs), Env())[0]


def sample(dtype: DType, shape, rng, positive=False) -> np.ndarray:
    if dtype.is_bool:
        return rng.random(shape) > 0.5
    if dtype.is_int:
        lo = 1 if positive else (-20 if dtype.is_signed else 0)
        return rng.integers(lo, 20, size=shape).astype(dtype.np)
    x = rng.standard_normal(shape) * 3
    if positive:
        x = np.abs(x) + 0.1
    return x.astype(dtype.np)


def as64(x):
    return x.astype(np.float64) if x.dtype.kind == "f" or x.dtype == ml_dtypes.bfloat16 else x


def close(got, want, dtype):
    assert got.dtype == dtype.np and got.shape == np.shape(want)
    if dtype.is_float:
        np.testing.assert_allclose(as64(got), want, rtol=TOL[dtype], atol=TOL[dtype],
                                   equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


# Independent definitions, computed in float64 / Python ints.
INDEPENDENT_UNARY = {
    "neg": lambda x: -x, "abs": np.abs, "sign": np.sign, "exp": np.exp, "expm1": np.expm1,
    "log": np.log, "log1p": np.log1p, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "tanh": np.tanh, "logistic": lambda x: 1 / (1 + np.exp(-x)),
    "erf": lambda x: np.array([math.erf(v) for v in x.reshape(-1)]).reshape(x.shape),
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "floor": np.floor, "ceil": np.ceil,
    "round": lambda x: np.array([math.floor(v + 0.5) if v >= 0 else -math.floor(-v + 0.5)
                                 for v in x.reshape(-1)]).reshape(x.shape),
    "round_even": lambda x: np.array([round(v) for v in x.reshape(-1)],
                                     dtype=np.float64).reshape(x.shape),
    "not": lambda x: ~x,
}
POSITIVE = {"log", "sqrt", "rsqrt", "log1p"}


@pytest.mark.parametrize("name", sorted(_UNARY))
def test_unary_numerics_every_dtype(name) -> None:
    fn, dtypes, _ = _UNARY[name]
    rng = np.random.default_rng(abs(hash(name)) % 1000)
    for dtype in dtypes:
        for shape in SHAPES:
            x = sample(dtype, shape, rng, positive=name in POSITIVE)
            got = run(name, [x])
            want = INDEPENDENT_UNARY[name](as64(x) if dtype.is_float else x)
            if dtype.is_float:
                want = want.astype(dtype.np).astype(np.float64)  # one rounding
            elif dtype.is_int:
                want = np.asarray(want).astype(dtype.np)
            close(got, want, dtype)


def test_round_ties() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997], np.float32)
    np.testing.assert_array_equal(run("round", [x]), [1, 2, 3, -1, -3, 0])
    np.testing.assert_array_equal(run("round_even", [x]), [0, 2, 2, -0, -2, 0])


def test_unary_special_values() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32)
    assert np.isnan(run("sign", [x])[0])
    np.testing.assert_array_equal(run("is_finite", [x]), [False, False, False, True, True])
    np.testing.assert_array_equal(run("logistic", [np.array([-1000, 1000], np.float32)]),
                                  [0, 1])


INDEPENDENT_BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "max": np.maximum, "min": np.minimum, "atan2": np.arctan2,
    "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
}


@pytest.mark.parametrize("name", sorted(INDEPENDENT_BINARY))
def test_binary_numerics_every_dtype(name) -> None:
    _, dtypes, _ = _BINARY[name]
    rng = np.random.default_rng(3)
    for dtype in dtypes:
        for shape in SHAPES:
            a, b = sample(dtype, shape, rng), sample(dtype, shape, rng)
            got = run(name, [a, b])
            if dtype.is_float:
                want = INDEPENDENT_BINARY[name](as64(a), as64(b)).astype(dtype.np).astype(
                    np.float64)
            else:
                want = INDEPENDENT_BINARY[name](a, b).astype(dtype.np)
            close(got, want, dtype)


def c_div(a: int, b: int) -> int:
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_integer_div_rem_truncate_toward_zero(dtype) -> None:
    vals = [-7, -6, -1, 0, 1, 6, 7] if dtype.is_signed else [0, 1, 6, 7, 200]
    divs = [-3, -2, 2, 3, 0] if dtype.is_signed else [2, 3, 0]
    a = np.array([x for x in vals for _ in divs], dtype.np)
    b = np.array([d for _ in vals for d in divs], dtype.np)
    q = run("div", [a, b])
    r = run("rem", [a, b])
    for x, d, qq, rr in zip(a.tolist(), b.tolist(), q.tolist(), r.tolist()):
        assert qq == c_div(x, d), (x, d)
        assert rr == (x - c_div(x, d) * d if d else x), (x, d)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_float_div_rem_pow(dtype) -> None:
    rng = np.random.default_rng(5)
    a, b = sample(dtype, (4, 9), rng), sample(dtype, (4, 9), rng, positive=True)
    close(run("div", [a, b]), (as64(a) / as64(b)).astype(dtype.np).astype(np.float64), dtype)
    close(run("rem", [a, b]), np.fmod(as64(a), as64(b)).astype(dtype.np).astype(np.float64),
          dtype)
    close(run("pow", [b, a]), (as64(b) ** as64(a)).astype(dtype.np).astype(np.float64), dtype)


def test_integer_pow_including_negative_exponents() -> None:
    a = np.array([2, -2, 1, -1, -1, 3, 0], np.int32)
    b = np.array([10, 3, -5, -3, -4, -1, 0], np.int32)
    np.testing.assert_array_equal(run("pow", [a, b]), [1024, -8, 1, -1, 1, 0, 1])


@pytest.mark.parametrize("direction, fn", [("eq", np.equal), ("ne", np.not_equal),
                                           ("lt", np.less), ("le", np.less_equal),
                                           ("gt", np.greater), ("ge", np.greater_equal)])
def test_compare_every_dtype_and_nan(direction, fn) -> None:
    rng = np.random.default_rng(7)
    for dtype in ALL_DTYPES:
        a, b = sample(dtype, (5, 6), rng), sample(dtype, (5, 6), rng)
        b[0] = a[0]
        got = run("compare", [a, b], direction=direction)
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got, fn(as64(a), as64(b)))
    nan = np.array([np.nan], np.float32)
    assert run("compare", [nan, nan], direction=direction)[0] == (direction == "ne")


def test_select_and_clamp() -> None:
    rng = np.random.default_rng(8)
    for dtype in ALL_DTYPES:
        p = rng.random((3, 4)) > 0.5
        a, b = sample(dtype, (3, 4), rng), sample(dtype, (3, 4), rng)
        np.testing.assert_array_equal(run("select", [p, a, b]), np.where(p, a, b))
        np.testing.assert_array_equal(run("select", [np.array(True), a, b]), a)
    for dtype in NUMERIC_DTYPES:
        x = sample(dtype, (3, 4), rng)
        low = -2 if dtype.is_signed else 1
        lo, hi = np.array(low).astype(dtype.np), np.array(5).astype(dtype.np)
        want = np.array([[min(max(v, low), 5) for v in row]
                         for row in as64(x).tolist()])
        close(run("clamp", [lo, x, hi]), want, dtype)


@pytest.mark.parametrize("src", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("dst", ALL_DTYPES, ids=str)
def test_convert_every_pair(src, dst) -> None:
    rng = np.random.default_rng(9)
    x = sample(src, (40,), rng)
    got = run("convert", [x], dtype=dst.short)
    assert got.dtype == dst.np and got.shape == x.shape
    vals = as64(x).tolist() if src.is_float else x.tolist()
    for g, v in zip(got.tolist(), vals):
        if dst.is_bool:
            assert g == (v != 0)
        elif dst.is_int and src.is_float:
            if -100 < v < 100 and (dst.is_signed or v >= 0):
                assert g == int(v)  # truncation toward zero
        elif dst.is_int and not src.is_float:
            assert g == np.array(int(v)).astype(dst.np).item()  # two's complement wrap
        else:
            assert float(g) == pytest.approx(float(v), rel=1e-2, abs=1e-2)


def test_shape_rules_static_and_symbolic() -> None:
    x = Value(TensorType.of("f32", ["B", "S", 768]))
    y = Value(TensorType.of("f32", ["B", "T", 768]))
    z = Value(TensorType.of("f32", [4, "S", 768]))
    assert get_op("exp").build([x]).results[0].type == x.type
    assert get_op("add").build([x, y]).results[0].type == TensorType.of("f32", ["B", "S", 768])
    assert get_op("mul").build([x, z]).results[0].type == TensorType.of("f32", [4, "S", 768])
    cmp = get_op("compare").build([x, y], {"direction": "lt"})
    assert cmp.results[0].type == TensorType.of("bool", ["B", "S", 768])
    p = Value(TensorType.of("bool", []))
    assert get_op("select").build([p, x, y]).results[0].type == x.type
    assert get_op("is_finite").build([x]).results[0].type.dtype is DType.BOOL
    assert get_op("convert").build([x], {"dtype": "bf16"}).results[0].type == TensorType.of(
        "bf16", ["B", "S", 768])


@pytest.mark.parametrize("name, types, attrs, match", [
    ("exp", [("i32", [3])], {}, r"exp: operand #0 'x' has dtype i32, expected one of f16"),
    ("add", [("f32", [3]), ("i32", [3])], {}, r"add: operand #1 'rhs' has dtype i32, expected f32"),
    ("add", [("f32", [3]), ("f32", [4])], {}, r"add: operand #1 'rhs' has shape f32\[4\]"),
    ("add", [("f32", ["S"]), ("f32", ["S + 1"])], {}, r"expected dim 0 to be S"),
    ("add", [("f32", [3]), ("f32", [3, 1])], {}, r"expected rank 1"),
    ("add", [("f32", [3])], {}, r"add: expected 2 operand\(s\) \(lhs, rhs\), got 1"),
    ("and", [("f32", [3]), ("f32", [3])], {}, r"and: operand #0 'lhs' has dtype f32"),
    ("compare", [("f32", [3]), ("f32", [3])], {"direction": "lt2"}, r"direction=.lt2. is not one"),
    ("compare", [("f32", [3]), ("f32", [3])], {}, r"missing required attribute 'direction'"),
    ("select", [("f32", [3]), ("f32", [3]), ("f32", [3])], {}, r"'pred' has dtype f32"),
    ("select", [("bool", [2]), ("f32", [3]), ("f32", [3])], {}, r"operand #0 'pred' has shape"),
    ("clamp", [("f32", [2]), ("f32", [3]), ("f32", [])], {}, r"clamp: operand #0 'lo'"),
    ("convert", [("f32", [3])], {"dtype": "f8"}, r"convert: attribute dtype: unknown dtype"),
    ("exp", [("f32", [3])], {"axis": 1}, r"exp: unknown attribute"),
])
def test_verifier_errors(name, types, attrs, match) -> None:
    vals = [Value(TensorType.of(d, s)) for d, s in types]
    with pytest.raises(VerifyError, match=match):
        get_op(name).build(vals, attrs)


def test_runtime_shape_mismatch_is_an_interpret_error() -> None:
    with pytest.raises(InterpretError, match="add: operand shapes"):
        run("add", [np.zeros(3, np.float32), np.zeros(4, np.float32)])


def test_convert_canonicalizes_to_identity() -> None:
    x = Value(TensorType.of("f32", ["B"]))
    op = get_op("convert").build([x], {"dtype": "f32"})
    assert get_op("convert").canonicalize(op, Rewriter()) is x


def test_constant_and_iota() -> None:
    arr = np.arange(6, dtype=np.int16).reshape(2, 3)
    op = get_op("constant").build([], {"value": arr})
    assert op.results[0].type == TensorType.of("i16", [2, 3])
    np.testing.assert_array_equal(run("constant", [], value=arr), arr)
    it = get_op("iota").build([], {"shape": ["B", 3], "dimension": 0, "dtype": "i32"})
    assert it.results[0].type == TensorType.of("i32", ["B", 3])
    got = get_op("iota").run([], get_op("iota").normalize_attrs(
        {"shape": ["B", 3], "dimension": 0, "dtype": "f32"}), Env({"B": 4}))[0]
    np.testing.assert_array_equal(got, np.repeat(np.arange(4.0)[:, None], 3, axis=1))
    with pytest.raises(VerifyError, match="iota: attribute dimension=2 is out of range"):
        get_op("iota").build([], {"shape": [2], "dimension": 2, "dtype": "i32"})
    with pytest.raises(VerifyError, match="must be a numeric dtype"):
        get_op("iota").build([], {"shape": [2], "dimension": 0, "dtype": "bool"})
