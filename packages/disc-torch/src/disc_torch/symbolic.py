"""Map torch's symbolic sizes (sympy expressions over ``s0, s1, ...``) to DISC dims.

Dynamo gives every dynamic size a symbol in its ShapeEnv and every derived size a sympy
expression; the FX graph's ``meta['val']`` fake tensors carry them. DISC's core uses its own
canonical polynomials (``disc_core.symbolic.Expr``); this module is the one translation.
"""

from __future__ import annotations

import weakref
from typing import Any

import sympy
import torch

from disc_core.symbolic import Expr, ceildiv, floordiv, mod, smax, smin

__all__ = ["UnsupportedSize", "to_expr"]


class UnsupportedSize(ValueError):
    """A size DISC cannot express (unbacked/data-dependent symbols, non-integer math)."""


def to_expr(size: Any) -> Expr:
    """An int, SymInt or sympy expression as a core ``Expr``."""
    if isinstance(size, bool):
        raise UnsupportedSize(f"boolean {size!r} used as a size")
    if isinstance(size, int):
        return Expr.const(size)
    if isinstance(size, torch.SymInt):
        node = size.node
        if node.is_nested_int():
            raise UnsupportedSize("nested (jagged) sizes")
        hint = node.maybe_as_int()
        if hint is not None:
            return Expr.const(int(hint))
        return _from_shape_env(node)
    if isinstance(size, sympy.Basic):
        return _convert(size)
    raise UnsupportedSize(f"{type(size).__name__} {size!r} is not a size")


#: per ShapeEnv, the DISC form of each size expression already converted: a graph's
#: tensors share a handful of sizes, and simplifying one under the guards (sympy) then
#: converting it was 40% of partitioning a GPT backward graph
_converted: weakref.WeakKeyDictionary[Any, dict[sympy.Basic, Expr]] = (
    weakref.WeakKeyDictionary())


def _from_shape_env(node: Any) -> Expr:
    expr = node.expr
    try:
        memo = _converted.setdefault(node.shape_env, {})
    except TypeError:  # a ShapeEnv that cannot be weakly referenced: no memo
        memo = {}
    out = memo.get(expr)
    if out is None:
        simple = expr
        try:  # apply what dynamo's guards established (min(s0, s1) -> s0 when s0 <= s1)
            simple = node.shape_env.simplify(expr)
        except Exception:
            pass
        out = memo[expr] = _convert(simple)
    return out


def _convert(e: sympy.Basic) -> Expr:
    if isinstance(e, sympy.Integer):
        return Expr.const(int(e))
    if isinstance(e, sympy.Symbol):
        name = e.name
        if not name.startswith("s"):
            # u0, ... are unbacked: their value comes out of the data (nonzero, item)
            raise UnsupportedSize(f"size {name} depends on tensor data")
        return Expr.sym(name)
    if isinstance(e, sympy.Add):
        out = Expr.const(0)
        for a in e.args:
            out = out + _convert(a)
        return out
    if isinstance(e, sympy.Mul):
        out = Expr.const(1)
        for a in e.args:
            out = out * _convert(a)
        return out
    if isinstance(e, sympy.Pow) and isinstance(e.exp, sympy.Integer) and int(e.exp) >= 0:
        base = _convert(e.base)
        out = Expr.const(1)
        for _ in range(int(e.exp)):
            out = out * base
        return out
    fn = type(e).__name__
    args = [_convert(a) for a in e.args]
    if fn == "FloorDiv":
        return floordiv(args[0], args[1])
    if fn == "CeilDiv" or fn == "CleanDiv":
        return ceildiv(args[0], args[1]) if fn == "CeilDiv" else floordiv(args[0], args[1])
    if fn in ("Mod", "PythonMod"):
        return mod(args[0], args[1])
    if fn == "Max":
        return smax(*args)
    if fn == "Min":
        return smin(*args)
    raise UnsupportedSize(f"size expression {e} ({fn}) has no DISC form")
