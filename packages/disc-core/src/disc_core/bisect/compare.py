"""Do two runs of the user's program give the same answer? Named arrays (the ``.npz`` file
the program writes each run) compared within tolerances, NaN-aware.

Bisection trusts one yes/no per run, so the comparison is strict about everything but the
floating-point error the tolerances allow: a missing or extra array, a changed shape or
dtype kind is a difference too, and NaN equals NaN only where both runs have one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["Comparison", "compare_arrays", "compare_outputs", "load_outputs"]


@dataclass
class Comparison:
    """The verdict of comparing two sets of named arrays: ``same``, and each difference
    in words (the first ones a user reads)."""

    same: bool
    differences: list[str] = field(default_factory=list)
    #: largest absolute difference over the arrays that could be compared numerically
    max_abs: float = 0.0

    def describe(self, limit: int = 3) -> str:
        if self.same:
            return "same"
        shown = self.differences[:limit]
        more = len(self.differences) - len(shown)
        return "; ".join(shown) + (f"; +{more} more" if more > 0 else "")


def load_outputs(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` (or a single ``.npy``, named ``"array"``) file."""
    path = Path(path)
    if path.suffix == ".npy":
        return {"array": np.load(path, allow_pickle=False)}
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def compare_arrays(name: str, want: np.ndarray, got: np.ndarray, rtol: float, atol: float,
                   baseline: str = "reference") -> tuple[str | None, float]:
    """(why ``got`` differs from ``want`` or None, the largest absolute difference);
    ``baseline`` names ``want`` in the message."""
    want, got = np.asarray(want), np.asarray(got)
    if want.shape != got.shape:
        return f"{name}: shape {got.shape}, {baseline} {want.shape}", 0.0
    numeric = (want.dtype.kind in "biufc") and (got.dtype.kind in "biufc")
    if not numeric:
        same = want.dtype == got.dtype and bool(np.array_equal(want, got))
        return (None if same else f"{name}: {got.dtype} values differ"), 0.0
    if want.dtype.kind == "b" or got.dtype.kind == "b":
        want, got = want.astype(np.int8), got.astype(np.int8)
    if want.dtype.kind == "c" or got.dtype.kind == "c":
        a, b = want.astype(np.complex128), got.astype(np.complex128)
    else:
        a, b = want.astype(np.float64), got.astype(np.float64)
    close = np.isclose(b, a, rtol=rtol, atol=atol, equal_nan=True)
    diff = np.abs(b - a)[np.isfinite(a) & np.isfinite(b)]
    max_abs = float(diff.max()) if diff.size else 0.0
    if bool(close.all()):
        return None, max_abs
    bad = int(close.size - np.count_nonzero(close))
    where = np.unravel_index(int(np.argmin(close.reshape(-1))), close.shape) if close.ndim \
        else ()
    at = tuple(int(i) for i in where)
    odd = int(np.count_nonzero(~close & ~(np.isfinite(a) & np.isfinite(b))))
    worst = f"max |diff| {max_abs:.3g}" + (f", {odd} at NaN/inf" if odd else "")
    return (f"{name}: {bad} of {close.size} values differ ({worst}; at "
            f"{at}: {b[where]:.6g} vs {baseline} {a[where]:.6g})"), max_abs


def compare_outputs(reference: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray], *,
                    rtol: float, atol: float) -> Comparison:
    """Compare every array of ``got`` with the one of the same name in ``reference``:
    ``|got - ref| <= atol + rtol * |ref|`` elementwise, NaN matching NaN."""
    out = Comparison(True)
    for name in sorted(set(reference) - set(got)):
        out.differences.append(f"{name}: missing")
    for name in sorted(set(got) - set(reference)):
        out.differences.append(f"{name}: not in the reference")
    for name in sorted(set(reference) & set(got)):
        why, max_abs = compare_arrays(name, reference[name], got[name], rtol, atol)
        out.max_abs = max(out.max_abs, max_abs)
        if why is not None:
            out.differences.append(why)
    out.same = not out.differences
    return out
