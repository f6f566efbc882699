"""Symbolic dimension expressions.

A dimension is an :class:`Expr`: an integer polynomial over *atoms*, where an atom is a
symbol (``B``) or an opaque integer function of expressions (floordiv, ceildiv, mod, min,
max). Every constructor returns the canonical form, so structural equality is the cheap,
sound "provably equal" test that passes build on, and ``s*1 -> s``, ``(s0*s1)//s1 -> s0``
or ``(2*s + 3)//2 -> s + 1`` hold by construction.

Dims denote sizes, which are never negative; simplifications rely on that only where noted.
Division simplifications assume the divisor is non-zero.

A divisor that is zero at run time (``floordiv(s0*s3, 2*s0)`` with ``s0 = 0``) is not an
error by itself: a dim only matters when its tensor has elements. :func:`evaluate_shape`
counts such a division as 0 when another dim of the same shape is 0 (the tensor is empty
whatever the value), and raises :class:`DimDivisionError` otherwise (the inputs are invalid).
The native code generator implements the same rule, so both engines agree.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from functools import total_ordering
from typing import Union

# A monomial is a sorted tuple of atoms (repeated for powers); the empty tuple is the
# constant monomial.
Monomial = tuple["Atom", ...]


@total_ordering
class Atom:
    """A non-polynomial building block. Subclasses are immutable and hashable."""

    __slots__ = ("_key",)
    _key: tuple

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Atom) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __lt__(self, other: Atom) -> bool:
        return self._key < other._key

    def evaluate(self, env: Mapping[str, int], faults: list[Func] | None = None) -> int:
        """The atom's value; see :meth:`Expr.evaluate` for ``faults``."""
        raise NotImplementedError

    def free_symbols(self) -> set[str]:
        raise NotImplementedError

    def subs(self, mapping: Mapping[str, Expr]) -> Expr:
        raise NotImplementedError


class Sym(Atom):
    __slots__ = ("name",)

    def __init__(self, name: str):
        if not _IDENT.fullmatch(name) or name in _FUNCS:
            raise ValueError(f"invalid symbol name {name!r}: expected an identifier that is "
                             f"not one of {sorted(_FUNCS)}")
        self.name = name
        self._key = (0, name)

    def __str__(self) -> str:
        return self.name

    def evaluate(self, env: Mapping[str, int], faults: list[Func] | None = None) -> int:
        try:
            return int(env[self.name])
        except KeyError:
            raise UnboundSymbolError(self.name) from None

    def free_symbols(self) -> set[str]:
        return {self.name}

    def subs(self, mapping: Mapping[str, Expr]) -> Expr:
        return mapping.get(self.name, Expr.from_atom(self))


class Func(Atom):
    """An opaque integer function of expressions: floordiv, ceildiv, mod, min, max."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: str, args: tuple[Expr, ...]):
        self.fn = fn
        self.args = args
        self._key = (1, fn, tuple(a._key() for a in args))

    def __str__(self) -> str:
        return f"{self.fn}({', '.join(str(a) for a in self.args)})"

    @property
    def divisor(self) -> Expr | None:
        """The divisor of floordiv/ceildiv/mod, None for min/max."""
        return self.args[1] if self.fn in _DIVISIONS else None

    def evaluate(self, env: Mapping[str, int], faults: list[Func] | None = None) -> int:
        vals = [a.evaluate(env, faults) for a in self.args]
        if self.fn in _DIVISIONS and vals[1] == 0:
            if faults is None:
                raise ZeroDivisionError(f"{self} divides by zero")
            faults.append(self)
            return 0  # what native code computes too (disc_floordiv & co. in emit.py)
        if self.fn == "floordiv":
            return vals[0] // vals[1]
        if self.fn == "ceildiv":
            return -(-vals[0] // vals[1])
        if self.fn == "mod":
            return vals[0] % vals[1]
        if self.fn == "min":
            return min(vals)
        return max(vals)

    def free_symbols(self) -> set[str]:
        out: set[str] = set()
        for a in self.args:
            out |= a.free_symbols()
        return out

    def subs(self, mapping: Mapping[str, Expr]) -> Expr:
        args = [a.subs(mapping) for a in self.args]
        return _FUNCS[self.fn](*args)


class DimDivisionError(ZeroDivisionError):
    """A dim of a non-empty shape divides by zero: the inputs are invalid for the graph."""

    def __init__(self, dims: tuple[Expr, ...], k: int, fault: Func, env: Mapping[str, int]):
        self.dims, self.k, self.fault = dims, k, fault
        den = fault.args[1]
        bound = ", ".join(f"{n} = {env[n]}" for n in sorted(den.free_symbols()) if n in env)
        super().__init__(
            f"dim {k} of [{', '.join(map(str, dims))}] is {dims[k]}, which divides by zero "
            f"({den} = 0{'; ' + bound if bound else ''}) while no other dim is 0; expected "
            f"{den} != 0 (a division by zero is only allowed in an empty tensor)")


class UnboundSymbolError(KeyError):
    """A symbol had no value when an expression was evaluated."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"symbol {self.name!r} is not bound"


