"""A node's verdict from the bridge kit: the table's checks, then a trial conversion."""

from __future__ import annotations

from disc_core.bridge import ConversionError, ConverterTable, ReasonCode, precheck, trial


def _table() -> ConverterTable:
    table = ConverterTable("toy", {"f32", "i64"})

    @table.converter("relu", dtypes={"f32"},
                     check=lambda node: "inplace" if node.get("inplace") else None)
    def relu(ctx, node):  # pragma: no cover - never run here
        return None

    return table


def test_precheck_names_the_first_reason() -> None:
    table = _table()
    none = precheck(table, "gelu", "toy.gelu", ["f32"])
    assert not none.supported and none.code == ReasonCode.NO_CONVERTER
    assert none.reason == "no DISC converter for toy.gelu"
    dtype = precheck(table, "relu", "toy.relu", ["f32", "i64"], {"inplace": True})
    assert dtype.code == ReasonCode.UNSUPPORTED_DTYPE and "toy.relu on i64" in dtype.reason
    attr = precheck(table, "relu", "toy.relu", ["f32"], {"inplace": True})
    assert attr.code == ReasonCode.UNSUPPORTED_ATTRIBUTE and attr.reason == "toy.relu: inplace"
    assert precheck(table, "relu", "toy.relu", ["f32"], {"inplace": False}) is None
    assert precheck(table, "relu", "toy.relu", ["f32"]) is None  # no node: no attribute check


def test_trial_turns_a_failure_into_the_nodes_verdict() -> None:
    assert trial("toy.relu", lambda: None).supported

    def shape():
        raise ConversionError("cannot tell the size", code="data_dependent_shape")

    verdict = trial("toy.relu", shape)
    assert not verdict.supported and verdict.code == ReasonCode.DATA_DEPENDENT_SHAPE
    assert verdict.reason == "toy.relu: cannot tell the size"

    def bug():
        raise IndexError("tuple index out of range")

    assert trial("toy.relu", bug).code == ReasonCode.UNSUPPORTED_ATTRIBUTE
