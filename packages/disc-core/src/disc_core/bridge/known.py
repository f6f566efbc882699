"""Known values: what a bridge folds shape computations into.

Graphs compute shapes at run time (TF's ``Shape -> StridedSlice -> Pack``, Paddle's
``shape64 -> slice -> stack``); a bridge folds them at compile time into *known values*,
numpy arrays whose elements are ints or symbolic sizes (:class:`~disc_core.symbolic.Expr`)
in an object array. These helpers build and read such arrays the same way in every
bridge.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..symbolic import Expr

__all__ = ["as_object_array", "known_array", "normalize", "symbols_of"]


def normalize(e: Any) -> Any:
    """An int for a constant size (a constant Expr or a numpy integer), ``e`` otherwise."""
    if isinstance(e, Expr) and e.is_const:
        return e.value
    return int(e) if isinstance(e, (int, np.integer)) else e


def as_object_array(k: np.ndarray) -> np.ndarray:
    """A known value as an object array of ints and Exprs (sizes normalized), for folding
    arithmetic elementwise; other elements (floats, bools) are kept as they are."""
    out = np.empty(k.shape, dtype=object)
    for idx, e in np.ndenumerate(k):
        out[idx] = normalize(e) if isinstance(e, (Expr, int, np.integer)) else e
    return out


def known_array(values: Sequence[Any], shape: Sequence[int] | None = None) -> np.ndarray:
    """An object array of sizes (Exprs, constants folded to int), 1-D or of ``shape``."""
    out = np.empty(len(values), dtype=object)
    for i, e in enumerate(values):
        out[i] = normalize(e)
    return out.reshape(tuple(shape)) if shape is not None else out


def symbols_of(dims: Iterable[Expr]) -> set[str]:
    """The symbols the sizes ``dims`` are written in."""
    out: set[str] = set()
    for d in dims:
        out |= d.free_symbols()
    return out
