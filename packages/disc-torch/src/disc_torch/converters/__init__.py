"""The ATen -> DISC converter table (importing this package fills it)."""

from . import attention, elementwise, indexing, linalg, pooling, reductions, shapes  # noqa: F401
from .registry import CONVERTERS, Converter, converter, lookup

__all__ = ["CONVERTERS", "Converter", "converter", "lookup"]
