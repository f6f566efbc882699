"""Shape facts that op semantics imply; the shape-constraint analysis consumes them.

Kept apart from the analysis so op definitions can emit facts without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .symbolic import Expr


@dataclass(frozen=True)
class Eq:
    """Two dims are equal whenever the graph runs without error."""

    a: Expr
    b: Expr


@dataclass(frozen=True)
class ProductEq:
    """The products of two lists of dims are equal (reshape preserves element count)."""

    lhs: tuple[Expr, ...]
    rhs: tuple[Expr, ...]


@dataclass(frozen=True)
class Divisible:
    """``expr`` is a multiple of ``divisor``."""

    expr: Expr
    divisor: int


Fact = Eq | ProductEq | Divisible