ExprLike = Union["Expr", int, str]


class Expr:
    """A canonical integer polynomial over atoms. Immutable and hashable."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms: Mapping[Monomial, int] | Iterable[tuple[Monomial, int]] = ()):
        items = terms.items() if isinstance(terms, Mapping) else terms
        acc: dict[Monomial, int] = {}
        for mono, coeff in items:
            if coeff:
                acc[mono] = acc.get(mono, 0) + coeff
        self.terms: tuple[tuple[Monomial, int], ...] = tuple(
            sorted(((m, c) for m, c in acc.items() if c), key=lambda mc: _mono_key(mc[0])))
        self._hash = hash(self.terms)

    # -- construction -------------------------------------------------------------------
    @staticmethod
    def const(value: int) -> Expr:
        value = int(value)
        cached = _CONSTS.get(value)
        if cached is None:
            cached = Expr({(): value})
            if len(_CONSTS) < _CONSTS_MAX:  # sizes repeat: bridges build thousands per graph
                _CONSTS[value] = cached
        return cached

    @staticmethod
    def sym(name: str) -> Expr:
        return Expr.from_atom(Sym(name))

    @staticmethod
    def from_atom(atom: Atom) -> Expr:
        return Expr({(atom,): 1})

    # -- inspection ---------------------------------------------------------------------
    @property
    def is_const(self) -> bool:
        return all(m == () for m, _ in self.terms)

    @property
    def value(self) -> int:
        """The integer value of a constant expression."""
        if not self.is_const:
            raise ValueError(f"dimension {self} is not static")
        return self.terms[0][1] if self.terms else 0

    @property
    def is_symbol(self) -> bool:
        return (len(self.terms) == 1 and self.terms[0][1] == 1 and len(self.terms[0][0]) == 1
                and isinstance(self.terms[0][0][0], Sym))

    @property
    def symbol_name(self) -> str:
        if not self.is_symbol:
            raise ValueError(f"dimension {self} is not a bare symbol")
        return self.terms[0][0][0].name  # type: ignore[union-attr]

    def free_symbols(self) -> set[str]:
        out: set[str] = set()
        for m, _ in self.terms:
            for a in m:
                out |= a.free_symbols()
        return out

    def _key(self) -> tuple:
        return tuple((tuple(a._key for a in m), c) for m, c in self.terms)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            return self.is_const and self.value == other
        return isinstance(other, Expr) and self.terms == other.terms

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Expr({str(self)!r})"

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts: list[str] = []
        # constants last, as people write them: B*S + 1
        ordered = [t for t in self.terms if t[0] != ()] + [t for t in self.terms if t[0] == ()]
        for i, (mono, coeff) in enumerate(ordered):
            neg = coeff < 0
            mag = -coeff if neg else coeff
            if mono == ():
                body = str(mag)
            else:
                factors = [str(a) for a in mono]
                body = "*".join(([str(mag)] if mag != 1 else []) + factors)
            if i == 0:
                parts.append(("-" if neg else "") + body)
            else:
                parts.append((" - " if neg else " + ") + body)
        return "".join(parts)

    # -- arithmetic ---------------------------------------------------------------------
    def __add__(self, other: ExprLike) -> Expr:
        o = as_expr(other)
        return Expr(list(self.terms) + list(o.terms))

    __radd__ = __add__

    def __neg__(self) -> Expr:
        return Expr([(m, -c) for m, c in self.terms])

    def __sub__(self, other: ExprLike) -> Expr:
        return self + (-as_expr(other))

    def __rsub__(self, other: ExprLike) -> Expr:
        return as_expr(other) - self

    def __mul__(self, other: ExprLike) -> Expr:
        o = as_expr(other)
        out: list[tuple[Monomial, int]] = []
        for m1, c1 in self.terms:
            for m2, c2 in o.terms:
                out.append((tuple(sorted(m1 + m2)), c1 * c2))
        return Expr(out)

    __rmul__ = __mul__

    def __floordiv__(self, other: ExprLike) -> Expr:
        return floordiv(self, other)

    def __rfloordiv__(self, other: ExprLike) -> Expr:
        return floordiv(other, self)

    def __mod__(self, other: ExprLike) -> Expr:
        return mod(self, other)

    # -- evaluation and substitution ----------------------------------------------------
    def evaluate(self, env: Mapping[str, int], faults: list[Func] | None = None) -> int:
        """The value under ``env``. A division by zero raises ZeroDivisionError, unless a
        ``faults`` list is given: then the division counts as 0 and its atom is appended
        (see :func:`evaluate_shape`, which decides whether that value may be used)."""
        total = 0
        for mono, coeff in self.terms:
            prod = coeff
            for a in mono:
                prod *= a.evaluate(env, faults)
            total += prod
        return total

    def divisions(self) -> list[Func]:
        """Every floordiv/ceildiv/mod atom whose divisor is not a constant (the ones that may
        divide by zero at run time), nested ones included, each once."""
        out: list[Func] = []
        for mono, _ in self.terms:
            for a in mono:
                if isinstance(a, Func):
                    for arg in a.args:
                        out += [f for f in arg.divisions() if f not in out]
                    if a.fn in _DIVISIONS and not a.args[1].is_const and a not in out:
                        out.append(a)
        return out

    def subs(self, mapping: Mapping[str, ExprLike]) -> Expr:
        """Replace symbols by expressions and re-canonicalize."""
        if not mapping or not (self.free_symbols() & set(mapping)):
            return self
        m = {k: as_expr(v) for k, v in mapping.items()}
        total = Expr()
        for mono, coeff in self.terms:
            prod = Expr.const(coeff)
            for a in mono:
                prod = prod * a.subs(m)
            total = total + prod
        return total


#: constant expressions by value (immutable, so shared)
_CONSTS: dict[int, Expr] = {}
_CONSTS_MAX = 8192


def _mono_key(m: Monomial) -> tuple:
    return (len(m), tuple(a._key for a in m))


def as_expr(x: ExprLike) -> Expr:
    """Coerce an int, a symbol name or expression text, or an Expr into an Expr."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool):
        raise TypeError("a bool is not a dimension")
    if isinstance(x, int):
        return Expr.const(x)
    if hasattr(x, "__index__"):
        return Expr.const(int(x))  # numpy integers
    if isinstance(x, str):
        return parse_expr(x)
    raise TypeError(f"cannot use {x!r} ({type(x).__name__}) as a dimension")


