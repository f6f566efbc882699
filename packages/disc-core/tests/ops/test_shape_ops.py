"""Tests for disc_core.ops.shape_ops: reshape, broadcast_in_dim, dynamic_reshape,
dynamic_broadcast_in_dim, get_dimension_size, transpose.

Reference numerics are checked against independent numpy expressions (np.reshape,
np.broadcast_to, per-element loops, np.transpose) and compared bit for bit.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from op_testing import DTYPES, T, V, assert_same, build, infer, rand, run, shape_st

from disc_core.builder import GraphBuilder
from disc_core.interpreter import interpret
from disc_core.opdef import InterpretError, Rewriter, VerifyError, get_op
from disc_core.parser import parse_graph
from disc_core.printer import print_graph
from disc_core.shape_facts import Divisible, Eq, ProductEq
from disc_core.symbolic import as_expr, floordiv

SETTINGS = settings(max_examples=60, deadline=None)


# -- reshape -----------------------------------------------------------------------------

class TestReshape:
    def test_static_type(self):
        assert infer("reshape", T("f32", [2, 3, 4]), shape=[6, 4]) == T("f32", [6, 4])
        assert infer("reshape", T("bool", [1]), shape=[]) == T("bool", [])
        assert infer("reshape", T("i8", [0, 5]), shape=[5, 0, 3]) == T("i8", [5, 0, 3])

    def test_symbolic_type(self):
        x = T("f32", ["B", "S", 768])
        assert infer("reshape", x, shape=["B*S", 768]) == T("f32", ["B*S", 768])
        assert infer("reshape", x, shape=["B", "S", 12, 64]) == T("f32", ["B", "S", 12, 64])
        # symbolic target dims that the verifier cannot relate are accepted
        assert infer("reshape", x, shape=["N", 768]) == T("f32", ["N", 768])
        # B may be 0: not provably different
        assert infer("reshape", T("f32", ["B"]), shape=["B", 2, 0]) == T("f32", ["B", 2, 0])
        out = infer("reshape", T("bf16", ["B*S", 768]), shape=["B", "S", 768])
        assert out.shape == (as_expr("B"), as_expr("S"), as_expr(768))

    def test_facts(self):
        same = build("reshape", V("f32", ["B", "S", 768]), shape=["B*S", 768])
        assert list(get_op("reshape").facts(same)) == []
        op = build("reshape", V("f32", ["N"]), shape=["M", 6])
        assert list(get_op("reshape").facts(op)) == [
            ProductEq((as_expr("N"),), (as_expr("M"), as_expr(6))),
            Divisible(as_expr("N"), 6)]
        op = build("reshape", V("f32", ["B", "S", 768]), shape=["B", "S//2", 2, 768])
        facts = list(get_op("reshape").facts(op))
        assert facts[0] == ProductEq(op.operands[0].shape, op.results[0].shape)
        assert facts[1:] == [Divisible(as_expr("B*S"), 2)]

    @pytest.mark.parametrize("xshape, shape, pattern", [
        ([2, 3], [7], r"reshape: operand #0 'x' has 6 elements .* attribute shape=\[7\] has 7"),
        (["B", 4], ["4*B + 1"], r"reshape: operand #0 'x' has 4\*B elements"),
        (["B", 0], [1], r"reshape: operand #0 'x' has 0 elements"),
        ([6], [-1, 6], r"reshape: attribute shape\[0\] = -1 is negative"),
    ])
    def test_verify_errors(self, xshape, shape, pattern):
        with pytest.raises(VerifyError, match=pattern):
            infer("reshape", T("f32", xshape), shape=shape)

    def test_missing_attr(self):
        with pytest.raises(VerifyError, match="reshape: missing required attribute 'shape'"):
            build("reshape", V("f32", [2]))

    @SETTINGS
    @given(shape=shape_st(), dtype=st.sampled_from(DTYPES), data=st.data())
    def test_reference_matches_numpy(self, shape, dtype, data):
        x = rand(shape, dtype)
        # target: the operand's dims, shuffled, with random adjacent groups merged
        dims = data.draw(st.permutations(list(shape)))
        target: list[int] = []
        for d in dims:
            if target and data.draw(st.booleans()):
                target[-1] *= d
            else:
                target.append(d)
        if data.draw(st.booleans()):
            target.append(1)
        assert_same(run("reshape", x, shape=target), np.reshape(x, target))

    def test_reference_symbolic(self):
        x = rand((2, 3, 4), "bf16")
        got = run("reshape", x, shape=["B*S", "H"], env={"B": 2, "S": 3, "H": 4})
        assert_same(got, np.reshape(x, (6, 4)))
        got = run("reshape", x.T, shape=["H*S*B"], env={"B": 2, "S": 3, "H": 4})
        assert_same(got, x.T.reshape(-1))  # row-major order of the (transposed) operand

    def test_reference_error(self):
        x = rand((2, 3), "f32")
        with pytest.raises(InterpretError, match=r"reshape: .*\[2, 3\].*\[5\]"):
            run("reshape", x, shape=["N"], env={"N": 5})

    def test_canonicalize_identity(self):
        x = V("f32", ["B", 4])
        op = build("reshape", x, shape=["B", 4])
        rw = Rewriter()
        assert get_op("reshape").canonicalize(op, rw) is x
        assert rw.created == []

    def test_canonicalize_reshape_of_reshape(self):
        x = V("f32", ["B", 4, 6])
        inner = build("reshape", x, shape=["B", 24])
        outer = build("reshape", inner.result, shape=["B*4", 6])
        rw = Rewriter()
        new = get_op("reshape").canonicalize(outer, rw)
        assert len(rw.created) == 1 and rw.created[0].operands == [x]
        assert new is rw.created[0].result and new.type == outer.result.type
        # back to the original type: the operand itself
        back = build("reshape", inner.result, shape=["B", 4, 6])
        rw = Rewriter()
        assert get_op("reshape").canonicalize(back, rw) is x and rw.created == []

    def test_canonicalize_keeps_provably_failing_pair(self):
        # [B] -> [C] -> [B + 1] verifies step by step, but B -> B + 1 never can
        inner = build("reshape", V("f32", ["B"]), shape=["C"])
        outer = build("reshape", inner.result, shape=["B + 1"])
        rw = Rewriter()
        assert get_op("reshape").canonicalize(outer, rw) is None and rw.created == []

    def test_canonicalize_noop(self):
        op = build("reshape", V("f32", ["B", 4]), shape=["B*4"])
        assert get_op("reshape").canonicalize(op, Rewriter()) is None

    def test_traits(self):
        assert get_op("reshape").has_trait("pure")


# -- broadcast_in_dim --------------------------------------------------------------------

def oracle_broadcast(x: np.ndarray, shape, bdims) -> np.ndarray:
    """Element by element: result[idx] = x[idx[bdims[i]] or 0 where x's dim is 1]."""
    out = np.empty(shape, dtype=x.dtype)
    for idx in itertools.product(*(range(d) for d in shape)):
        src = tuple(0 if x.shape[i] == 1 else idx[j] for i, j in enumerate(bdims))
        out[idx] = x[src]
    return out


class TestBroadcastInDim:
    def test_static_type(self):
        assert infer("broadcast_in_dim", T("f32", [3]), shape=[2, 3],
                     broadcast_dimensions=[1]) == T("f32", [2, 3])
        assert infer("broadcast_in_dim", T("i8", [1, 3]), shape=[4, 2, 3],
                     broadcast_dimensions=[1, 2]) == T("i8", [4, 2, 3])
        assert infer("broadcast_in_dim", T("bool", []), shape=[0, 5],
                     broadcast_dimensions=[]) == T("bool", [0, 5])
        # any order of broadcast_dimensions
        assert infer("broadcast_in_dim", T("f32", [3, 2]), shape=[2, 3],
                     broadcast_dimensions=[1, 0]) == T("f32", [2, 3])

    def test_symbolic_type(self):
        assert infer("broadcast_in_dim", T("f32", ["S"]), shape=["B", "S", 768],
                     broadcast_dimensions=[1]) == T("f32", ["B", "S", 768])
        # symbolic operand dims are accepted (1 or equal at run time), also against static
        assert infer("broadcast_in_dim", T("f32", ["S", 1]), shape=[4, "B"],
                     broadcast_dimensions=[0, 1]) == T("f32", [4, "B"])
        assert infer("broadcast_in_dim", T("f32", [3]), shape=["S"],
                     broadcast_dimensions=[0]) == T("f32", ["S"])

    def test_facts(self):
        facts = get_op("broadcast_in_dim").facts
        assert list(facts(build("broadcast_in_dim", V("f32", [3]), shape=["S"],
                                broadcast_dimensions=[0]))) == [Eq(as_expr(3), as_expr("S"))]
        # dims that could be 1 imply nothing
        assert list(facts(build("broadcast_in_dim", V("f32", ["T"]), shape=["S"],
                                broadcast_dimensions=[0]))) == []
        assert list(facts(build("broadcast_in_dim", V("f32", [1, "S"]), shape=["B", "S"],
                                broadcast_dimensions=[0, 1]))) == []

    @pytest.mark.parametrize("xshape, shape, bdims, pattern", [
        ([3], [2, 4], [1], r"broadcast_in_dim: operand #0 'x' dim 0 \(3\) cannot broadcast "
                           r"to result dim 1 \(4\).*expected 1 or 4"),
        ([3], [2, 3], [0, 1], r"broadcast_in_dim: attribute broadcast_dimensions=\[0, 1\] "
                              r"has 2 entries, expected one per dim of operand #0 'x'"),
        ([3], [2, 3], [2], r"broadcast_in_dim: attribute broadcast_dimensions=2 is out of "
                           r"range for rank 2"),
        ([3, 3], [3, 3], [1, 1], r"broadcast_in_dim: attribute broadcast_dimensions=\[1, 1\] "
                                 r"repeats an axis"),
        ([3], [-2, 3], [1], r"broadcast_in_dim: attribute shape\[0\] = -2 is negative"),
    ])
    def test_verify_errors(self, xshape, shape, bdims, pattern):
        with pytest.raises(VerifyError, match=pattern):
            infer("broadcast_in_dim", T("f32", xshape), shape=shape, broadcast_dimensions=bdims)

    @SETTINGS
    @given(out_shape=shape_st(max_rank=4, max_dim=3), dtype=st.sampled_from(DTYPES),
           data=st.data())
    def test_reference_matches_oracle(self, out_shape, dtype, data):
        rank = len(out_shape)
        bdims = data.draw(st.lists(st.integers(0, max(rank - 1, 0)), unique=True,
                                   max_size=rank)) if rank else []
        xshape = tuple(data.draw(st.sampled_from([1, out_shape[j]])) for j in bdims)
        x = rand(xshape, dtype)
        got = run("broadcast_in_dim", x, shape=list(out_shape), broadcast_dimensions=bdims)
        assert_same(got, oracle_broadcast(x, out_shape, bdims))

    def test_reference_numpy_cases(self):
        x = rand((3,), "bf16")
        assert_same(run("broadcast_in_dim", x, shape=[2, 3], broadcast_dimensions=[1]),
                    np.broadcast_to(x, (2, 3)))
        y = rand((3, 2), "bool")
        assert_same(run("broadcast_in_dim", y, shape=[2, 3], broadcast_dimensions=[1, 0]),
                    np.transpose(y))
        z = rand((4, 1), "i64")
        got = run("broadcast_in_dim", z, shape=["B", 4, "S"], broadcast_dimensions=[1, 2],
                  env={"B": 2, "S": 5})
        assert_same(got, np.broadcast_to(z[None], (2, 4, 5)))

    def test_reference_error(self):
        x = rand((3,), "f32")
        with pytest.raises(InterpretError, match=r"broadcast_in_dim: operand dim 0 is 3.*"
                                                 r"result dim 1 = 4"):
            run("broadcast_in_dim", x, shape=[2, "S"], broadcast_dimensions=[1], env={"S": 4})

    def test_canonicalize(self):
        x = V("f32", ["B", 4])
        op = build("broadcast_in_dim", x, shape=["B", 4], broadcast_dimensions=[0, 1])
        assert get_op("broadcast_in_dim").canonicalize(op, Rewriter()) is x
        op = build("broadcast_in_dim", x, shape=[2, "B", 4], broadcast_dimensions=[1, 2])
        assert get_op("broadcast_in_dim").canonicalize(op, Rewriter()) is None
        sq = V("f32", [3, 3])
        op = build("broadcast_in_dim", sq, shape=[3, 3], broadcast_dimensions=[1, 0])
        assert get_op("broadcast_in_dim").canonicalize(op, Rewriter()) is None  # a transpose


# -- dynamic_reshape ---------------------------------------------------------------------

class TestDynamicReshape:
    def test_types(self):
        x = T("f32", ["B", "S", 768])
        assert infer("dynamic_reshape", x, T("i64", [2]), shape=["N", 768]) == T("f32",
                                                                                 ["N", 768])
        assert infer("dynamic_reshape", T("bool", [2, 3]), T("i32", [1]),
                     shape=[6]) == T("bool", [6])
        assert infer("dynamic_reshape", T("u8", [1]), T("i32", [0]), shape=[]) == T("u8", [])

    def test_facts(self):
        op = build("dynamic_reshape", V("f32", ["B", "S", 768]), V("i64", [2]),
                   shape=["N", 768])
        assert list(get_op("dynamic_reshape").facts(op)) == [
            ProductEq(op.operands[0].shape, op.results[0].shape)]

    @pytest.mark.parametrize("shape_t, shape, pattern", [
        (T("f32", [2]), ["N", 4], r"dynamic_reshape: operand #1 'shape_tensor' has dtype "
                                  r"f32, expected one of i32, i64"),
        (T("i64", [3]), ["N", 4], r"dynamic_reshape: operand #1 'shape_tensor' has type "
                                  r"i64\[3\], expected a 1-D tensor of static length 2"),
        (T("i64", ["K"]), ["N", 4], r"operand #1 'shape_tensor' has type i64\[K\]"),
        (T("i32", [1, 2]), ["N", 4], r"operand #1 'shape_tensor' has type i32\[1, 2\]"),
        (T("i64", [2]), [3, 4], r"dynamic_reshape: operand #0 'x' has 8 elements"),
        (T("i64", [2]), [-1, 4], r"dynamic_reshape: attribute shape\[0\] = -1 is negative"),
    ])
    def test_verify_errors(self, shape_t, shape, pattern):
        with pytest.raises(VerifyError, match=pattern):
            infer("dynamic_reshape", T("f32", [2, 4]), shape_t, shape=shape)

    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
    def test_reference_fresh_symbol(self, dtype, idx_dtype):
        x = rand((2, 3, 4), dtype)
        got = run("dynamic_reshape", x, np.array([6, 4], idx_dtype), shape=["N", "H"],
                  env={"B": 2, "S": 3, "H": 4})  # N is unbound: taken from the tensor
        assert_same(got, np.reshape(x, (6, 4)))

    def test_reference_zero_sized(self):
        x = rand((0, 3), "bf16")
        got = run("dynamic_reshape", x, np.array([3, 0, 5], np.int64), shape=["A", "C", "D"])
        assert_same(got, np.reshape(x, (3, 0, 5)))

    def test_reference_errors(self):
        x = rand((2, 3, 4), "f32")
        with pytest.raises(InterpretError, match=r"dynamic_reshape: shape operand \[6, 4\] "
                                                 r"says dim 0 is 6, but attribute shape\[0\] "
                                                 r"= N = 5"):
            run("dynamic_reshape", x, np.array([6, 4]), shape=["N", 4], env={"N": 5})
        with pytest.raises(InterpretError, match=r"dynamic_reshape: cannot reshape .*"
                                                 r"\[2, 3, 4\].*\[5, 4\]"):
            run("dynamic_reshape", x, np.array([5, 4]), shape=["N", 4])
        with pytest.raises(InterpretError, match=r"negative dim 0"):
            run("dynamic_reshape", x, np.array([-6, -4]), shape=["N", "M"])
        with pytest.raises(InterpretError, match=r"shape operand has shape \(3,\), "
                                                 r"expected \(2,\)"):
            run("dynamic_reshape", x, np.array([6, 4, 1]), shape=["N", 4])

    def test_interpreter_binds_fresh_symbol(self):
        b = GraphBuilder("dr")
        x = b.input("x", "f32", ["B", "S"])
        shp = b.input("shp", "i64", [1])
        y = b.dynamic_reshape(x, shp, shape=["N"])
        z = b.reshape(y, shape=["B*S"])
        g = b.build(z)
        xv = rand((3, 5), "f32")
        (out,) = interpret(g, [xv, np.array([15])])
        assert_same(out, xv.reshape(-1))
        with pytest.raises(InterpretError):
            interpret(g, [xv, np.array([14])])

    def test_canonicalize(self):
        x = V("f32", [2, 6])
        cst = build("constant", value=np.array([3, 4], np.int64))
        op = build("dynamic_reshape", x, cst.result, shape=[3, 4])
        rw = Rewriter()
        new = get_op("dynamic_reshape").canonicalize(op, rw)
        assert [o.name for o in rw.created] == ["reshape"] and new.type == op.result.type
        assert rw.created[0].operands == [x]
        # symbolic attr, a constant that disagrees, or a non-constant tensor: kept
        op = build("dynamic_reshape", x, cst.result, shape=["N", 4])
        assert get_op("dynamic_reshape").canonicalize(op, Rewriter()) is None
        bad = build("constant", value=np.array([4, 3], np.int64))
        op = build("dynamic_reshape", x, bad.result, shape=[3, 4])
        assert get_op("dynamic_reshape").canonicalize(op, Rewriter()) is None
        op = build("dynamic_reshape", x, V("i64", [2]), shape=[3, 4])
        assert get_op("dynamic_reshape").canonicalize(op, Rewriter()) is None


# -- dynamic_broadcast_in_dim ------------------------------------------------------------

class TestDynamicBroadcastInDim:
    def test_types(self):
        assert infer("dynamic_broadcast_in_dim", T("f32", ["S"]), T("i64", [3]),
                     shape=["B", "S", 768], broadcast_dimensions=[1]) == T("f32",
                                                                           ["B", "S", 768])
        assert infer("dynamic_broadcast_in_dim", T("bf16", [1, 4]), T("i32", [2]),
                     shape=["M", 4], broadcast_dimensions=[0, 1]) == T("bf16", ["M", 4])

    def test_facts(self):
        op = build("dynamic_broadcast_in_dim", V("f32", [4, 1]), V("i64", [2]),
                   shape=["M", "N"], broadcast_dimensions=[0, 1])
        assert list(get_op("dynamic_broadcast_in_dim").facts(op)) == [
            Eq(as_expr(4), as_expr("M"))]

    @pytest.mark.parametrize("xshape, shape_t, shape, bdims, pattern", [
        ([3], T("i64", [2]), [2, 4], [1], r"dynamic_broadcast_in_dim: operand #0 'x' dim 0 "
                                          r"\(3\) cannot broadcast"),
        ([3], T("i64", [3]), ["M", 3], [1], r"dynamic_broadcast_in_dim: operand #1 "
                                            r"'shape_tensor' has type i64\[3\]"),
        ([3], T("i16", [2]), ["M", 3], [1], r"operand #1 'shape_tensor' has dtype i16"),
        ([3], T("i64", [2]), ["M", 3], [], r"broadcast_dimensions=\[\] has 0 entries"),
    ])
    def test_verify_errors(self, xshape, shape_t, shape, bdims, pattern):
        with pytest.raises(VerifyError, match=pattern):
            infer("dynamic_broadcast_in_dim", T("f32", xshape), shape_t, shape=shape,
                  broadcast_dimensions=bdims)

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_reference(self, dtype):
        x = rand((1, 3), dtype)
        got = run("dynamic_broadcast_in_dim", x, np.array([2, 4, 3], np.int32),
                  shape=["A", "M", 3], broadcast_dimensions=[1, 2], env={"A": 2})
        assert_same(got, np.broadcast_to(x[None], (2, 4, 3)))
        got = run("dynamic_broadcast_in_dim", x, np.array([0, 3], np.int64),
                  shape=["M", "N"], broadcast_dimensions=[0, 1])
        assert_same(got, np.broadcast_to(x, (0, 3)))

    def test_reference_errors(self):
        x = rand((2, 3), "f32")
        with pytest.raises(InterpretError, match=r"dynamic_broadcast_in_dim: operand dim 1 is "
                                                 r"3.*expected 1 or 4"):
            run("dynamic_broadcast_in_dim", x, np.array([2, 4]), shape=["M", "N"],
                broadcast_dimensions=[0, 1])
        with pytest.raises(InterpretError, match=r"says dim 0 is 2, but attribute shape\[0\] "
                                                 r"= M = 7"):
            run("dynamic_broadcast_in_dim", x, np.array([2, 3]), shape=["M", 3],
                broadcast_dimensions=[0, 1], env={"M": 7})

    def test_canonicalize(self):
        x = V("f32", [3])
        cst = build("constant", value=np.array([2, 3], np.int32))
        op = build("dynamic_broadcast_in_dim", x, cst.result, shape=[2, 3],
                   broadcast_dimensions=[1])
        rw = Rewriter()
        new = get_op("dynamic_broadcast_in_dim").canonicalize(op, rw)
        assert [o.name for o in rw.created] == ["broadcast_in_dim"]
        assert rw.created[0].attrs["broadcast_dimensions"] == (1,)
        assert new.type == op.result.type
        op = build("dynamic_broadcast_in_dim", x, V("i32", [2]), shape=[2, 3],
                   broadcast_dimensions=[1])
        assert get_op("dynamic_broadcast_in_dim").canonicalize(op, Rewriter()) is None


# -- get_dimension_size ------------------------------------------------------------------

class TestGetDimensionSize:
    @pytest.mark.parametrize("dtype", DTYPES)
    def test_type_and_reference(self, dtype):
        assert infer("get_dimension_size", T(dtype, ["B", "S", 768]),
                     dimension=1) == T("i64", [])
        x = rand((2, 0, 5), dtype)
        for d, want in enumerate(x.shape):
            got = run("get_dimension_size", x, dimension=d)
            assert_same(got, np.array(want, dtype=np.int64))

    def test_verify_errors(self):
        with pytest.raises(VerifyError, match=r"get_dimension_size: attribute dimension=3 is "
                                              r"out of range for rank 3"):
            infer("get_dimension_size", T("f32", [1, 2, 3]), dimension=3)
        with pytest.raises(VerifyError, match=r"get_dimension_size: .*out of range for rank 0"):
            infer("get_dimension_size", T("f32", []), dimension=0)

    def test_canonicalize(self):
        x = V("f32", ["B", 7])
        op = build("get_dimension_size", x, dimension=1)
        rw = Rewriter()
        new = get_op("get_dimension_size").canonicalize(op, rw)
        assert [o.name for o in rw.created] == ["constant"] and new.type == T("i64", [])
        assert_same(rw.created[0].attrs["value"].array, np.array(7, np.int64))
        op = build("get_dimension_size", x, dimension=0)
        assert get_op("get_dimension_size").canonicalize(op, Rewriter()) is None

    def test_traits(self):
        assert get_op("get_dimension_size").has_trait("shape")


# -- transpose ---------------------------------------------------------------------------

class TestTranspose:
    def test_types(self):
        assert infer("transpose", T("f32", [2, 3, 4]), permutation=[2, 0, 1]) == T("f32",
                                                                                   [4, 2, 3])
        assert infer("transpose", T("bf16", ["B", "S", 768]),
                     permutation=[1, 0, 2]) == T("bf16", ["S", "B", 768])
        assert infer("transpose", T("bool", []), permutation=[]) == T("bool", [])
        out = infer("transpose", T("f32", ["B*S", "S//2"]), permutation=[1, 0])
        assert out.shape == (floordiv("S", 2), as_expr("B") * as_expr("S"))

    @pytest.mark.parametrize("perm, pattern", [
        ([0, 0, 1], r"transpose: attribute permutation=\[0, 0, 1\] is not a permutation of "
                    r"\[0, 1, 2\]"),
        ([0, 1], r"transpose: attribute permutation=\[0, 1\] is not a permutation"),
        ([0, 1, 3], r"is not a permutation of \[0, 1, 2\]"),
    ])
    def test_verify_errors(self, perm, pattern):
        with pytest.raises(VerifyError, match=pattern):
            infer("transpose", T("f32", ["B", 3, 4]), permutation=perm)

    def test_bad_attribute_kind(self):
        with pytest.raises(VerifyError, match=r"transpose: attribute permutation"):
            get_op("transpose").normalize_attrs({"permutation": [0.5]})

    @SETTINGS
    @given(shape=shape_st(max_rank=5), dtype=st.sampled_from(DTYPES), data=st.data())
    def test_reference_matches_numpy(self, shape, dtype, data):
        perm = data.draw(st.permutations(range(len(shape))))
        x = rand(shape, dtype)
        got = run("transpose", x, permutation=list(perm))
        assert_same(got, np.transpose(x, perm))
        assert got.flags.c_contiguous
        assert infer("transpose", T(dtype, shape), permutation=list(perm)) == T(dtype, got.shape)

    def test_reference_error(self):
        with pytest.raises(InterpretError, match=r"transpose: permutation \[1, 0\] does not fit"):
            run("transpose", rand((2, 3, 4), "f32"), permutation=[1, 0])

    def test_canonicalize(self):
        x = V("f32", ["B", "S", 4])
        tr = get_op("transpose")
        ident = build("transpose", x, permutation=[0, 1, 2])
        assert tr.canonicalize(ident, Rewriter()) is x
        t1 = build("transpose", x, permutation=[1, 2, 0])
        assert tr.canonicalize(t1, Rewriter()) is None
        inverse = build("transpose", t1.result, permutation=[2, 0, 1])
        rw = Rewriter()
        assert tr.canonicalize(inverse, rw) is x and rw.created == []
        t2 = build("transpose", t1.result, permutation=[1, 0, 2])
        rw = Rewriter()
        new = tr.canonicalize(t2, rw)
        assert len(rw.created) == 1 and rw.created[0].operands == [x]
        assert new.type == t2.result.type
        # the composed permutation computes the same array
        xv = rand((2, 3, 4), "f32")
        twice = np.transpose(np.transpose(xv, (1, 2, 0)), (1, 0, 2))
        assert_same(run("transpose", xv, permutation=rw.created[0].attrs["permutation"]), twice)


# -- text form -------------------------------------------------------------------------

def test_print_parse_round_trip_and_interpret():
    b = GraphBuilder("shape_ops")
    x = b.input("x", "f32", ["B", "S", 4])
    shp = b.input("shp", "i32", [2])
    r = b.reshape(x, shape=["B*S", 4])
    t = b.transpose(r, permutation=[1, 0])
    bc = b.broadcast_in_dim(t, shape=[2, 4, "B*S"], broadcast_dimensions=[1, 2])
    dr = b.dynamic_reshape(x, shp, shape=["N", "M"])
    db = b.dynamic_broadcast_in_dim(dr, shp, shape=["N", "M"], broadcast_dimensions=[0, 1])
    gd = b.get_dimension_size(x, dimension=1)
    g = b.build(bc, db, gd)
    text = print_graph(g)
    g2 = parse_graph(text)
    assert print_graph(g2) == text
    xv = rand((2, 3, 4), "f32")
    sv = np.array([6, 4], np.int32)
    want = [np.broadcast_to(xv.reshape(6, 4).T, (2, 4, 6)), xv.reshape(6, 4),
            np.array(3, np.int64)]
    for graph in (g, g2):
        for got, w in zip(interpret(graph, [xv, sv]), want, strict=True):
            assert_same(got, w)
