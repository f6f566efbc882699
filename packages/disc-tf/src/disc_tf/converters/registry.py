"""The one table from TensorFlow op type to the function emitting DISC core primitives.

A converter (a bridge kit :class:`~disc_core.bridge.table.ConverterTable` entry) is
``fn(ctx, op) -> Value | Known | list[Value | Known | None]``, one entry per
op output, registered for one or more op types with the dtypes it takes (of the op's ``T``
attribute, else of its first input). A :class:`Known` result is a value fixed at compile
time (a shape, a folded constant); it becomes a core value only if something reads it as
data. A converter that cannot handle an op raises ``ConversionError`` with the reason; the
op then stays in TensorFlow and the reason appears in the coverage report.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from disc_core.bridge.table import Converter, ConverterTable

__all__ = ["ALL_DTYPES", "CONVERTERS", "FLOAT_DTYPES", "INT_DTYPES", "NUMERIC_DTYPES",
           "Converter", "Known", "converter", "lookup"]

FLOAT_DTYPES = frozenset({tf.float32, tf.float64})
INT_DTYPES = frozenset({tf.int8, tf.int16, tf.int32, tf.int64, tf.uint8})
NUMERIC_DTYPES = FLOAT_DTYPES | INT_DTYPES
ALL_DTYPES = NUMERIC_DTYPES | {tf.bool}


@dataclass(frozen=True)
class Known:
    """An output whose value is known at compile time (numbers, or ``Expr`` sizes)."""

    value: np.ndarray


CONVERTERS = ConverterTable("tensorflow", ALL_DTYPES)
#: ``@converter("OpType", ..., dtypes=...)``: register ``fn`` for TF op types
converter = CONVERTERS.converter
lookup = CONVERTERS.lookup
