"""The converter table type, the lowering wrapper and the reason codes of the bridge kit."""

from __future__ import annotations

import pytest

from disc_core.bridge import (
    ConversionError,
    Converter,
    ConverterTable,
    Expected,
    ReasonCode,
    as_results,
    check_count,
    check_result,
    reason_of,
    register_reason,
    report_code,
    run_converter,
)
from disc_core.builder import GraphBuilder
from disc_core.dtypes import DType
from disc_core.symbolic import Expr


def _table() -> ConverterTable:
    families = {"add": ["add.Tensor", "add.Scalar"]}
    return ConverterTable("toy", {"f32", "i64"}, expand=lambda t: families.get(t, [t]))


def test_a_table_registers_every_expanded_key_with_defaults_and_checks():
    table = _table()

    @table.converter("add", check=lambda node: "alpha" if node == "alpha" else None)
    def add(ctx, node):
        return ctx

    @table.converter("neg", dtypes={"f32"})
    def neg(ctx, node):
        return ctx

    assert sorted(table) == ["add.Scalar", "add.Tensor", "neg"] and len(table) == 3
    assert table["add.Tensor"] is table.lookup("add.Scalar")
    assert table["add.Tensor"].dtypes == frozenset({"f32", "i64"})
    assert table.lookup("sub") is None and "neg" in table
    assert table["add.Tensor"].unsupported_attribute("alpha") == "alpha"
    assert table["neg"].unsupported_attribute("x") is None
    assert not table["neg"].takes("i64")
    assert table["neg"].dtype_reason("toy.neg", "i64") == \
        "toy.neg on i64 (the converter takes f32)"
    with pytest.raises(ValueError, match="two converters for neg"):
        table.converter("neg")(neg)


def test_run_converter_calls_the_function_or_says_there_is_none():
    table = _table()
    table.converter("id")(lambda ctx, node: (ctx, node))
    assert run_converter(table, "id", 1, 2) == (1, 2)
    with pytest.raises(ConversionError, match="no converter for toy.sub") as info:
        run_converter(table, "sub", None, None, what="toy.sub")
    assert reason_of(info.value) is ReasonCode.NO_CONVERTER
    assert isinstance(Converter(len, frozenset()), Converter)


def test_results_are_counted_and_checked_against_the_framework():
    b = GraphBuilder("r")
    x = b.input("x", "f32", ["n", 4])
    assert as_results(x) == [x] and as_results((x, None)) == [x, None]
    check_count("op", [x], 1)
    with pytest.raises(ConversionError, match="op: converter returned 2 values for 1 results"):
        check_count("op", [x, x], 1)
    n = Expr.sym("n")
    check_result("op", x, Expected(DType.F32, (n, Expr.const(4))), "torch")
    with pytest.raises(ConversionError, match=r"op: converter produced f32 \['n', '4'\], "
                       r"torch says f32 \['m', '4'\]"):
        check_result("op", x, Expected(DType.F32, (Expr.sym("m"), Expr.const(4))), "torch")
    with pytest.raises(ConversionError, match="TF says i64"):
        check_result("op", x, Expected(DType.I64), "TF")
    # static-only knowledge (TF): unknown dims and a symbol against a static size pass
    check_result("op", x, Expected(DType.F32, (None, Expr.const(4)), exact=False), "TF")
    check_result("op", x, Expected(DType.F32, (Expr.const(7), Expr.const(4)), exact=False),
                 "TF")
    with pytest.raises(ConversionError, match=r"TF says f32 \['\?', '5'\]"):
        check_result("op", x, Expected(DType.F32, (None, Expr.const(5)), exact=False), "TF")
    with pytest.raises(ConversionError, match="converter produced"):
        check_result("op", x, Expected(DType.F32, (None,), exact=False), "TF")  # rank


def test_reason_codes_are_one_vocabulary_with_bridge_specific_aliases():
    assert reason_of(ConversionError("x")) is ReasonCode.UNSUPPORTED_ATTRIBUTE
    assert reason_of(ValueError("x")) is ReasonCode.UNSUPPORTED_ATTRIBUTE
    assert reason_of(ConversionError("x", code="data_dependent_shape")) is \
        ReasonCode.DATA_DEPENDENT_SHAPE
    register_reason("toy_ragged_tensor", ReasonCode.NO_CONVERTER)
    register_reason("toy_ragged_tensor", ReasonCode.NO_CONVERTER)  # idempotent
    assert reason_of(ConversionError("x", code="toy_ragged_tensor")) is ReasonCode.NO_CONVERTER
    with pytest.raises(ValueError, match="registered as no_converter"):
        register_reason("toy_ragged_tensor", ReasonCode.DYNAMIC_RANK)
    with pytest.raises(ValueError, match="shared reason code already"):
        register_reason("dynamic_rank", ReasonCode.DYNAMIC_RANK)
    with pytest.raises(ValueError, match="unknown reason code 'nope'"):
        report_code("nope")
    assert report_code(None, ReasonCode.RUNTIME_ERROR) is ReasonCode.RUNTIME_ERROR
