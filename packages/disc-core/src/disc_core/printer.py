"""The text form of a graph: readable, diffable, and parsed back exactly by ``parser``.

    func @layernorm(%x: f32[B, S, 768]) -> (f32[B, S, 768]) {
      symbol S {multiple_of = 8}
      %0 = reduce(%x) {kind = "sum", axes = [2]} : f32[B, S]
      %1:2 = sort(%0) {dimension = 1} : (f32[B, S], i64[B, S])
      return %1#0
    }

Attributes equal to their declared default are omitted; the parser fills them back in.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .attrs import REQUIRED

if TYPE_CHECKING:
    from .ir import Graph, Op, SymbolInfo, Value

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def value_names(graph: Graph) -> dict[int, str]:
    """Stable names: inputs by their own (identifier) names, op results numbered."""
    names: dict[int, str] = {}
    used: set[str] = set()
    for i, v in enumerate(graph.inputs):
        name = v.name if v.name and _IDENT.fullmatch(v.name) and v.name not in used else None
        name = name or f"arg{i}"
        while name in used:
            name = f"{name}_"
        used.add(name)
        names[id(v)] = "%" + name
    n = 0
    for op in graph.ops:
        if len(op.results) == 1:
            names[id(op.results[0])] = f"%{n}"
        else:
            for k, r in enumerate(op.results):
                names[id(r)] = f"%{n}#{k}"
        n += 1
    return names


def format_attrs(op: Op) -> str:
    parts = []
    for key, spec in op.opdef.attrs.items():
        val = op.attrs.get(key)
        if val is None:
            continue
        if spec.default is not REQUIRED and spec.default is not None:
            if val == spec.kind.normalize(spec.default):
                continue
        parts.append(f"{key} = {spec.kind.format(val)}")
    return " {" + ", ".join(parts) + "}" if parts else ""


def format_symbol(info: SymbolInfo) -> str:
    fields = [(k, getattr(info, k)) for k in ("min", "max", "multiple_of")]
    body = ", ".join(f"{k} = {v}" for k, v in fields if v is not None)
    return f"symbol {info.name} {{{body}}}"


def print_graph(graph: Graph) -> str:
    names = value_names(graph)
    args = ", ".join(f"{names[id(v)]}: {v.type}" for v in graph.inputs)
    rets = ", ".join(str(v.type) for v in graph.outputs)
    lines = [f"func @{graph.name}({args}) -> ({rets}) {{"]
    for name in sorted(graph.symbols):
        if graph.symbols[name].has_hints:
            lines.append("  " + format_symbol(graph.symbols[name]))
    for n, op in enumerate(graph.ops):
        lhs = f"%{n}" if len(op.results) == 1 else f"%{n}:{len(op.results)}"
        operands = ", ".join(_ref(names, v) for v in op.operands)
        types = [str(r.type) for r in op.results]
        tys = types[0] if len(types) == 1 else "(" + ", ".join(types) + ")"
        lines.append(f"  {lhs} = {op.name}({operands}){format_attrs(op)} : {tys}")
    lines.append("  return " + ", ".join(_ref(names, v) for v in graph.outputs))
    lines.append("}")
    return "\n".join(lines) + "\n"


def _ref(names: dict[int, str], v: Value) -> str:
    try:
        return names[id(v)]
    except KeyError:
        raise ValueError(f"value {v!r} is not defined in this graph") from None
