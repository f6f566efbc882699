"""Shape-constraint propagation: rewrite every dim to its class representative.

After ``add(x: [B, S], y: [B, T])`` the analysis knows T == S; this pass rewrites T to S in
input types, attributes and (by re-inference) result types, so later passes see equal dims
as structurally equal. Only substitutions whose right-hand side is a constant or uses
symbols bound by the graph inputs are applied, so the interpreter can always evaluate them.
"""

from __future__ import annotations

import math
from typing import Any

from ..ir import Graph
from ..opdef import DIM, DIMS
from ..shape_constraints import ShapeConstraints
from .base import Pass


def input_symbols(graph: Graph) -> set[str]:
    out: set[str] = set()
    for v in graph.inputs:
        for d in v.shape:
            if d.is_symbol:
                out.add(d.symbol_name)
    return out


class ShapePropagation(Pass):
    name = "shape-propagation"

    def run(self, graph: Graph) -> bool:
        sc = ShapeConstraints(graph)
        bound = input_symbols(graph)
        subst = {k: v for k, v in sc.subst.items()
                 if v.is_const or v.free_symbols() <= (bound - {k})}
        # never rewrite an input's own bare symbol into an expression: it is how it binds
        subst = {k: v for k, v in subst.items() if v.is_const or v.is_symbol or k not in bound}
        if not subst:
            return False
        changed = False
        for v in graph.inputs:
            new = v.type.subs(subst)
            changed |= new != v.type
            v.type = new
        for op in graph.ops:
            attrs = dict(op.attrs)
            for key, spec in op.opdef.attrs.items():
                val = attrs.get(key)
                if val is None:
                    continue
                if spec.kind is DIMS:
                    attrs[key] = tuple(d.subs(subst) for d in val)
                elif spec.kind is DIM:
                    attrs[key] = val.subs(subst)
            changed |= attrs != op.attrs
            op.attrs = attrs
            types = op.opdef.result_types([v.type for v in op.operands], op.attrs)
            for r, t in zip(op.results, types):
                changed |= r.type != t
                r.type = t
        for name in list(graph.symbols):
            if name in subst and subst[name].is_symbol:
                rep = subst[name].symbol_name
                info = graph.symbols.pop(name)
                target = graph.symbols.setdefault(rep, type(info)(rep))
                _merge_hints(target, info)
        return changed


def _merge_hints(target: Any, info: Any) -> None:
    if info.min is not None:
        target.min = info.min if target.min is None else max(target.min, info.min)
    if info.max is not None:
        target.max = info.max if target.max is None else min(target.max, info.max)
    if info.multiple_of:
        m = target.multiple_of or 1
        target.multiple_of = m * info.multiple_of // math.gcd(m, info.multiple_of)

