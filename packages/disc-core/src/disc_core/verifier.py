"""Whole-graph verification: SSA order, attribute normal form, and inferred result types."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .attrs import DIM, DIMS, VerifyError

if TYPE_CHECKING:
    from .ir import Graph


def _attr_symbols(op) -> set[str]:
    out: set[str] = set()
    for key, spec in op.opdef.attrs.items():
        val = op.attrs.get(key)
        if val is None:
            continue
        if spec.kind is DIMS:
            for d in val:
                out |= d.free_symbols()
        elif spec.kind is DIM:
            out |= val.free_symbols()
    return out


def verify_graph(graph: Graph) -> None:
    """Raise VerifyError naming the graph, the op and the rule that is broken."""
    defined: set[int] = set()
    where = f"graph @{graph.name}"
    bound: set[str] = set()
    for v in graph.inputs:
        bound |= v.type.free_symbols()
    for i, v in enumerate(graph.inputs):
        if v.producer is not None:
            raise VerifyError(f"{where}: input #{i} is produced by an op")
        defined.add(id(v))
    for n, op in enumerate(graph.ops):
        label = f"{where}: op #{n} ({op.name})"
        for k, v in enumerate(op.operands):
            if id(v) not in defined:
                raise VerifyError(f"{label}: operand #{k} is used before it is defined "
                                  f"or comes from another graph")
        try:
            norm = op.opdef.normalize_attrs(op.attrs)
            if norm != op.attrs:
                raise VerifyError(f"{op.name}: attributes are not in normal form")
            types = op.opdef.result_types([v.type for v in op.operands], op.attrs)
        except VerifyError as exc:
            raise VerifyError(f"{label}: {exc}") from None
        unbound = _attr_symbols(op) - bound
        if op.opdef.has_trait("dynamic_shape"):
            for r in op.results:  # dynamic-shape ops introduce the symbols of their results
                bound |= r.type.free_symbols()
        elif unbound:
            raise VerifyError(f"{label}: attributes use symbol(s) {sorted(unbound)} that no "
                              f"input binds (only dynamic-shape ops may introduce symbols)")
        got = [r.type for r in op.results]
        if types != got:
            raise VerifyError(f"{label}: result types {[str(t) for t in got]} differ from "
                              f"the inferred {[str(t) for t in types]}")
        for r in op.results:
            if r.producer is not op:
                raise VerifyError(f"{label}: a result does not point back to its op")
            defined.add(id(r))
    for i, v in enumerate(graph.outputs):
        # ``defined`` holds the ids of this graph's live values: anything else, a value of
        # another graph or not a value at all, is missing from it
        if id(v) not in defined:
            raise VerifyError(f"{where}: output #{i} is not defined in the graph")
