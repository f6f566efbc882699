"""cumulative (inclusive scans): shape rule, reference numerics against naive Python loops
for every numeric dtype and kind, NaN propagation, verifier errors, the text form.

Tolerances as in test_reduction.py: the reference rounds an accurate accumulator per
element, the oracle here is exact (math.fsum prefixes, Python ints wrapped to the dtype).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from disc_core import GraphBuilder, interpret
from disc_core.dtypes import FLOAT_DTYPES, NUMERIC_DTYPES, DType
from disc_core.ir import TensorType
from disc_core.opdef import Env, VerifyError, get_op
from disc_core.parser import parse_graph
from disc_core.printer import print_graph
from disc_core.symbolic import Expr

RTOL = {DType.F64: 1e-12, DType.F32: 1e-6, DType.F16: 2**-10, DType.BF16: 2**-7}


def types(operand, **attrs):
    op = get_op("cumulative")
    return op.result_types([TensorType.of(*operand)], op.normalize_attrs(attrs))


def run(x, **attrs):
    op = get_op("cumulative")
    return op.run([x], op.normalize_attrs(attrs), Env({}))[0]


def wrap(v: int, dt: DType) -> int:
    m = 1 << dt.bits
    v %= m
    return v - m if dt.is_signed and v >= m // 2 else v


def naive_scan(x: np.ndarray, kind: str, axis: int, dt: DType) -> np.ndarray:
    """Each prefix computed on its own: exact sums, Python products, max/min with NaN."""
    xm = np.moveaxis(x, axis, -1)
    out = np.zeros(xm.shape, np.float64 if dt.is_float else object)
    for idx in np.ndindex(*xm.shape[:-1]):
        row = [v.item() for v in xm[idx]]
        for i in range(len(row)):
            pre = row[: i + 1]
            if kind == "sum":
                v = math.fsum(pre) if dt.is_float else wrap(sum(pre), dt)
            elif kind == "prod":
                v = math.prod(pre) if dt.is_float else wrap(math.prod(pre), dt)
            elif dt.is_float and any(math.isnan(p) for p in pre):
                v = math.nan
            else:
                v = max(pre) if kind == "max" else min(pre)
            out[idx + (i,)] = v
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("kind", ["sum", "prod", "max", "min"])
@pytest.mark.parametrize("dt", sorted(NUMERIC_DTYPES, key=lambda d: d.short), ids=str)
@pytest.mark.parametrize("shape, axis", [((3, 5), 1), ((4, 2, 3), 0), ((2, 1, 6), 2),
                                         ((0, 4), 1), ((3, 0), 1), ((1,), 0)])
def test_reference_matches_naive_loops(kind, dt, shape, axis) -> None:
    rng = np.random.default_rng(hash((kind, dt.short, shape)) % 2**32)
    if dt.is_float:
        x = (rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)).astype(dt.np)
    else:
        info = np.iinfo(dt.np)
        x = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt.np)
    got = run(x, kind=kind, axis=axis)
    assert got.dtype == dt.np and got.shape == x.shape
    want = naive_scan(x, kind, axis, dt)
    if dt.is_float:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=RTOL[dt], atol=1e-6 if dt.bits == 16 else 0)
    else:
        np.testing.assert_array_equal(got, want.astype(dt.np))


@pytest.mark.parametrize("kind", ["max", "min", "sum"])
def test_nan_propagates_from_where_it_appears(kind) -> None:
    x = np.array([1.0, np.nan, 5.0, -2.0], np.float32)
    got = run(x, kind=kind, axis=0)
    assert got[0] == 1.0 and np.isnan(got[1:]).all()


def test_shape_rule_static_and_symbolic() -> None:
    n = Expr.sym("N")
    assert types(("f32", [n, 3]), kind="sum", axis=0) == [TensorType.of("f32", [n, 3])]
    assert types(("i32", [2, n, 4]), kind="max", axis=1) == [TensorType.of("i32", [2, n, 4])]
    for dt in FLOAT_DTYPES:
        assert types((dt, [0]), kind="prod", axis=0)[0].dtype == dt


@pytest.mark.parametrize("operand, attrs, message", [
    (("f32", [2, 3]), dict(kind="sum", axis=2), "axis=2 is out of range"),
    (("f32", [2, 3]), dict(kind="sum", axis=-1), "out of range"),
    (("bool", [2, 3]), dict(kind="max", axis=0), "numeric dtype"),
    (("f32", [2]), dict(kind="mean", axis=0), "mean"),
])
def test_verifier_errors(operand, attrs, message) -> None:
    with pytest.raises(VerifyError, match=message):
        types(operand, **attrs)


def test_text_form_round_trips_and_interprets() -> None:
    b = GraphBuilder("scan")
    n = b.symbol("N")
    x = b.input("x", "f64", [n, 3])
    g = b.build(b.cumulative(x, kind="sum", axis=0))
    text = print_graph(g)
    assert 'cumulative(%x) {kind = "sum", axis = 0}' in text
    g2 = parse_graph(text)
    assert print_graph(g2) == text
    xs = np.arange(6, dtype=np.float64).reshape(2, 3)
    np.testing.assert_array_equal(interpret(g2, [xs])[0], np.cumsum(xs, axis=0))
