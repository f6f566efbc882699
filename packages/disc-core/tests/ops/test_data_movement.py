"""Tests for disc_core.ops.data_movement: slice, dynamic_slice, dynamic_update_slice,
concatenate, pad, reverse.

Reference numerics are checked against independent numpy expressions (basic slicing,
np.concatenate, np.pad plus explicit interior loops, [::-1] indexing, element loops with
the HLO clamping rule written out) and compared bit for bit.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from op_testing import DTYPES, T, V, assert_same, build, idx, infer, rand, run, scalar, shape_st

from disc_core.builder import GraphBuilder
from disc_core.interpreter import interpret
from disc_core.ir import TensorType
from disc_core.opdef import InterpretError, Rewriter, VerifyError, get_op
from disc_core.parser import parse_graph
from disc_core.printer import print_graph
from disc_core.shape_facts import Eq
from disc_core.symbolic import as_expr, ceildiv

INDEX_DTYPES = [np.int8, np.int32, np.int64, np.uint8]
SETTINGS = settings(max_examples=60, deadline=None)


# -- slice -------------------------------------------------------------------------------

class TestSlice:
    def test_static_type(self):
        assert infer("slice", T("f32", [10]), start=[1], limit=[8], stride=[3]) == T("f32",
                                                                                    [3])
        assert infer("slice", T("bool", [4, 0]), start=[4, 0], limit=[4, 0]) == T("bool",
                                                                                   [0, 0])
        assert infer("slice", T("i8", []), start=[], limit=[]) == T("i8", [])

    def test_symbolic_type(self):
        x = T("f32", ["B", "S", 768])
        out = infer("slice", x, start=[0, 1, 0], limit=["B", "S", 768], stride=[1, 2, 3])
        assert out == TensorType.of("f32", ["B", ceildiv(as_expr("S") - 1, 2), 256])
        out = infer("slice", x, start=[0, 0, 0], limit=["B", "S - 1", 384])
        assert out == T("f32", ["B", "S - 1", 384])
        out = infer("slice", T("bf16", ["2*S"]), start=["S"], limit=["2*S"], stride=[2])
        assert out == TensorType.of("bf16", [ceildiv("S", 2)])

    def test_stride_default_normalized(self):
        attrs = get_op("slice").normalize_attrs({"start": [0, 1], "limit": [2, "B"]})
        assert attrs["stride"] == (1, 1)
        assert get_op("slice").normalize_attrs(attrs) == attrs  # idempotent normal form

    @pytest.mark.parametrize("attrs, pattern", [
        (dict(start=[0], limit=[4, 4]), r"slice: attribute start=\[0\] has 1 entries, "
                                        r"expected one per dim of operand #0 'x'"),
        (dict(start=[0, 0], limit=[4, 4], stride=[1]), r"slice: attribute stride=\[1\] has 1"),
        (dict(start=[0, 0], limit=[4, 4], stride=[1, 0]), r"slice: attribute stride\[1\] = 0 "
                                                          r"must be >= 1"),
        (dict(start=[-1, 0], limit=[4, 4]), r"slice: attribute start\[0\] = -1 is negative"),
        (dict(start=[3, 0], limit=[2, 4]), r"slice: attribute start\[0\] = 3 exceeds "
                                           r"limit\[0\] = 2"),
        (dict(start=[0, 0], limit=[4, 5]), r"slice: attribute limit\[1\] = 5 exceeds dim 1 of "
                                           r"operand #0 'x' \(f32\[S, 4\]\)"),
        (dict(start=[0, 0], limit=["S + 1", 4]), r"slice: attribute limit\[0\] = S \+ 1 "
                                                 r"exceeds dim 0"),
        (dict(start=["S + 2", 0], limit=["S", 4]), r"start\[0\] = S \+ 2 exceeds limit\[0\]"),
    ])
    def test_verify_errors(self, attrs, pattern):
        with pytest.raises(VerifyError, match=pattern):
            infer("slice", T("f32", ["S", 4]), **attrs)

    def test_unprovable_bounds_accepted(self):
        # T may or may not fit in S: left to run time
        assert infer("slice", T("f32", ["S"]), start=[0], limit=["T"]) == T("f32", ["T"])

    @SETTINGS
    @given(shape=shape_st(), dtype=st.sampled_from(DTYPES), data=st.data())
    def test_reference_matches_numpy(self, shape, dtype, data):
        start, limit, stride = [], [], []
        for d in shape:
            a = data.draw(st.integers(0, d))
            start.append(a)
            limit.append(data.draw(st.integers(a, d)))
            stride.append(data.draw(st.integers(1, 3)))
        x = rand(shape, dtype)
        got = run("slice", x, start=start, limit=limit, stride=stride)
        want = x[tuple(slice(a, b, c) for a, b, c in zip(start, limit, stride, strict=True))]
        assert_same(got, want)
        assert infer("slice", T(dtype, shape), start=start, limit=limit,
                     stride=stride) == T(dtype, want.shape)

    def test_reference_symbolic(self):
        x = rand((3, 7), "bf16")
        got = run("slice", x, start=[0, 1], limit=["B", "S - 1"], stride=[2, 2],
                  env={"B": 3, "S": 7})
        assert_same(got, x[0:3:2, 1:6:2])

    @pytest.mark.parametrize("start, limit, env", [
        ([0], ["S"], {"S": 6}),
        (["A"], [3], {"A": 4}),
        (["A"], ["S"], {"A": -1, "S": 2}),
    ])
    def test_reference_errors(self, start, limit, env):
        with pytest.raises(InterpretError, match=r"slice: dim 0 needs 0 <= start <= limit "
                                                 r"<= dim"):
            run("slice", rand((5,), "f32"), start=start, limit=limit, env=env)

    def test_canonicalize(self):
        x = V("f32", ["B", 4])
        sl = get_op("slice")
        assert sl.canonicalize(build("slice", x, start=[0, 0], limit=["B", 4]), Rewriter()) is x
        for attrs in (dict(start=[0, 1], limit=["B", 4]), dict(start=[0, 0], limit=["B", 4],
                                                               stride=[1, 2])):
            assert sl.canonicalize(build("slice", x, **attrs), Rewriter()) is None


# -- dynamic_slice -----------------------------------------------------------------------

def oracle_dynamic_slice(x: np.ndarray, starts, sizes) -> np.ndarray:
    """Element loop with the HLO clamp written out: start := min(max(start, 0), d - size)."""
    cl = []
    for s, n, d in zip(starts, sizes, x.shape, strict=True):
        s = int(s)
        if s < 0:
            s = 0
        if s + n > d:
            s = d - n
        cl.append(s)
    out = np.empty(sizes, dtype=x.dtype)
    for i in itertools.product(*(range(n) for n in sizes)):
        out[i] = x[tuple(a + b for a, b in zip(cl, i, strict=True))]
    return out


class TestDynamicSlice:
    def test_types(self):
        i32 = T("i32", [])
        assert infer("dynamic_slice", T("f32", [10, 4]), i32, i32, sizes=[3, 4]) == T("f32",
                                                                                    [3, 4])
        assert infer("dynamic_slice", T("bf16", ["B", "S", 768]), i32, T("i64", []),
                     T("u8", []), sizes=["B", 1, 768]) == T("bf16", ["B", 1, 768])
        assert infer("dynamic_slice", T("bool", []), sizes=[]) == T("bool", [])

    @pytest.mark.parametrize("indices, sizes, pattern", [
        ([T("i32", [])], [2, 2], r"dynamic_slice: expected 2 start indices \(one per dim of "
                                 r"operand #0 'x'.*got 1"),
        ([T("f32", []), T("i32", [])], [2, 2], r"dynamic_slice: operand #1 'start_indices\[0\]'"
                                               r" has dtype f32, expected an integer dtype"),
        ([T("i32", []), T("bool", [])], [2, 2], r"operand #2 'start_indices\[1\]' has dtype "
                                                r"bool"),
        ([T("i32", []), T("i32", [1])], [2, 2], r"dynamic_slice: operand #2 "
                                                r"'start_indices\[1\]' has type i32\[1\], "
                                                r"expected a rank-0 integer scalar"),
        ([T("i32", [])] * 2, [2, 5], r"dynamic_slice: attribute sizes\[1\] = 5 exceeds dim 1 "
                                     r"of operand #0 'x'"),
        ([T("i32", [])] * 2, ["B + 1", 2], r"attribute sizes\[0\] = B \+ 1 exceeds dim 0"),
        ([T("i32", [])] * 2, [-1, 2], r"dynamic_slice: attribute sizes\[0\] = -1 is negative"),
        ([T("i32", [])] * 2, [2], r"dynamic_slice: attribute sizes=\[2\] has 1 entries"),
    ])
    def test_verify_errors(self, indices, sizes, pattern):
        with pytest.raises(VerifyError, match=pattern):
            infer("dynamic_slice", T("f32", ["B", 4]), *indices, sizes=sizes)

    @SETTINGS
    @given(shape=shape_st(), dtype=st.sampled_from(DTYPES),
           idx_dtype=st.sampled_from([np.int8, np.int32, np.int64]), data=st.data())
    def test_reference_matches_oracle(self, shape, dtype, idx_dtype, data):
        sizes = [data.draw(st.integers(0, d)) for d in shape]
        starts = [data.draw(st.integers(-3, d + 3)) for d in shape]
        x = rand(shape, dtype)
        got = run("dynamic_slice", x, *idx(*starts, dtype=idx_dtype), sizes=sizes)
        assert_same(got, oracle_dynamic_slice(x, starts, sizes))

    def test_reference_numpy_cases(self):
        x = rand((5, 6), "bool")
        assert_same(run("dynamic_slice", x, *idx(1, 2, dtype=np.uint8), sizes=[2, 3]),
                    x[1:3, 2:5])
        # clamped: start 4 with size 3 in a dim of 6 starts at 3; -7 starts at 0
        assert_same(run("dynamic_slice", x, *idx(4, -7, dtype=np.int64), sizes=[2, "K"],
                        env={"K": 4}), x[3:5, 0:4])

    def test_reference_error(self):
        with pytest.raises(InterpretError, match=r"dynamic_slice: size 7 of dim 1 is not "
                                                 r"within \[0, 6\]"):
            run("dynamic_slice", rand((5, 6), "f32"), *idx(0, 0), sizes=[1, "K"],
                env={"K": 7})

    def test_canonicalize(self):
        x = V("f32", ["B", 4])
        i = V("i32", [])
        ds = get_op("dynamic_slice")
        assert ds.canonicalize(build("dynamic_slice", x, i, i, sizes=["B", 4]), Rewriter()) is x
        assert ds.canonicalize(build("dynamic_slice", x, i, i, sizes=["B", 3]),
                               Rewriter()) is None


# -- dynamic_update_slice ----------------------------------------------------------------

def oracle_dynamic_update_slice(x: np.ndarray, u: np.ndarray, starts) -> np.ndarray:
    out = x.copy()
    cl = [min(max(int(s), 0), d - n) for s, n, d in zip(starts, u.shape, x.shape, strict=True)]
    for i in itertools.product(*(range(n) for n in u.shape)):
        out[tuple(a + b for a, b in zip(cl, i, strict=True))] = u[i]
    return out


class TestDynamicUpdateSlice:
    def test_types(self):
        i64 = T("i64", [])
        assert infer("dynamic_update_slice", T("f32", [10, 4]), T("f32", [3, 4]), i64,
                     i64) == T("f32", [10, 4])
        assert infer("dynamic_update_slice", T("bf16", ["B", "S", 768]),
                     T("bf16", ["B", 1, 768]), i64, i64, i64) == T("bf16", ["B", "S", 768])

    @pytest.mark.parametrize("update, indices, pattern", [
        (T("f16", [2, 2]), [T("i32", [])] * 2, r"dynamic_update_slice: operand #1 'update' has "
                                               r"dtype f16, expected f32"),
        (T("f32", [2]), [T("i32", [])] * 2, r"dynamic_update_slice: operand #1 'update' has "
                                            r"rank 1 .*expected rank 2"),
        (T("f32", [2, 5]), [T("i32", [])] * 2, r"dynamic_update_slice: operand #1 'update' "
                                               r"dim 1 \(5\) exceeds dim 1 of operand #0 'x'"),
        (T("f32", ["B + 1", 2]), [T("i32", [])] * 2, r"'update' dim 0 \(B \+ 1\) exceeds"),
        (T("f32", [2, 2]), [T("i32", [])], r"dynamic_update_slice: expected 2 start indices"),
        (T("f32", [2, 2]), [T("i32", []), T("f64", [])], r"dynamic_update_slice: operand #3 "
                                                         r"'start_indices\[1\]' has dtype f64"),
    ])
    def test_verify_errors(self, update, indices, pattern):
        with pytest.raises(VerifyError, match=pattern):
            infer("dynamic_update_slice", T("f32", ["B", 4]), update, *indices)

    @SETTINGS
    @given(shape=shape_st(), dtype=st.sampled_from(DTYPES), data=st.data())
    def test_reference_matches_oracle(self, shape, dtype, data):
        ushape = [data.draw(st.integers(0, d)) for d in shape]
        starts = [data.draw(st.integers(-3, d + 3)) for d in shape]
        x, u = rand(shape, dtype, seed=1), rand(ushape, dtype, seed=2)
        xc = x.copy()
        got = run("dynamic_update_slice", x, u, *idx(*starts, dtype=np.int64))
        assert_same(got, oracle_dynamic_update_slice(x, u, starts))
        assert_same(x, xc)  # the operand is not modified

    def test_reference_numpy_case(self):
        x, u = rand((4, 5), "bf16"), rand((2, 2), "bf16", seed=3)
        want = x.copy()
        want[2:4, 3:5] = u  # start (9, 3): row clamps to 2
        assert_same(run("dynamic_update_slice", x, u, *idx(9, 3, dtype=np.uint8)), want)

    def test_reference_error(self):
        with pytest.raises(InterpretError, match=r"dynamic_update_slice: update shape \[3, 1\] "
                                                 r"exceeds the operand shape \[2, 2\]"):
            run("dynamic_update_slice", rand((2, 2), "f32"), rand((3, 1), "f32"), *idx(0, 0))

    def test_canonicalize(self):
        x = V("f32", ["B", 4])
        i = V("i32", [])
        dus = get_op("dynamic_update_slice")
        u = V("f32", ["B", 4])
        assert dus.canonicalize(build("dynamic_update_slice", x, u, i, i), Rewriter()) is u
        part = V("f32", ["B", 3])
        assert dus.canonicalize(build("dynamic_update_slice", x, part, i, i),
                                Rewriter()) is None


# -- concatenate -------------------------------------------------------------------------

class TestConcatenate:
    def test_types(self):
        assert infer("concatenate", T("f32", [2, 3]), T("f32", [2, 5]),
                     dimension=1) == T("f32", [2, 8])
        assert infer("concatenate", T("bf16", ["B", "S", 768]), T("bf16", ["B", "T", 768]),
                     dimension=1) == T("bf16", ["B", "S + T", 768])
        assert infer("concatenate", T("bool", ["S"]), T("bool", ["S"]), T("bool", [0]),
                     dimension=0) == T("bool", ["2*S"])
        assert infer("concatenate", T("i8", [0, 4]), dimension=0) == T("i8", [0, 4])
        # static beats symbolic when unifying the other dims
        assert infer("concatenate", T("f32", ["B", 4]), T("f32", [3, 4]),
                     dimension=1) == T("f32", [3, 8])

    def test_facts(self):
        op = build("concatenate", V("f32", ["B", 4]), V("f32", [3, 4]), V("f32", ["C", 1]),
                   dimension=1)
        assert list(get_op("concatenate").facts(op)) == [Eq(as_expr("B"), as_expr(3)),
                                                         Eq(as_expr("C"), as_expr(3))]

    @pytest.mark.parametrize("types, dim, pattern", [
        ([T("f32", [2, 3]), T("f16", [2, 3])], 0, r"concatenate: operand #1 'inputs\[1\]' has "
                                                  r"dtype f16, expected f32"),
        ([T("f32", [2, 3]), T("f32", [2])], 0, r"concatenate: operand #1 'inputs\[1\]' has "
                                               r"rank 1"),
        ([T("f32", [2, 3]), T("f32", [3, 3])], 1, r"concatenate: operand #1 'inputs\[1\]' "
                                                  r"\(f32\[3, 3\]\) dim 0: dimension 2 does "
                                                  r"not match 3"),
        ([T("f32", ["S", 3]), T("f32", ["S + 1", 3])], 1, r"dim 0: dimension S does not match"),
        ([T("f32", [2, 3])], 2, r"concatenate: attribute dimension=2 is out of range for "
                                r"rank 2"),
        ([T("f32", [])], 0, r"concatenate: attribute dimension=0 is out of range for rank 0"),
        ([], 0, r"concatenate: expected at least 1 operands"),
    ])
    def test_verify_errors(self, types, dim, pattern):
        with pytest.raises(VerifyError, match=pattern):
            infer("concatenate", *types, dimension=dim)

    @SETTINGS
    @given(base=shape_st(min_rank=1, max_rank=3, max_dim=4), dtype=st.sampled_from(DTYPES),
           data=st.data())
    def test_reference_matches_numpy(self, base, dtype, data):
        axis = data.draw(st.integers(0, len(base) - 1))
        n = data.draw(st.integers(1, 4))
        arrays = []
        for k in range(n):
            shape = list(base)
            shape[axis] = data.draw(st.integers(0, 4))
            arrays.append(rand(shape, dtype, seed=k))
        got = run("concatenate", *arrays, dimension=axis)
        assert_same(got, np.concatenate(arrays, axis=axis))

    def test_reference_error(self):
        with pytest.raises(InterpretError, match=r"concatenate: input #1 has shape \[3, 2\], "
                                                 r"which differs from input #0 \[2, 2\] "
                                                 r"outside dimension 1"):
            run("concatenate", rand((2, 2), "f32"), rand((3, 2), "f32"), dimension=1)

    def test_canonicalize(self):
        cc = get_op("concatenate")
        x = V("f32", ["B", 4])
        assert cc.canonicalize(build("concatenate", x, dimension=0), Rewriter()) is x
        # a statically empty piece is dropped
        empty = V("f32", ["B", 0])
        assert cc.canonicalize(build("concatenate", empty, x, dimension=1), Rewriter()) is x
        y = V("f32", ["B", 2])
        op = build("concatenate", x, empty, y, dimension=1)
        rw = Rewriter()
        new = cc.canonicalize(op, rw)
        assert len(rw.created) == 1 and rw.created[0].operands == [x, y]
        assert new.type == op.result.type == T("f32", ["B", 6])
        # dropping would lose the static dim that the empty piece contributed: kept
        op = build("concatenate", V("f32", [3, 0]), x, dimension=1)
        assert op.result.type == T("f32", [3, 4])
        assert cc.canonicalize(op, Rewriter()) is None
        assert cc.canonicalize(build("concatenate", x, y, dimension=1), Rewriter()) is None


# -- pad ---------------------------------------------------------------------------------

def oracle_pad(x: np.ndarray, pv, low, high, interior) -> np.ndarray:
    """One axis at a time: interior dilation by strided assignment, then np.pad for
    positive edges, then slicing for negative ones."""
    y = x
    for k, (lo, hi, it) in enumerate(zip(low, high, interior, strict=True)):
        d = y.shape[k]
        n = d + max(d - 1, 0) * it
        shape = list(y.shape)
        shape[k] = n
        dil = np.full(shape, pv, dtype=x.dtype)
        sel = [slice(None)] * y.ndim
        sel[k] = slice(None, None, it + 1)
        dil[tuple(sel)] = y
        widths = [(0, 0)] * y.ndim
        widths[k] = (max(lo, 0), max(hi, 0))
        y = np.pad(dil, widths, mode="constant", constant_values=pv)
        crop = [slice(None)] * y.ndim
        crop[k] = slice(max(-lo, 0), y.shape[k] - max(-hi, 0))
        y = y[tuple(crop)]
    return y


class TestPad:
    def test_static_types(self):
        pv = T("f32", [])
        assert infer("pad", T("f32", [3]), pv, low=[1], high=[2], interior=[1]) == T("f32", [8])
        assert infer("pad", T("f32", [0]), pv, low=[1], high=[2], interior=[3]) == T("f32", [3])
        assert infer("pad", T("f32", [5]), pv, low=[-2], high=[1]) == T("f32", [4])
        assert infer("pad", T("f32", []), pv, low=[], high=[]) == T("f32", [])

    def test_symbolic_types(self):
        out = infer("pad", T("f32", ["B", "S", 768]), T("f32", []), low=[0, 1, -2],
                    high=[1, "S", 0], interior=[2, 1, 0])
        # B + 2*max(B - 1, 0) + 1, S + max(S - 1, 0) + 1 + S, 766: no gaps in an empty dim
        assert out == T("f32", ["B + 2*max(B - 1, 0) + 1", "2*S + max(S - 1, 0) + 1", 766])
        out = infer("pad", T("bool", ["N"]), T("bool", []), low=["P"], high=["P"])
        assert out == T("bool", ["N + 2*P"])

    def test_interior_default_normalized(self):
        attrs = get_op("pad").normalize_attrs({"low": [0, 1], "high": [2, 0]})
        assert attrs["interior"] == (0, 0)
        assert get_op("pad").normalize_attrs(attrs) == attrs

    @pytest.mark.parametrize("pv, attrs, pattern", [
        (T("f32", [1]), dict(low=[0], high=[0]), r"pad: operand #1 'padding_value' has rank 1 "
                                                 r"\(f32\[1\]\), expected rank 0"),
        (T("i32", []), dict(low=[0], high=[0]), r"pad: operand #1 'padding_value' has dtype "
                                                r"i32, expected f32"),
        (T("f32", []), dict(low=[0], high=[0], interior=[-1]), r"pad: attribute interior\[0\] "
                                                               r"= -1 is negative"),
        (T("f32", []), dict(low=[0, 0], high=[0]), r"pad: attribute low=\[0, 0\] has 2 "
                                                   r"entries, expected one per dim"),
        (T("f32", []), dict(low=[0], high=[0], interior=[0, 0]), r"pad: attribute "
                                                                 r"interior=\[0, 0\] has 2"),
        (T("f32", []), dict(low=[-3], high=[-3]), r"pad: dim 0 of operand #0 'x' \(f32\[5\]\) "
                                                  r"padded by low=-3, high=-3, interior=0 has "
                                                  r"negative size -1"),
    ])
    def test_verify_errors(self, pv, attrs, pattern):
        with pytest.raises(VerifyError, match=pattern):
            infer("pad", T("f32", [5]), pv, **attrs)

    @SETTINGS
    @given(shape=shape_st(max_rank=3, max_dim=4), dtype=st.sampled_from(DTYPES),
           data=st.data())
    def test_reference_matches_oracle(self, shape, dtype, data):
        low, high, interior = [], [], []
        for d in shape:
            it = data.draw(st.integers(0, 2))
            n = d + max(d - 1, 0) * it
            lo = data.draw(st.integers(-n, 3))
            hi = data.draw(st.integers(-(n + lo) if n + lo > 0 else 0, 3))
            low.append(lo)
            high.append(hi)
            interior.append(it)
        x = rand(shape, dtype, seed=4)
        pv = rand((), dtype, seed=5)
        got = run("pad", x, pv, low=low, high=high, interior=interior)
        assert_same(got, oracle_pad(x, pv, low, high, interior))
        assert infer("pad", T(dtype, shape), T(dtype, []), low=low, high=high,
                     interior=interior) == T(dtype, got.shape)

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_reference_np_pad(self, dtype):
        x, pv = rand((2, 3), dtype), scalar(1, dtype)
        got = run("pad", x, pv, low=[1, 0], high=["H", 2], env={"H": 2})
        assert_same(got, np.pad(x, [(1, 2), (0, 2)], constant_values=pv))

    def test_reference_interior_by_hand(self):
        x = np.array([1, 2, 3], np.int32)
        got = run("pad", x, scalar(0, "i32"), low=[1], high=[-1], interior=[2])
        assert_same(got, np.array([0, 1, 0, 0, 2, 0, 0], np.int32))  # ...3 cropped by high=-1
        # crop through the whole operand into the high padding: all padding value
        got = run("pad", x, scalar(9, "i32"), low=[-5], high=[4], interior=[0])
        assert_same(got, np.array([9, 9], np.int32))

    def test_reference_error(self):
        with pytest.raises(InterpretError, match=r"pad: dim 0 \(size 2\) padded by low=-3, "
                                                 r"high=0, interior=0 has negative size -1"):
            run("pad", rand((2,), "f32"), scalar(0, "f32"), low=["-L"], high=[0], env={"L": 3})

    @pytest.mark.parametrize("n", [0, 1, 2, 5])
    def test_symbolic_interior_holds_for_an_empty_dim(self, n):
        """An empty operand has no gaps to fill: result dim low + high, never
        ``(0 - 1) * interior`` less (XLA/StableHLO: ``max(d - 1, 0) * interior``), so the
        symbolic type agrees with the reference for every run-time size, 0 included."""
        b = GraphBuilder("pad0")
        x = b.input("x", "f32", ["N"])
        p = b.input("p", "f32", [])
        g = b.build(b.pad(x, p, low=[1], high=[1], interior=[2]))
        assert g.outputs[0].type == T("f32", ["N + 2*max(N - 1, 0) + 2"])
        got = interpret(g, [np.ones(n, np.float32), scalar(0, "f32")])[0]
        assert_same(got, oracle_pad(np.ones(n, np.float32), np.float32(0), [1], [1], [2]))
        assert got.shape == (max(3 * n, 2),)

    def test_empty_dim_with_interior_and_cropping_is_verified(self):
        """low + high < 0 on an empty dim is a negative size whatever the interior."""
        with pytest.raises(VerifyError, match=r"interior=3 has negative size -1"):
            infer("pad", T("f32", [0]), T("f32", []), low=[-1], high=[0], interior=[3])
        assert infer("pad", T("f32", [0]), T("f32", []), low=[0], high=[0],
                     interior=[3]) == T("f32", [0])

    def test_canonicalize(self):
        x = V("f32", ["B", 4])
        pv = V("f32", [])
        pad = get_op("pad")
        assert pad.canonicalize(build("pad", x, pv, low=[0, 0], high=[0, 0]), Rewriter()) is x
        for attrs in (dict(low=[0, 1], high=[0, 0]), dict(low=[0, 0], high=[0, 0],
                                                          interior=[0, 1])):
            assert pad.canonicalize(build("pad", x, pv, **attrs), Rewriter()) is None


# -- reverse -----------------------------------------------------------------------------

class TestReverse:
    def test_types(self):
        assert infer("reverse", T("f32", [2, 3]), dimensions=[1]) == T("f32", [2, 3])
        assert infer("reverse", T("bf16", ["B", "S", 768]),
                     dimensions=[0, 2]) == T("bf16", ["B", "S", 768])
        assert infer("reverse", T("bool", []), dimensions=[]) == T("bool", [])

    @pytest.mark.parametrize("dims, pattern", [
        ([2], r"reverse: attribute dimensions=2 is out of range for rank 2"),
        ([-1], r"reverse: attribute dimensions=-1 is out of range"),
        ([0, 0], r"reverse: attribute dimensions=\[0, 0\] repeats an axis"),
    ])
    def test_verify_errors(self, dims, pattern):
        with pytest.raises(VerifyError, match=pattern):
            infer("reverse", T("f32", ["B", 3]), dimensions=dims)

    @SETTINGS
    @given(shape=shape_st(max_rank=4), dtype=st.sampled_from(DTYPES), data=st.data())
    def test_reference_matches_numpy(self, shape, dtype, data):
        dims = data.draw(st.lists(st.integers(0, max(len(shape) - 1, 0)), unique=True,
                                  max_size=len(shape))) if shape else []
        x = rand(shape, dtype)
        want = x[tuple(slice(None, None, -1) if k in dims else slice(None)
                       for k in range(x.ndim))]
        assert_same(run("reverse", x, dimensions=dims), want)

    def test_canonicalize(self):
        rev = get_op("reverse")
        x = V("f32", ["B", 1, 4])
        assert rev.canonicalize(build("reverse", x, dimensions=[]), Rewriter()) is x
        assert rev.canonicalize(build("reverse", x, dimensions=[1]), Rewriter()) is x
        # size-1 dims are dropped from the list
        rw = Rewriter()
        new = rev.canonicalize(build("reverse", x, dimensions=[2, 1]), rw)
        assert rw.created[0].attrs["dimensions"] == (2,) and new.type == x.type
        # reverse of reverse: the symmetric difference
        inner = build("reverse", x, dimensions=[0, 2])
        assert rev.canonicalize(build("reverse", inner.result, dimensions=[2, 0]),
                                Rewriter()) is x
        rw = Rewriter()
        rev.canonicalize(build("reverse", inner.result, dimensions=[0]), rw)
        assert rw.created[0].operands == [x] and rw.created[0].attrs["dimensions"] == (2,)
        assert rev.canonicalize(build("reverse", x, dimensions=[0, 2]), Rewriter()) is None


# -- traits and text form ----------------------------------------------------------------

@pytest.mark.parametrize("name", ["slice", "dynamic_slice", "dynamic_update_slice",
                                  "concatenate", "pad", "reverse"])
def test_traits(name):
    assert get_op(name).has_trait("pure")


def test_print_parse_round_trip_and_interpret():
    b = GraphBuilder("data_movement")
    x = b.input("x", "f32", ["B", "S"])
    i = b.input("i", "i32", [])
    s = b.slice(x, start=[0, 1], limit=["B", "S"], stride=[1, 2])
    s1 = b.slice(x, start=[0, 0], limit=["B", "S - 1"])
    ds = b.dynamic_slice(x, i, i, sizes=[1, 2])
    du = b.dynamic_update_slice(x, ds, i, i)
    cc = b.concatenate(x, s1, dimension=1)
    pv = b.constant(np.array(0.5, np.float32))
    pd = b.pad(x, pv, low=[1, -1], high=[0, "S"], interior=[1, 0])
    rv = b.reverse(x, dimensions=[1])
    g = b.build(s, ds, du, cc, pd, rv)
    text = print_graph(g)
    assert "stride = [1, 1]" in text and "interior = [1, 0]" in text
    g2 = parse_graph(text)
    assert print_graph(g2) == text
    xv, iv = rand((3, 5), "f32"), np.array(1, np.int32)
    upd = xv.copy()
    upd[1:2, 1:3] = xv[1:2, 1:3]
    want = [xv[:, 1::2], xv[1:2, 1:3], upd, np.concatenate([xv, xv[:, :4]], axis=1),
            oracle_pad(xv, np.float32(0.5), [1, -1], [0, 5], [1, 0]), xv[:, ::-1]]
    for graph in (g, g2):
        for got, w in zip(interpret(graph, [xv, iv]), want, strict=True):
            assert_same(got, w)
