"""The one table from Paddle PIR op name (``pd_op.matmul``) to the function emitting DISC
core primitives.

A converter (a bridge kit :class:`~disc_core.bridge.table.ConverterTable` entry) is
``fn(ctx, op) -> Value | Known | Vector | None | list[...]``, one entry per op result
(None: a result the converter does not compute, which nothing may read), registered for
one or more op names with the dtypes it takes (of the op's first input, else its first
result, as Paddle dtype codes: ``int(paddle.float32)``). A :class:`Known` result is a value
fixed at compile time (a shape, a folded constant); it becomes a core value only if
something reads it as data. A converter that cannot handle an op raises
``ConversionError`` with the reason; the op then stays in Paddle and the reason appears
in the coverage report.
"""

from __future__ import annotations

import paddle

from disc_core.bridge.table import Converter, ConverterTable

from ..lowering import Known, Vector

__all__ = ["ALL_DTYPES", "CONVERTERS", "FLOAT_DTYPES", "INPLACE", "INT_DTYPES", "NUMERIC_DTYPES",
           "Converter", "Known", "Vector", "converter", "lookup"]

#: dtypes as Paddle DataType codes (what ``int(value.dtype)`` gives)
FLOAT_DTYPES = frozenset(int(d) for d in (paddle.float32, paddle.float64))
INT_DTYPES = frozenset(int(d) for d in (paddle.int8, paddle.int16, paddle.int32,
                                        paddle.int64, paddle.uint8))
NUMERIC_DTYPES = FLOAT_DTYPES | INT_DTYPES
ALL_DTYPES = NUMERIC_DTYPES | {int(paddle.bool)}

CONVERTERS = ConverterTable("paddle", ALL_DTYPES)
#: in-place ops a converter takes: op name -> {result index: the operand index it updates in
#: place}. Those results are always cluster outputs, and the launch writes each back into
#: its operand (``assign_out_``), so the update Paddle's kernel made in place still happens
INPLACE: dict[str, dict[int, int]] = {}
#: ``@converter("pd_op.name", ..., dtypes=...)``: register ``fn`` for PIR op names
converter = CONVERTERS.converter
lookup = CONVERTERS.lookup