# -- division and friends -------------------------------------------------------------

def _split_by_const(num: Expr, c: int) -> tuple[Expr, Expr]:
    """Split num = c*q + r with r's coefficients in [0, c). Exact for integer-valued atoms."""
    q_terms, r_terms = [], []
    for m, coeff in num.terms:
        qq, rr = divmod(coeff, c)
        if qq:
            q_terms.append((m, qq))
        if rr:
            r_terms.append((m, rr))
    return Expr(q_terms), Expr(r_terms)


def _exact_monomial_quotient(num: Expr, den: Expr) -> Expr | None:
    """num / den when den is a single monomial that divides every term of num exactly."""
    if len(den.terms) != 1:
        return None
    dmono, dcoeff = den.terms[0]
    out = []
    for m, c in num.terms:
        if c % dcoeff:
            return None
        rest = list(m)
        for a in dmono:
            if a in rest:
                rest.remove(a)
            else:
                return None
        out.append((tuple(rest), c // dcoeff))
    return Expr(out)


def _nested_division(fn: str, num: Expr) -> tuple[Expr, int, Expr] | None:
    """``(a, b, rest)`` when ``num = fn(a, b) + rest`` with ``b`` a positive constant (the
    first such term, coefficient 1), else None.

    For integer ``r`` and positive integers ``b`` and ``c``, ``floor(floor(a/b) + r, c)``
    is ``floor(a + b*r, b*c)``, and the same holds for ceil. Sizes after a chain of
    strided layers (a stride-2 convolution after a stride-2 pooling after a stride-2
    stem) come out nested from a converter and flat from the framework's own shape
    rules: one canonical form makes them structurally equal."""
    for mono, coeff in num.terms:
        if coeff != 1 or len(mono) != 1:
            continue
        atom = mono[0]
        if isinstance(atom, Func) and atom.fn == fn:
            divisor = atom.args[1]
            if divisor.is_const and divisor.value > 0:
                return atom.args[0], divisor.value, num - Expr.from_atom(atom)
    return None


def _rounded_div(fn: str, a: ExprLike, b: ExprLike) -> Expr:
    """floordiv or ceildiv: fold constants, pull out exact multiples, else an opaque atom."""
    num, den = as_expr(a), as_expr(b)
    if den.is_const:
        c = den.value
        if c == 0:
            raise ZeroDivisionError(f"{fn}({num}, 0)")
        if c == 1:
            return num
        if num.is_const:
            return Expr.const(num.value // c if fn == "floordiv" else -(-num.value // c))
        if c > 0:
            nested = _nested_division(fn, num)
            if nested is not None:  # round((round(a/b) + r)/c) = round((a + b*r)/(b*c))
                inner, b, rest = nested
                return _rounded_div(fn, inner + rest * b, Expr.const(b * c))
            q, r = _split_by_const(num, c)
            if not r.terms:
                return q
            if q.terms:  # round((c*q + r)/c) = q + round(r/c); keeps the form unique
                return q + _rounded_div(fn, r, den)
    exact = _exact_monomial_quotient(num, den)
    if exact is not None:
        return exact
    return Expr.from_atom(Func(fn, (num, den)))


def floordiv(a: ExprLike, b: ExprLike) -> Expr:
    return _rounded_div("floordiv", a, b)


def ceildiv(a: ExprLike, b: ExprLike) -> Expr:
    return _rounded_div("ceildiv", a, b)


def mod(a: ExprLike, b: ExprLike) -> Expr:
    num, den = as_expr(a), as_expr(b)
    if den.is_const:
        c = den.value
        if c == 0:
            raise ZeroDivisionError(f"mod({num}, 0)")
        if c == 1:
            return Expr.const(0)
        if num.is_const:
            return Expr.const(num.value % c)
        if c > 0:
            _, r = _split_by_const(num, c)
            if not r.terms:
                return Expr.const(0)
            if r.is_const:
                return Expr.const(r.value % c)
            num = r
    if _exact_monomial_quotient(num, den) is not None:
        return Expr.const(0)
    return Expr.from_atom(Func("mod", (num, den)))


def _minmax(fn: str, args: Iterable[ExprLike]) -> Expr:
    pick = min if fn == "min" else max
    flat: list[Expr] = []
    for a in args:
        e = as_expr(a)
        if (len(e.terms) == 1 and e.terms[0][1] == 1 and len(e.terms[0][0]) == 1
                and isinstance(e.terms[0][0][0], Func) and e.terms[0][0][0].fn == fn):
            flat.extend(e.terms[0][0][0].args)
        else:
            flat.append(e)
    if not flat:
        raise ValueError(f"{fn}() needs at least one argument")
    # Arguments that differ by a constant are ordered: keep only the winner.
    kept: list[Expr] = []
    for e in flat:
        replaced = False
        for i, k in enumerate(kept):
            diff = e - k
            if diff.is_const:
                kept[i] = e if pick(diff.value, 0) == diff.value and diff.value != 0 else k
                replaced = True
                break
        if not replaced:
            kept.append(e)
    if len(kept) == 1:
        return kept[0]
    kept.sort(key=lambda e: e._key())
    return Expr.from_atom(Func(fn, tuple(kept)))


def smin(*args: ExprLike) -> Expr:
    return _minmax("min", args)


def smax(*args: ExprLike) -> Expr:
    return _minmax("max", args)


_FUNCS = {"floordiv": floordiv, "ceildiv": ceildiv, "mod": mod, "min": smin, "max": smax}
_DIVISIONS = ("floordiv", "ceildiv", "mod")


def evaluate_shape(dims: Iterable[ExprLike], env: Mapping[str, int]) -> tuple[int, ...]:
    """The concrete shape of ``dims``, with the rule for divisions by zero.

    A dim whose expression divides by zero (anywhere inside) only matters if the tensor has
    elements. When some other dim that evaluates normally is 0, the tensor is empty whatever
    that dim is: the division counts as 0 and the dim is clamped at 0, as in the generated
    C, so both engines give the same shape. Otherwise the shape is undefined (the inputs
    are invalid) and :class:`DimDivisionError` names the dim, the zero divisor and what
    was expected.
    """
    exprs = tuple(as_expr(d) for d in dims)
    values: list[int] = []
    faulty: list[tuple[int, Func]] = []
    for k, e in enumerate(exprs):
        faults: list[Func] = []
        values.append(e.evaluate(env, faults))
        if faults:
            faulty.append((k, faults[0]))
    if faulty:
        bad = {k for k, _ in faulty}
        if not any(v == 0 for k, v in enumerate(values) if k not in bad):
            k, fault = faulty[0]
            raise DimDivisionError(exprs, k, fault, env)
        for k in bad:  # never a negative size (numpy would read -1 as "infer this dim")
            values[k] = max(values[k], 0)
    return tuple(values)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def product(dims: Iterable[ExprLike]) -> Expr:
    out = Expr.const(1)
    for d in dims:
        out = out * as_expr(d)
    return out


# -- text form ------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(//|[-+*(),%]))")


class ExprParseError(ValueError):
    pass


def parse_expr(text: str) -> Expr:
    """Parse the text form produced by ``str(expr)`` (also accepts ``a // b`` and ``a % b``)."""
    tokens: list[tuple[str, str]] = []
    pos = 0
    text_s = text.strip()
    while pos < len(text_s):
        m = _TOKEN.match(text_s, pos)
        if not m or m.end() == pos:
            raise ExprParseError(f"bad dimension expression {text!r} at offset {pos}")
        pos = m.end()
        if m.group(1):
            tokens.append(("int", m.group(1)))
        elif m.group(2):
            tokens.append(("id", m.group(2)))
        else:
            tokens.append(("op", m.group(3)))
    p = _ExprParser(tokens, text)
    e = p.sum()
    if p.i != len(tokens):
        raise ExprParseError(f"unexpected {tokens[p.i][1]!r} in dimension expression {text!r}")
    return e


class _ExprParser:
    def __init__(self, tokens: list[tuple[str, str]], text: str):
        self.t, self.i, self.text = tokens, 0, text

    def peek(self) -> tuple[str, str] | None:
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self, val: str) -> bool:
        if self.peek() == ("op", val):
            self.i += 1
            return True
        return False

    def sum(self) -> Expr:
        e = self.term()
        while True:
            if self.take("+"):
                e = e + self.term()
            elif self.take("-"):
                e = e - self.term()
            else:
                return e

    def term(self) -> Expr:
        e = self.unary()
        while True:
            if self.take("*"):
                e = e * self.unary()
            elif self.take("//"):
                e = floordiv(e, self.unary())
            elif self.take("%"):
                e = mod(e, self.unary())
            else:
                return e

    def unary(self) -> Expr:
        if self.take("-"):
            return -self.unary()
        return self.primary()

    def primary(self) -> Expr:
        tok = self.peek()
        if tok is None:
            raise ExprParseError(f"dimension expression {self.text!r} ends early")
        self.i += 1
        kind, val = tok
        if kind == "int":
            return Expr.const(int(val))
        if kind == "id":
            if val in _FUNCS and self.take("("):
                args = [self.sum()]
                while self.take(","):
                    args.append(self.sum())
                if not self.take(")"):
                    raise ExprParseError(f"missing ')' in {self.text!r}")
                if val in ("floordiv", "ceildiv", "mod") and len(args) != 2:
                    raise ExprParseError(f"{val} takes 2 arguments in {self.text!r}")
                return _FUNCS[val](*args)
            return Expr.sym(val)
        if val == "(":
            e = self.sum()
            if not self.take(")"):
                raise ExprParseError(f"missing ')' in {self.text!r}")
            return e
        raise ExprParseError(f"unexpected {val!r} in dimension expression {self.text!r}")


def solve_linear(expr: Expr, value: int, env: Mapping[str, int]) -> tuple[str, int] | None:
    """If ``expr == value`` pins exactly one unbound symbol linearly, return (name, value).

    Lets the interpreter bind symbols that only appear inside an input dim such as ``2*S``.
    """
    unbound = expr.free_symbols() - set(env)
    if len(unbound) != 1:
        return None
    (name,) = unbound
    rest, coeff = 0, 0
    for mono, c in expr.terms:
        hits = [a for a in mono if isinstance(a, Sym) and a.name == name]
        others = [a for a in mono if not (isinstance(a, Sym) and a.name == name)]
        if any(name in a.free_symbols() for a in others) or len(hits) > 1:
            return None
        scale = c
        for a in others:
            scale *= a.evaluate(env)
        if hits:
            coeff += scale
        else:
            rest += scale
    if coeff == 0 or (value - rest) % coeff:
        return None
    return name, (value - rest) // coeff


def gcd_divisor(expr: Expr) -> int:
    """Largest constant that provably divides ``expr`` (0 for the zero expression)."""
    g = 0
    for _, c in expr.terms:
        g = math.gcd(g, c)
    return abs(g)
