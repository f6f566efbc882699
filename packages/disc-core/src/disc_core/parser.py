"""Parse the text form written by ``printer`` back into a verified graph.

One statement per line. Every op is rebuilt through its definition, so a parsed graph is
verified, and printed result types must equal the inferred ones (a hand-edited type that
disagrees with the shape rule is an error, not silently accepted).
"""

from __future__ import annotations

import base64
import re
from typing import Any

import numpy as np

from .dtypes import dtype_of
from .ir import Graph, SymbolInfo, TensorType, Value
from .opdef import DenseArray, VerifyError, get_op
from .symbolic import Expr, ExprParseError, parse_expr


class ParseError(ValueError):
    """The text is not a valid graph; the message gives the line and what was expected."""


_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_FLOAT = re.compile(r"-?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|inf|nan)(?![A-Za-z0-9_])")
_HEADER = re.compile(rf"func\s+@({_IDENT})\s*\((.*)\)\s*->\s*\((.*)\)\s*\{{\s*$")
_OPLINE = re.compile(rf"%(\d+)(?::(\d+))?\s*=\s*({_IDENT})\s*\((.*)$")
_SYMBOL = re.compile(rf"symbol\s+({_IDENT})\s*(\{{.*\}})?\s*$")


def parse_graph(text: str) -> Graph:
    lines = [(i + 1, ln.strip()) for i, ln in enumerate(text.splitlines())]
    lines = [(n, ln) for n, ln in lines if ln and not ln.startswith("//")]
    if not lines:
        raise ParseError("empty text: expected 'func @name(...) -> (...) {'")
    lineno, header = lines[0]
    m = _HEADER.match(header)
    if not m:
        raise ParseError(f"line {lineno}: expected 'func @name(%arg: type, ...) -> (types) {{'")
    graph = Graph(m.group(1))
    env: dict[str, Value] = {}
    for part in _split_top(m.group(2)):
        am = re.fullmatch(rf"%({_IDENT})\s*:\s*(.+)", part.strip())
        if not am:
            raise ParseError(f"line {lineno}: bad argument {part.strip()!r}, expected "
                             f"'%name: dtype[dims]'")
        name = am.group(1)
        if "%" + name in env:
            raise ParseError(f"line {lineno}: duplicate argument %{name}")
        v = Value(_parse_type(am.group(2), lineno), name=name)
        graph.inputs.append(v)
        env["%" + name] = v
    declared_out = [_parse_type(t, lineno) for t in _split_top(m.group(3))]

    closed = returned = False
    for lineno, ln in lines[1:]:
        if closed:
            raise ParseError(f"line {lineno}: text after the closing '}}'")
        if ln == "}":
            closed = True
            continue
        if returned:
            raise ParseError(f"line {lineno}: expected '}}' after return")
        if _is_return(ln):
            refs = ln[len("return"):].strip()
            graph.outputs = [_lookup(env, r, lineno) for r in _split_top(refs)]
            returned = True
            continue
        sm = _SYMBOL.match(ln)
        if sm:
            attrs = _parse_attr_dict(sm.group(2) or "{}", lineno)
            bad = set(attrs) - {"min", "max", "multiple_of"}
            if bad:
                raise ParseError(f"line {lineno}: unknown symbol hint(s) {sorted(bad)}; "
                                 f"expected min, max, multiple_of")
            graph.symbols[sm.group(1)] = SymbolInfo(sm.group(1), **{
                k: int(v) if not isinstance(v, Expr) else v.value for k, v in attrs.items()})
            continue
        _parse_op_line(graph, env, ln, lineno)
    if not returned:
        raise ParseError("missing 'return' statement")
    if not closed:
        raise ParseError("missing closing '}'")
    got = [v.type for v in graph.outputs]
    if got != declared_out:
        raise ParseError(f"return types {[str(t) for t in got]} differ from the declared "
                         f"{[str(t) for t in declared_out]}")
    try:
        graph.verify()
    except VerifyError as exc:
        raise ParseError(str(exc)) from None
    return graph


def _is_return(ln: str) -> bool:
    return ln == "return" or ln.startswith("return ") or ln.startswith("return%")


def _parse_op_line(graph: Graph, env: dict[str, Value], ln: str, lineno: int) -> None:
    m = _OPLINE.match(ln)
    if not m:
        raise ParseError(f"line {lineno}: expected '%N = op(%a, ...) {{attrs}} : type', "
                         f"got {ln!r}")
    num, nres, opname, rest = m.group(1), int(m.group(2) or 1), m.group(3), m.group(4)
    close = _matching(rest, 0, "(", ")", start_depth=1)
    if close < 0:
        raise ParseError(f"line {lineno}: unbalanced '(' in operand list")
    operands = [_lookup(env, r.strip(), lineno) for r in _split_top(rest[:close])]
    rest = rest[close + 1:].strip()
    attrs: dict[str, Any] = {}
    if rest.startswith("{"):
        end = _matching(rest, 0, "{", "}")
        if end < 0:
            raise ParseError(f"line {lineno}: unbalanced '{{' in attributes")
        attrs = _parse_attr_dict(rest[: end + 1], lineno)
        rest = rest[end + 1:].strip()
    if not rest.startswith(":"):
        raise ParseError(f"line {lineno}: expected ': result type(s)' after {opname}(...)")
    tys_text = rest[1:].strip()
    if tys_text.startswith("("):
        tys_text = tys_text[1:-1] if tys_text.endswith(")") else tys_text
    types = [_parse_type(t, lineno) for t in _split_top(tys_text)]
    try:
        op = get_op(opname).build(operands, attrs)
    except VerifyError as exc:
        raise ParseError(f"line {lineno}: {exc}") from None
    if len(op.results) != nres or [r.type for r in op.results] != types:
        raise ParseError(f"line {lineno}: {opname} infers {[str(r.type) for r in op.results]}, "
                         f"but the text says {[str(t) for t in types]}")
    graph.ops.append(op)
    if nres == 1:
        _define(env, f"%{num}", op.results[0], lineno)
    else:
        for k, r in enumerate(op.results):
            _define(env, f"%{num}#{k}", r, lineno)


