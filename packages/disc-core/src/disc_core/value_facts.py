"""Facts about the values an op computes that the graph proves, for emitters that can
use a cheaper form when they hold.

``at_most_zero(v)``: every element of ``v`` is <= 0 or NaN. The case that matters is
``x - max(x)`` with the maximum taken over some axes and broadcast back, the shift every
softmax, log-softmax and attention score row applies before its exp: an exp whose argument
is at most zero cannot overflow, so the native engine drops its upper clamp (about 10% of
an f32 exp's vector instructions on AMD Zen 1).

``only_plus_one(uses)``: every reader of a value adds the constant 1 to it. An erf read
only so (the normal CDF of an exact GELU and of its gradient) needs absolute accuracy
only: the sum rounds at the scale of 1, so the native engine computes it with a cheaper
approximation (prelude.h, ``disc_erff_abs``).

``splat(v)``: the single value of a constant whose elements are all equal.
"""

from __future__ import annotations

import numpy as np

from .ir import Op, Value
from .symbolic import Expr

__all__ = ["at_most_zero", "broadcast_max_of", "only_plus_one", "splat"]


def at_most_zero(v: Value) -> bool:
    """Is every element of ``v`` at most zero or NaN? (``a - max(a)`` broadcast back.)"""
    op = v.producer
    if op is None or op.name != "sub" or not v.dtype.is_float:
        return False
    a, m = op.operands
    return broadcast_max_of(m, a)


def broadcast_max_of(m: Value, a: Value) -> bool:
    """Is ``m[i]`` the maximum of ``a`` over a set of axes containing every index ``i``
    shares with its position, for every ``i``? True for ``reduce(a, max, axes)`` brought
    back to ``a``'s shape by ``broadcast_in_dim`` and ``reshape``s that only insert or drop
    dims of size 1 (keepdim forms). Then ``a[i] <= m[i]``, or one of them is NaN."""
    origin, red = _max_origin(m, a)
    if origin is None or tuple(m.shape) != tuple(a.shape):
        return False
    for j, o in enumerate(origin):
        if o is None:  # a broadcast dim: must be reduced, or of one element
            if j not in red and not _is_one(a.shape[j]):
                return False
        elif o != j:
            return False
    return True


def _max_origin(m: Value, a: Value) -> tuple[list[int | None] | None, frozenset[int]]:
    """For each dim of ``m``: the dim of ``a`` its index walks (None where ``m`` is
    broadcast), following ``m`` back to ``reduce(a, max)``; (None, {}) when it is not."""
    op = m.producer
    if op is None:
        return None, frozenset()
    if op.name == "reduce":
        if op.attrs.get("kind") != "max" or op.operands[0] is not a:
            return None, frozenset()
        axes = frozenset(int(x) % a.rank for x in op.attrs["axes"])
        return [d for d in range(a.rank) if d not in axes], axes
    if op.name == "broadcast_in_dim":
        inner, red = _max_origin(op.operands[0], a)
        if inner is None:
            return None, frozenset()
        out: list[int | None] = [None] * m.rank
        src = op.operands[0]
        for i, d in enumerate(op.attrs["broadcast_dimensions"]):
            same = tuple(src.shape[i:i + 1]) == tuple(m.shape[d:d + 1])
            out[d] = inner[i] if same else None
        return out, red
    if op.name == "reshape":
        inner, red = _max_origin(op.operands[0], a)
        if inner is None:
            return None, frozenset()
        src = op.operands[0]
        kept = [(o, s) for o, s in zip(inner, src.shape) if not _is_one(s)]
        if [s for _, s in kept] != [s for s in m.shape if not _is_one(s)]:
            return None, frozenset()
        it = iter(kept)
        return [None if _is_one(s) else next(it)[0] for s in m.shape], red
    return None, frozenset()


def _is_one(e: Expr) -> bool:
    return bool(e.is_const and e.value == 1)


def splat(v: Value) -> float | int | bool | None:
    """The single value of a constant (or broadcast constant) whose elements are all equal."""
    p = v.producer
    if p is None:
        return None
    if p.name == "broadcast_in_dim":
        return splat(p.operands[0])
    if p.name != "constant":
        return None
    arr = p.attrs["value"].array
    if arr.size == 0:
        return None
    first = arr.reshape(-1)[0]
    if not np.all(arr == first):
        return None
    return first.item()


def only_plus_one(uses: list[tuple[Op, int]] | None) -> bool:
    """Does every reader in ``uses`` (op, operand position; None: unknown readers) add
    the constant 1 to the value? False for no readers at all."""
    if not uses:
        return False
    for op, j in uses:
        if op.name != "add" or len(op.operands) != 2:
            return False
        other = splat(op.operands[1 - j])
        if other is None or isinstance(other, bool) or other != 1:
            return False
    return True
