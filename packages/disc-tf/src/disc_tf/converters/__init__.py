"""The converter table: importing this package fills it (one module per op family)."""

from . import depthwise, einsum, math, nn, reductions, shapes  # noqa: F401
from .registry import CONVERTERS, Converter, Known, converter, lookup

__all__ = ["CONVERTERS", "Converter", "Known", "converter", "lookup"]
