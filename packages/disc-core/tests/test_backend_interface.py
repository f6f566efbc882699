"""The native backend interface: the index-map vocabulary (disc_core.index_map), the maps
and roles ops state with it (``OpDef.index_map``, ``OpDef.fusion``), and the C sources the
code generator ships (native/csrc)."""

from __future__ import annotations

import numpy as np

from disc_core import Compiler, GraphBuilder, interpret
from disc_core.dtypes import DType
from disc_core.index_map import DATA, Aff, Quot, compose, kdim, sized
from disc_core.native import ccommon, library
from disc_core.opdef import Fusion, get_op
from disc_core.symbolic import as_expr
from disc_runtime import CompileCache


def _op(v):
    return v.producer


def test_kdim_follows_ints_affine_and_quotient_entries() -> None:
    assert kdim(2) == 2
    assert kdim(Aff(1, as_expr(2), as_expr(3))) == 1
    assert kdim(None) is None and kdim(DATA) is None
    # a quotient varies with its inner entry's dim (an upsampled read, a pad's interior):
    # taken as invariant, a value read through it was hoisted out of the inner loop
    assert kdim(Quot(1, 2)) == 1 and kdim(Quot(Aff(0, as_expr(1), as_expr(-1)), 3)) == 0
    assert kdim(Quot(None, 2)) is None


def test_compose_folds_to_the_identity_only_without_an_affine_origin() -> None:
    assert compose(1, 1, 0) == 1
    assert compose(1, 2, 3) == Aff(1, as_expr(2), as_expr(3))
    # scale 2 offset 3, then scale -1 offset 10: -2i + 7
    assert compose(Aff(0, as_expr(2), as_expr(3)), -1, 10) == Aff(0, as_expr(-2), as_expr(7))
    # an affine entry stays affine even when it composes to the identity (sizes differ)
    assert compose(Aff(0, as_expr(1), as_expr(-1)), 1, 1) == Aff(0, as_expr(1), as_expr(0))
    assert compose(None, 1, 0) is None
    assert compose(None, 1, 4) == Aff(None, as_expr(0), as_expr(4))


def test_sized_keeps_a_slice_of_a_longer_dim_affine() -> None:
    assert sized(0, True) == 0
    assert sized(0, False) == Aff(0, as_expr(1), as_expr(0))
    assert sized(None, False) is None


def test_ops_state_their_operand_maps() -> None:
    b = GraphBuilder("maps")
    N, M = b.symbol("N"), b.symbol("M")
    x = b.input("x", "f32", [N, M])
    col = b.input("c", "f32", [M])
    idx = b.input("i", "i64", [3])
    s = b.slice(x, start=[1, 0], limit=[N, M], stride=[1, 2])
    t = b.transpose(x, permutation=[1, 0])
    r = b.reverse(x, dimensions=[1])
    p = b.pad(x, b.constant(0.0, "f32"), low=[1, 0], high=[0, 0], interior=[0, 1])
    g = b.gather(x, idx, axis=0)
    bc = b.broadcast_in_dim(col, shape=[N, M], broadcast_dimensions=[1])
    red = b.reduce(x, kind="sum", axes=[1])
    res = (0, 1)
    sm, _ = _op(s).opdef.index_map(_op(s), 0, res, 2)
    assert sm == (Aff(0, as_expr(1), as_expr(1)), Aff(1, as_expr(2), as_expr(0)))
    assert _op(t).opdef.index_map(_op(t), 0, res, 2) == ((1, 0), {})
    rm, _ = _op(r).opdef.index_map(_op(r), 0, res, 2)
    assert rm[0] == 0 and rm[1] == Aff(1, as_expr(-1), as_expr(M - 1))
    pm, _ = _op(p).opdef.index_map(_op(p), 0, res, 2)
    assert pm == (Aff(0, as_expr(1), as_expr(-1)), Quot(1, 2))
    assert _op(p).opdef.index_map(_op(p), 1, res, 2) == ((), {})
    assert _op(g).opdef.index_map(_op(g), 0, res, 2) == ((DATA, 1), {})
    assert _op(g).opdef.index_map(_op(g), 1, res, 2) == ((0,), {})
    assert _op(bc).opdef.index_map(_op(bc), 0, res, 2) == ((1,), {})
    # the reduced dim takes the kernel dim the result does not use
    assert _op(red).opdef.index_map(_op(red), 0, (0,), 2) == ((0, 1), {})


def test_a_symbolic_operand_dim_under_a_broadcast_may_be_implicit() -> None:
    b = GraphBuilder("maybe")
    N, K = b.symbol("N"), b.symbol("K")
    v = b.input("v", "f32", [K])
    bc = _op(b.broadcast_in_dim(v, shape=[N], broadcast_dimensions=[0]))
    assert bc.opdef.index_map(bc, 0, (0,), 1) == ((0,), {0: 0})


