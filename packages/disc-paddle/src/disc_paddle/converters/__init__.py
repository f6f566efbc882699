"""Converters from Paddle PIR ops (``pd_op.*``) to DISC core primitives, one table
(:mod:`.registry`) filled by the modules below on import (each imports the table)."""

from . import conv, linalg, math, nn, shapes  # noqa: F401
from .registry import CONVERTERS, Known, Vector, converter, lookup

__all__ = ["CONVERTERS", "Known", "Vector", "converter", "lookup"]
