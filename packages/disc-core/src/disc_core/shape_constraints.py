"""Shape-constraint analysis: which dims are provably equal, divisible, or bounded.

Op semantics imply facts (elementwise operands share dims, dot contracting dims agree,
concatenate non-axis dims agree, reshape preserves the element count); the user adds
hints (ranges, divisors). This analysis collects them once per graph into

* a substitution that maps symbols to representatives (union-find over symbols, with
  constants and earlier symbols winning), and
* a union-find over the remaining canonical expressions (e.g. ``N == B*S`` from a reshape),

and answers the questions later passes ask: ``equal(a, b)``, ``divisible(e, k)``,
``bounds(e)``. Fusion uses ``equal`` to fuse without index arithmetic; codegen uses
``divisible`` to drop remainder loops.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .ir import Graph
from .shape_facts import Divisible, Eq, Fact, ProductEq
from .symbolic import Expr, Func, Sym, as_expr, product

INF = math.inf


class ShapeConstraints:
    """The facts of one graph, closed under substitution."""

    def __init__(self, graph: Graph | None = None, facts: Iterable[Fact] = ()):
        self.subst: dict[str, Expr] = {}
        self._parent: dict[Expr, Expr] = {}
        self._divisors: dict[Expr, int] = {}
        self._ranges: dict[str, tuple[float, float]] = {}
        self._order: dict[str, int] = {}
        self.contradictions: list[str] = []
        all_facts: list[Fact] = []
        if graph is not None:
            self._note_order(graph)
            for name, info in graph.symbols.items():
                self._ranges[name] = (info.min if info.min is not None else 0,
                                      info.max if info.max is not None else INF)
                if info.multiple_of:
                    all_facts.append(Divisible(Expr.sym(name), info.multiple_of))
            for op in graph.ops:
                all_facts.extend(op.opdef.facts(op))
        all_facts.extend(facts)
        for f in all_facts:
            self.add(f)

    # -- building ---------------------------------------------------------------------
    def _note_order(self, graph: Graph) -> None:
        """Symbols seen earlier (inputs first) become representatives."""
        n = 0
        types = [v.type for v in graph.inputs] + [r.type for op in graph.ops for r in op.results]
        for t in types:
            for d in t.shape:
                for s in sorted(d.free_symbols()):
                    if s not in self._order:
                        self._order[s] = n
                        n += 1

    def canonical(self, e: Expr | int | str) -> Expr:
        """Rewrite ``e`` with the current substitution (symbols -> representatives)."""
        return as_expr(e).subs(self.subst) if self.subst else as_expr(e)

    def add(self, fact: Fact) -> None:
        if isinstance(fact, Eq):
            self._add_eq(fact.a, fact.b)
        elif isinstance(fact, ProductEq):
            self._add_eq(product(fact.lhs), product(fact.rhs))
        elif isinstance(fact, Divisible):
            key = self.canonical(fact.expr)
            old = self._divisors.get(key, 1)
            self._divisors[key] = old * fact.divisor // math.gcd(old, fact.divisor)

    def _add_eq(self, a: Expr, b: Expr) -> None:
        a, b = self.canonical(a), self.canonical(b)
        if a == b:
            return
        if a.is_const and b.is_const:
            self.contradictions.append(f"{a} == {b}")
            return
        sym = self._eliminable(a, b)
        if sym is not None:
            name, value = sym
            self._bind(name, value)
            return
        ra, rb = self._find(a), self._find(b)
        if ra != rb:
            # keep the simpler expression as the class representative
            if _complexity(rb) < _complexity(ra):
                ra, rb = rb, ra
            self._parent[rb] = ra

    def _eliminable(self, a: Expr, b: Expr) -> tuple[str, Expr] | None:
        """Pick a symbol to replace: a bare symbol equal to something not containing it."""
        cands = []
        for s, other in ((a, b), (b, a)):
            if s.is_symbol and s.symbol_name not in other.free_symbols():
                cands.append((s.symbol_name, other))
        if not cands:
            return None
        # Prefer replacing the later symbol by the earlier one (or by a constant).
        cands.sort(key=lambda c: (c[1].is_const, self._rank(c[0])), reverse=True)
        return cands[0]

    def _rank(self, name: str) -> int:
        return self._order.get(name, len(self._order) + hash(name) % 1000)

    def _bind(self, name: str, value: Expr) -> None:
        lo, hi = self._ranges.pop(name, (0, INF))
        self.subst = {k: v.subs({name: value}) for k, v in self.subst.items()}
        self.subst[name] = value
        if value.is_symbol:  # merge the range hints into the representative
            r = value.symbol_name
            rlo, rhi = self._ranges.get(r, (0, INF))
            self._ranges[r] = (max(lo, rlo), min(hi, rhi))
        elif value.is_const and not (lo <= value.value <= hi):
            self.contradictions.append(f"{name} = {value.value} outside [{lo}, {hi}]")
        # re-canonicalize the expression classes and divisors under the new binding
        old_parent, self._parent = self._parent, {}
        for child, parent in old_parent.items():
            self._add_eq(child.subs({name: value}), parent.subs({name: value}))
        old_div, self._divisors = self._divisors, {}
        for e, d in old_div.items():
            self.add(Divisible(e.subs({name: value}), d))

    def _find(self, e: Expr) -> Expr:
        root = e
        while root in self._parent:
            root = self._parent[root]
        while e in self._parent and self._parent[e] != root:  # path compression
            self._parent[e], e = root, self._parent[e]
        return root

    # -- queries ----------------------------------------------------------------------
    def representative(self, e: Expr | int | str) -> Expr:
        return self._find(self.canonical(e))

    def equal(self, a: Expr | int | str, b: Expr | int | str) -> bool:
        """True when a == b holds for every run of the graph that does not fail."""
        ca, cb = self.canonical(a), self.canonical(b)
        if ca == cb or self._find(ca) == self._find(cb):
            return True
        # equal after replacing sub-expressions by class representatives
        return self._normalize_terms(ca) == self._normalize_terms(cb)

    def _normalize_terms(self, e: Expr) -> Expr:
        out = Expr()
        for mono, coeff in e.terms:
            out = out + self._find(Expr([(mono, coeff)])) if mono else out + coeff
        return self._find(out)

    def product_equal(self, a: Iterable[Expr], b: Iterable[Expr]) -> bool:
        return self.equal(product(a), product(b))

    def divisible(self, e: Expr | int | str, k: int) -> bool:
        """True when ``e`` is provably a multiple of ``k``."""
        if k in (0, 1):
            return k == 1
        return self._known_divisor(self.canonical(e)) % k == 0

    def _known_divisor(self, e: Expr) -> int:
        if e in self._divisors or self._find(e) in self._divisors:
            d = self._divisors.get(e) or self._divisors[self._find(e)]
            return d * self._term_gcd(e) // math.gcd(d, self._term_gcd(e))
        return self._term_gcd(e)

    def _term_gcd(self, e: Expr) -> int:
        g = 0
        for mono, coeff in e.terms:
            d = abs(coeff)
            for atom in mono:
                d *= self._divisors.get(Expr.from_atom(atom), 1)
            g = math.gcd(g, d)
        return g

    def bounds(self, e: Expr | int | str) -> tuple[float, float]:
        """An interval containing every value of ``e`` (dims are never negative)."""
        return _interval(self.canonical(e), self._ranges)


def _complexity(e: Expr) -> tuple[int, str]:
    return (sum(len(m) + 1 for m, _ in e.terms), str(e))


def _interval(e: Expr, ranges: dict[str, tuple[float, float]]) -> tuple[float, float]:
    lo = hi = 0.0
    for mono, coeff in e.terms:
        tlo, thi = float(coeff), float(coeff)
        for atom in mono:
            alo, ahi = _atom_interval(atom, ranges)
            cands = [x * y for x in (tlo, thi) for y in (alo, ahi)
                     if not (math.isinf(y) and x == 0) and not (math.isinf(x) and y == 0)]
            cands = cands or [0.0]
            tlo, thi = min(cands), max(cands)
        lo, hi = lo + tlo, hi + thi
    return lo, hi


def _atom_interval(atom: object, ranges: dict[str, tuple[float, float]]) -> tuple[float, float]:
    if isinstance(atom, Sym):
        return ranges.get(atom.name, (0, INF))
    assert isinstance(atom, Func)
    ivs = [_interval(a, ranges) for a in atom.args]
    if atom.fn == "min":
        return min(i[0] for i in ivs), min(i[1] for i in ivs)
    if atom.fn == "max":
        return max(i[0] for i in ivs), max(i[1] for i in ivs)
    (nlo, nhi), (dlo, dhi) = ivs
    if atom.fn == "mod":
        return 0, max(dhi - 1, 0)
    if dlo <= 0 or nlo < 0:
        return -INF, INF
    if atom.fn == "floordiv":
        return math.floor(nlo / dhi) if not math.isinf(dhi) else 0, (
            math.floor(nhi / dlo) if not math.isinf(nhi) else INF)
    return math.ceil(nlo / dhi) if not math.isinf(dhi) else 0, (
        math.ceil(nhi / dlo) if not math.isinf(nhi) else INF)