def test_roles_of_representative_ops() -> None:
    assert get_op("add").fusion == Fusion.ELEMENTWISE
    assert get_op("gather").fusion == Fusion.INDEXING and get_op("gather").indirect
    assert get_op("pad").guarded and get_op("concatenate").guarded
    assert get_op("reduce").fusion == Fusion.REDUCTION
    assert get_op("argmax").arg_compare == ">" and get_op("argmin").arg_compare == "<"
    assert get_op("iota").fusion == Fusion.DUPLICABLE
    assert get_op("get_dimension_size").has_trait("shape")
    assert get_op("reshape").fusion == Fusion.ALIAS
    assert get_op("dot_general").fusion == Fusion.LIBRARY
    assert get_op("scatter_add").fusion == Fusion.SCATTER
    assert get_op("cumulative").fusion == Fusion.SCAN
    assert get_op("sort").fusion == Fusion.NONE


def test_the_c_sources_ship_with_the_package() -> None:
    prelude = ccommon.c_source("prelude.h")
    assert "disc_floordiv" in prelude and "DISC_VEC_LANES" in prelude
    f32, f64 = library.gemm_helper(DType.F32), library.gemm_helper(DType.F64)
    assert "#define DISC_GEMM_NAME disc_gemm_float" in f32
    assert "#define DISC_GEMM_ROWMAJOR 1" in f32 and "#define DISC_GEMM_ROWMAJOR 0" in f64
    # the parameters are undefined after each instance: two dtypes fit in one module
    assert f32.rstrip().endswith("#undef DISC_GEMM_PACKED")
    assert "#define DISC_GEMM_PACKED 1" in f32 and "#define DISC_GEMM_PACKED 0" in f64


def test_gemm_helpers_of_two_dtypes_share_a_module(tmp_path) -> None:
    """f32 and f64 GEMMs in one module: gemm.c instantiated twice."""
    b = GraphBuilder("two_gemms")
    N = b.symbol("N")
    x = b.input("x", "f32", [N, 8])
    y = b.input("y", "f64", [8, N])
    dims = dict(lhs_batch=[], rhs_batch=[], lhs_contract=[1], rhs_contract=[0])
    g = b.build(b.dot_general(x, b.cast(y, "f32"), **dims),
                b.dot_general(b.cast(x, "f64"), y, **dims))
    exe = Compiler(CompileCache(tmp_path), target="native").compile(g)
    assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
    rng = np.random.default_rng(3)
    for n in (1, 5, 33):
        xs, ys = rng.standard_normal((n, 8)).astype(np.float32), rng.standard_normal((8, n))
        for got, want in zip(exe.run([xs, ys]), interpret(g, [xs, ys])):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_gemm_weights_read_from_module_inputs_are_listed_for_packing(tmp_path) -> None:
    """``pack_inputs``: the f32 module inputs a GEMM reads as a weight every row shares,
    laid out [N, K] (torch's Linear); not one laid out [K, N] (transformers' Conv1D,
    measured no faster packed), a per-batch operand, an operand computed in the module,
    or an f64 one (MKL packs f32 only)."""
    b = GraphBuilder("weights")
    M, B = b.symbol("M"), b.symbol("B")
    x = b.input("x", "f32", [M, 8])
    w_nk = b.input("w_nk", "f32", [16, 8])
    w_kn = b.input("w_kn", "f32", [16, 4])
    per_batch = b.input("per_batch", "f32", [B, 8, 3])
    xb = b.input("xb", "f32", [B, M, 8])
    d64 = b.input("d64", "f64", [8, 2])
    plain = dict(lhs_batch=[], rhs_batch=[])
    h = b.dot_general(x, w_nk, lhs_contract=[1], rhs_contract=[1], **plain)  # [M, 16]
    g = b.build(b.dot_general(h, w_kn, lhs_contract=[1], rhs_contract=[0], **plain),
                b.dot_general(xb, per_batch, lhs_batch=[0], rhs_batch=[0],
                              lhs_contract=[2], rhs_contract=[1]),
                b.dot_general(b.cast(x, "f64"), d64, lhs_contract=[1], rhs_contract=[0],
                              **plain),
                b.dot_general(x, b.mul(w_nk, w_nk), lhs_contract=[1], rhs_contract=[1],
                              **plain))
    exe = Compiler(CompileCache(tmp_path), target="native").compile(g)
    assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
    assert exe.artifact.metadata["native"]["pack_inputs"] == [1]
    rng = np.random.default_rng(5)
    for m, nb in ((1, 2), (20, 3)):
        args = [rng.standard_normal(s).astype(np.float32)
                for s in ((m, 8), (16, 8), (16, 4), (nb, 8, 3), (nb, m, 8))]
        args.append(rng.standard_normal((8, 2)))
        for got, want in zip(exe.run(args), interpret(g, args)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
