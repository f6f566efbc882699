"""The index-map vocabulary: how a value's dims follow a loop nest's dims.

A fused kernel iterates over a *space*; every value it touches has a *dim map*, one entry
per dim of the value saying which index it is read at:

* an ``int`` ``d``: the kernel's index ``d`` itself (the dims are provably equal);
* ``None``: index 0 (a broadcast dim, or a static size-1 dim);
* :class:`Aff`: ``scale * idx[dim] + offset`` (slices, reversals, pads, concatenations);
* :class:`Quot`: ``inner / step``, exact under an interior pad's guard;
* :data:`DATA`: a value read at run time (a gather's indices).

Ops state how their operands index the space in terms of their result's map
(``OpDef.index_map``); fusion composes those maps through a kernel and codegen turns the
entries into C index arithmetic. This module is framework- and backend-free so that op
definitions (``disc_core.ops``) can speak it without importing the native engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from .symbolic import as_expr


@dataclass(frozen=True)
class Aff:
    """An affine dim-map entry: the value's index is ``scale * idx[dim] + offset``.

    Slices, reversals, pads and concatenations are folded into indexing this way instead
    of being materialized; ``dim`` None means a fixed index (``offset``)."""

    dim: int | None
    scale: object  # Expr
    offset: object  # Expr


class _DataIndex:
    """Entry of an indirectly indexed dim: the index is a value read at run time (gather)."""

    def __repr__(self) -> str:
        return "DATA"


DATA = _DataIndex()


@dataclass(frozen=True)
class Quot:
    """Entry of an interior-padded operand: its index is ``inner / step``. Only read under
    the pad's guard, which admits just the points where ``inner`` is a multiple of ``step``
    in range, so the division is exact."""

    inner: object  # Entry
    step: int


Entry = int | Aff | Quot | _DataIndex | None
DimMap = tuple[Entry, ...]
#: what ``OpDef.index_map`` returns: the operand's dim map, and the operand dims that may
#: be implicit broadcasts at run time ({operand dim: kernel dim})
OperandMap = tuple[DimMap, dict[int, int]]


def kdim(e: Entry) -> int | None:
    """The kernel dim an entry follows (None for broadcast, fixed or indirect indices);
    a quotient follows its inner entry's."""
    if isinstance(e, Quot):
        return kdim(e.inner)  # type: ignore[arg-type]
    if isinstance(e, Aff):
        return e.dim
    return e if isinstance(e, int) else None


def sized(e: Entry, same_size: bool) -> Entry:
    """Keep an identity entry affine when the sizes differ (a slice of a larger dim), so the
    size checks for directly mapped dims do not apply to it."""
    if isinstance(e, int) and not same_size:
        return Aff(e, as_expr(1), as_expr(0))
    return e


def compose(e: Entry, scale: object, offset: object) -> Entry:
    """The entry of ``scale * index + offset`` where ``index`` follows ``e``."""
    s, o = as_expr(scale), as_expr(offset)  # type: ignore[arg-type]
    if isinstance(e, Aff):
        d, s, o = e.dim, s * e.scale, s * e.offset + o  # type: ignore[operator]
        if d is not None:
            # stays affine even when it composes to the identity: it is affine because the
            # sizes differ somewhere upstream (a slice of a longer dim), and a plain kernel
            # dim would claim this value's dim is the kernel's
            return Aff(d, s, o)
    else:
        d = e
    if d is None:
        return None if o == 0 else Aff(None, as_expr(0), o)
    return d if (s == 1 and o == 0) else Aff(d, s, o)