def _define(env: dict[str, Value], name: str, v: Value, lineno: int) -> None:
    if name in env:
        raise ParseError(f"line {lineno}: {name} is defined twice")
    env[name] = v


def _lookup(env: dict[str, Value], ref: str, lineno: int) -> Value:
    if ref not in env:
        raise ParseError(f"line {lineno}: {ref or '(empty)'} is not defined before this use")
    return env[ref]


def _parse_type(text: str, lineno: int) -> TensorType:
    m = re.fullmatch(rf"\s*({_IDENT})\s*\[(.*)\]\s*", text)
    if not m:
        raise ParseError(f"line {lineno}: bad type {text.strip()!r}, expected dtype[dims]")
    try:
        dt = dtype_of(m.group(1))
        dims = [parse_expr(d) for d in _split_top(m.group(2))]
    except (ValueError, ExprParseError) as exc:
        raise ParseError(f"line {lineno}: bad type {text.strip()!r}: {exc}") from None
    return TensorType(dt, tuple(dims))


def _matching(text: str, pos: int, open_: str, close: str, start_depth: int = 0) -> int:
    """Index of the bracket closing the one at ``pos`` (or the implicit one), -1 if none."""
    depth = start_depth
    in_str = False
    i = pos
    while i < len(text):
        c = text[i]
        if in_str:
            if c == "\\":
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _split_top(text: str) -> list[str]:
    """Split at commas that are outside brackets and strings."""
    parts, depth, cur, in_str, i = [], 0, [], False, 0
    while i < len(text):
        c = text[i]
        if in_str:
            cur.append(c)
            if c == "\\" and i + 1 < len(text):
                cur.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            cur.append(c)
        elif c in "([{<":
            depth += 1
            cur.append(c)
        elif c in ")]}>":
            depth -= 1
            cur.append(c)
        elif c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    if "".join(cur).strip():
        parts.append("".join(cur))
    return [p for p in (s.strip() for s in parts)]


def _parse_attr_dict(text: str, lineno: int) -> dict[str, Any]:
    body = text.strip()[1:-1]
    out: dict[str, Any] = {}
    for item in _split_top(body):
        key, sep, val = item.partition("=")
        key = key.strip()
        if not sep or not re.fullmatch(_IDENT, key):
            raise ParseError(f"line {lineno}: bad attribute {item!r}, expected 'name = value'")
        if key in out:
            raise ParseError(f"line {lineno}: attribute {key} given twice")
        out[key] = _parse_value(val.strip(), lineno)
    return out


def _parse_value(text: str, lineno: int) -> Any:
    if text.startswith('"'):
        if len(text) < 2 or not text.endswith('"'):
            raise ParseError(f"line {lineno}: unterminated string {text!r}")
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    if text.startswith("["):
        if not text.endswith("]"):
            raise ParseError(f"line {lineno}: unbalanced list {text!r}")
        return [_parse_value(p, lineno) for p in _split_top(text[1:-1])]
    if text.startswith("dense<"):
        return _parse_dense(text, lineno)
    if text in ("true", "false"):
        return text == "true"
    if _FLOAT.fullmatch(text):
        return float(text)
    try:
        e = parse_expr(text)
    except ExprParseError as exc:
        raise ParseError(f"line {lineno}: bad attribute value {text!r}: {exc}") from None
    return e.value if e.is_const else e


def _parse_dense(text: str, lineno: int) -> DenseArray:
    if not text.endswith(">"):
        raise ParseError(f"line {lineno}: unterminated dense<...> literal")
    parts = _split_top(text[len("dense<"):-1])
    if len(parts) != 3:
        raise ParseError(f"line {lineno}: expected dense<dtype, [shape], values>")
    try:
        dt = dtype_of(parts[0])
    except ValueError as exc:
        raise ParseError(f"line {lineno}: {exc}") from None
    shape = tuple(int(s) for s in _split_top(parts[1].strip()[1:-1]))
    body = parts[2].strip()
    if body.startswith('"'):
        raw = base64.b64decode(body[1:-1])
        arr = np.frombuffer(raw, dtype=dt.np)
        count = int(np.prod(shape)) if shape else 1
        if arr.size != count:
            raise ParseError(f"line {lineno}: dense data has {arr.size} elements, shape "
                             f"{list(shape)} needs {count}")
        return DenseArray(arr.reshape(shape).copy())
    items = _split_top(body[1:-1])
    if dt.is_bool:
        vals: list[Any] = [x == "true" for x in items]
    elif dt.is_float:
        vals = [float(x) for x in items]
    else:
        vals = [int(x) for x in items]
    arr = np.array(vals, dtype=dt.np if not dt.is_float else np.float64).astype(dt.np)
    count = int(np.prod(shape)) if shape else 1
    if arr.size != count:
        raise ParseError(f"line {lineno}: dense literal has {arr.size} values, shape "
                         f"{list(shape)} needs {count}")
    return DenseArray(arr.reshape(shape))
