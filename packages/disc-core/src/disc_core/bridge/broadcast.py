"""The one implicit-broadcasting rule of every bridge (numpy's, torch's, TF's, Paddle's).

Trailing dims are aligned; per dim, an operand dim ``d`` meets a target dim ``t``:

* ``d == t`` (provably: the same expression): the dim is kept;
* ``d`` is a static 1: it stretches (the dim is dropped and replicated);
* ``d`` and ``t`` both static and different: an error naming both (:class:`BroadcastError`);
* otherwise (a symbolic dim on either side): the dim is kept and mapped onto ``t`` by
  ``broadcast_in_dim``, whose semantics are numpy's at run time: ``d`` must be 1 or equal
  ``t`` then, and the module checks it (the native engine speculates on the two cases). A
  call with any other sizes fails that check and runs in the framework; nothing is
  assumed at compile time, so no size is ever wrong.

The result shape of several operands (:func:`broadcast_shape`) follows the same rule: equal
dims stay, a static 1 gives way, a static non-1 dim wins over a symbolic one (the symbolic
one must be 1 or equal to it), a dim that is at most 1 (``min(1, n)``: what ``x[:1]``
leaves) gives way to a symbolic one, a plain symbol wins over an expression of symbols,
and of two other different symbolic dims the first stands for both. Each operand is then
mapped onto the result dims by :func:`broadcast_to`, so the choice is checked, never
trusted: if at run time the dim that was kept is the 1 and the other is larger, the
module refuses the call and the framework runs it. Keeping the first (or the plain
symbol) keeps a graph's dims plain symbols, which the shape analysis equates and fusion
follows: an expression result dim that later meets the symbol it equals in an
elementwise op stops the native planner (``max(a, b)``, numpy's exact size, did so on the
gradients of residual blocks whose branches carried distinct symbols).

This differs from :meth:`GraphBuilder.broadcast_to`, which is the core's *provable* form
(an error unless every dim is equal or a static 1) for graphs written by hand.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..builder import GraphBuilder
from ..ir import Value
from ..symbolic import Expr, ExprLike, as_expr
from .errors import ConversionError

__all__ = ["BroadcastError", "at_most_one", "broadcast_all", "broadcast_dim", "broadcast_shape",
           "broadcast_to"]


class BroadcastError(ConversionError):
    """Shapes that can never broadcast (static dims that differ, ranks that do not fit)."""


def _fmt(shape: Sequence[Expr]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _is_one(d: Expr) -> bool:
    return d.is_const and d.value == 1


def at_most_one(d: Expr) -> bool:
    """A dim that is 0 or 1 for every size: a static 0 or 1, or ``min(.., c)`` with a
    constant ``c <= 1`` among its arguments (dims are never negative)."""
    if d.is_const:
        return d.value <= 1
    if len(d.terms) != 1:
        return False
    mono, coeff = d.terms[0]
    if coeff != 1 or len(mono) != 1:
        return False
    atom = mono[0]
    return getattr(atom, "fn", None) == "min" and any(
        a.is_const and a.value <= 1 for a in atom.args)


def broadcast_dim(a: ExprLike, b: ExprLike) -> Expr:
    """The broadcast of two dims (see the module docstring)."""
    a, b = as_expr(a), as_expr(b)
    if a == b or _is_one(b):
        return a
    if _is_one(a):
        return b
    if a.is_const and b.is_const:
        raise BroadcastError(f"dims {a} and {b} do not broadcast (static, different, "
                             "neither is 1)")
    if a.is_const:
        return a
    if b.is_const:
        return b
    if at_most_one(a) != at_most_one(b):
        return b if at_most_one(a) else a
    if a.is_symbol != b.is_symbol:
        return a if a.is_symbol else b
    return a


def broadcast_shape(*shapes: Sequence[ExprLike]) -> tuple[Expr, ...]:
    """numpy's result shape of ``shapes`` (trailing dims aligned)."""
    if not shapes:
        return ()
    rank = max(len(s) for s in shapes)
    out: list[Expr] = []
    for k in range(rank):
        dim: Expr | None = None
        for s in shapes:
            i = k - (rank - len(s))
            if i < 0:
                continue
            d = as_expr(s[i])
            try:
                dim = d if dim is None else broadcast_dim(dim, d)
            except BroadcastError as exc:
                raise BroadcastError(
                    f"shapes {', '.join(_fmt([as_expr(x) for x in s]) for s in shapes)} do "
                    f"not broadcast: {exc}") from None
        out.append(dim if dim is not None else Expr.const(1))
    return tuple(out)


def broadcast_to(b: GraphBuilder, v: Value, shape: Sequence[ExprLike]) -> Value:
    """``v`` broadcast to ``shape`` (``v`` itself when it has that shape)."""
    dims = tuple(as_expr(d) for d in shape)
    if tuple(v.shape) == dims:
        return v
    offset = len(dims) - v.rank
    if offset < 0:
        raise BroadcastError(f"cannot broadcast rank {v.rank} to rank {len(dims)} "
                             f"({_fmt(v.shape)} to {_fmt(dims)})")
    kept: list[int] = []
    kept_dims: list[Expr] = []
    for i, d in enumerate(v.shape):
        target = dims[offset + i]
        if d != target and _is_one(d):
            continue  # a static 1 stretches
        if d != target and d.is_const and target.is_const:
            raise BroadcastError(f"cannot broadcast dim {d} to {target} "
                                 f"({_fmt(v.shape)} to {_fmt(dims)})")
        kept.append(offset + i)
        kept_dims.append(d)
    v = b.reshape_to(v, kept_dims)
    return b.op("broadcast_in_dim", v, shape=list(dims),  # type: ignore[return-value]
                broadcast_dimensions=kept)


def broadcast_all(b: GraphBuilder, *vs: Value) -> list[Value]:
    """Every value broadcast to their common shape."""
    shape = broadcast_shape(*[v.shape for v in vs])
    return [broadcast_to(b, v, shape) for v in vs]
