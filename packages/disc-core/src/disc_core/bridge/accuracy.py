"""The accuracy guard every bridge offers: when to compare a compiled cluster with the
framework's own ops, and how close is close enough.

A cluster that computes wrong values is worse than one that fails: nothing stops the user's
program. With the guard on, a bridge runs the cluster's framework ops alongside its compiled
code on the first calls (and every Kth call after, since a dynamic-shape cluster meets new
shapes all along), compares the outputs with tolerances that suit their dtype, and on a
mismatch hands the cluster back to the framework for good, warns once and records
``accuracy_mismatch`` in the report.

This module is framework-free: :class:`AccuracyPolicy` parses the option and says which
calls to check, :func:`tolerance` gives each dtype's bounds, and :func:`compare_outputs`
compares numpy arrays. Bridges whose clusters run inside a C++ launch op pass the policy
and the per-output bounds to it as attributes; ``disc_launch_support.h`` compares the same
way (``disc_launch::Compare``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ACCURACY_PREFIX", "AccuracyPolicy", "TOLERANCES", "compare_outputs",
           "failure_reason", "parse_accuracy_check", "tolerance"]

#: How a launch op's failure record says it was an accuracy mismatch (not a run-time
#: error): the bridges' Python side turns such records into ``accuracy_mismatch``.
ACCURACY_PREFIX = "accuracy check: "

#: (rtol, atol) per dtype name. ``atol`` is scaled by the output's largest finite
#: magnitude (at least 1): a sum over many terms may differ from the framework's in the
#: last bits of its largest values, and a fixed atol would call that wrong. Integer and
#: bool outputs must match exactly.
TOLERANCES: dict[str, tuple[float, float]] = {
    "f64": (1e-7, 1e-9),
    "f32": (1e-4, 1e-5),
    "f16": (1e-2, 1e-3),
    "bf16": (1.6e-2, 1e-2),
}

_ON = ("1", "true", "yes", "on")
_OFF = ("", "0", "false", "no", "off")


@dataclass(frozen=True)
class AccuracyPolicy:
    """Check the first ``first`` calls of every cluster, then every ``every``-th (0:
    never again). ``rtol``/``atol`` replace the dtype tolerances when set."""

    first: int = 3
    every: int = 1000
    rtol: float | None = None
    atol: float | None = None

    def __post_init__(self) -> None:
        for name in ("first", "every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"accuracy_check: {name} must be an int >= 0, got {value!r}")

    def due(self, call: int) -> bool:
        """Whether call number ``call`` (0-based) of a cluster is compared."""
        return call < self.first or (self.every > 0 and (call - self.first) % self.every
                                     == self.every - 1)

    def bounds(self, dtype: str) -> tuple[float, float]:
        """(rtol, atol) for an output of ``dtype`` (a core dtype name, ``"f32"``)."""
        rtol, atol = tolerance(dtype)
        return (rtol if self.rtol is None else self.rtol,
                atol if self.atol is None else self.atol)


def parse_accuracy_check(value: Any) -> AccuracyPolicy | None:
    """The policy an ``accuracy_check`` option (or ``DISC_ACCURACY_CHECK``) asks for.

    ``False``/``off``/``0``: no guard. ``True``/``on``/``1``: the first 3 calls of every
    cluster, then every 1000th. ``"first=N,every=K"`` (either part may be left out) sets
    the two; an :class:`AccuracyPolicy` is taken as it is."""
    if value is None or isinstance(value, AccuracyPolicy):
        return value
    if isinstance(value, bool):
        return AccuracyPolicy() if value else None
    text = str(value).strip().lower()
    if text in _OFF:
        return None
    if text in _ON:
        return AccuracyPolicy()
    fields: dict[str, int] = {}
    for part in text.split(","):
        name, sep, number = part.partition("=")
        name = name.strip()
        if not sep or name not in ("first", "every") or not number.strip().isdigit():
            raise ValueError(
                f"accuracy_check: expected on, off or 'first=N,every=K', got {value!r}")
        fields[name] = int(number)
    return AccuracyPolicy(**fields)


def failure_reason(message: str) -> tuple[Any, str]:
    """(reason code, detail) of a launch op's failure record: ``accuracy_mismatch`` when
    the guard wrote it (:data:`ACCURACY_PREFIX`), else ``runtime_error``."""
    from ..report.model import ReasonCode

    if message.startswith(ACCURACY_PREFIX):
        return (ReasonCode.ACCURACY_MISMATCH,
                "accuracy check failed: " + message[len(ACCURACY_PREFIX):])
    return ReasonCode.RUNTIME_ERROR, message


def tolerance(dtype: str) -> tuple[float, float]:
    """(rtol, atol) of a core dtype name; (0, 0), exact, for integers and bools."""
    return TOLERANCES.get(dtype, (0.0, 0.0))


def _dtype_name(a: np.ndarray) -> str:
    kind, size = a.dtype.kind, a.dtype.itemsize
    if a.dtype.name == "bfloat16":
        return "bf16"
    if kind == "f":
        return {2: "f16", 4: "f32", 8: "f64"}.get(size, "f64")
    return a.dtype.name


def compare_outputs(got: Sequence[Any], want: Sequence[Any],
                    policy: AccuracyPolicy | None = None) -> str | None:
    """None when every compiled output matches the framework's; else one line saying
    which output differs and by how much (what the warning and the report show).

    An element matches when ``|got - want| <= atol * scale + rtol * |want|`` (``scale``:
    the largest finite ``|want|`` of that output, at least 1), NaN matches NaN only, and
    an infinity only itself."""
    policy = policy or AccuracyPolicy()
    if len(got) != len(want):
        return f"{len(got)} outputs, the framework gives {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return (f"output #{i} is {g.dtype} {list(g.shape)}, the framework gives "
                    f"{w.dtype} {list(w.shape)}")
        rtol, atol = policy.bounds(_dtype_name(w))
        if w.dtype.kind not in "fc":
            if not np.array_equal(g, w):
                bad = int(np.count_nonzero(g != w))
                return f"output #{i} ({w.dtype}) differs in {bad} of {w.size} elements"
            continue
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        finite = np.isfinite(w64)
        scale = max(1.0, float(np.abs(w64[finite]).max())) if finite.any() else 1.0
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.abs(g64 - w64)
            ok = finite & np.isfinite(g64) & (err <= atol * scale + rtol * np.abs(w64))
        ok |= (np.isnan(g64) & np.isnan(w64)) | ((g64 == w64) & ~finite)
        if not ok.all():
            bad = int(np.count_nonzero(~ok))
            worst = float(np.nanmax(np.where(ok, 0.0, np.where(np.isnan(err), np.inf, err))))
            return (f"output #{i} ({_dtype_name(w)} {list(w.shape)}) differs from the "
                    f"framework in {bad} of {w.size} elements, by up to {worst:.3g} "
                    f"(rtol {rtol:g}, atol {atol:g} x {scale:.3g})")
    return None
