"""StableHLO module -> DISC graph.

Reads what jax writes (``jax.jit(f).lower(*args).compiler_ir("stablehlo")``,
``jax.export(...).mlir_module()``), a file (text or bytecode) or an ``ir.Module``.

``?`` dims of the entry function become symbols (``a<arg>_<dim>``, or the name jax gave
the dimension variable). StableHLO computes shapes with tensors (``get_dimension_size``,
arithmetic, ``concatenate``) that feed ``dynamic_reshape`` / ``dynamic_broadcast_in_dim``
/ ``dynamic_iota`` / ``real_dynamic_slice`` / ``dynamic_pad``; the importer evaluates those
small integer tensors symbolically as it goes, so the dynamic ops become DISC ops whose
shapes are dim expressions over the input symbols (``reshape`` to ``[B, 1]``), which is
what DISC compiles once for every shape.

Two dims that jax's ``shape_assertion`` custom calls declare equal (``args[1].shape[0] ==
B``), and the ``jax.global_constant`` name of a dimension variable passed to a called
function, name symbols: the import runs once to collect them and again with the names.
Every op with no mapping is listed, by name, in one :class:`UnsupportedStableHLOError`
before anything is built.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..builder import GraphBuilder
from ..dtypes import DType
from ..ir import Graph, Value
from ..symbolic import Expr, as_expr, floordiv, mod, parse_expr, smax, smin
from . import mapping
from .exporter import DIMS_ATTR
from .types import (
    DYNAMIC,
    StableHLOError,
    UnsupportedStableHLOError,
    dtype_of_element,
    hlo,
    ir,
    new_context,
)

__all__ = ["import_"]

_UNARY_IN = {v: k for k, v in mapping.UNARY.items()}
_BINARY_IN = {v: k for k, v in mapping.BINARY.items()}
_REDUCE_IN = {v: k for k, v in mapping.REDUCE_BODY.items()}

_KNOWN_LIMIT = 64  # longest integer tensor whose contents are tracked symbolically


def import_(module: Any, *, name: str | None = None) -> Graph:
    """A DISC graph computing the entry function (``main``, or the only public function)
    of a StableHLO ``module``: MLIR text, bytecode, a path, or an ``ir.Module`` (from any
    context; it is re-read through its text)."""
    ctx = new_context()
    with ctx, ir.Location.unknown():
        mod_ = _parse(module)
        entry = _entry(mod_)
        funcs = {str(ir.StringAttr(f.attributes["sym_name"]).value): f
                 for f in mod_.body.operations if f.operation.name == "func.func"}
        bad = _unsupported(funcs)
        if bad:
            raise UnsupportedStableHLOError(bad)
        first = _Importer(funcs, {}, name)
        first.run(entry)
        renames = first.renames()
        if not renames:
            graph = first.b.graph
        else:
            second = _Importer(funcs, renames, name)
            second.run(entry)
            graph = second.b.graph
    graph.verify()
    return graph


def _parse(module: Any) -> Any:
    if isinstance(module, Path):
        module = module.read_bytes()
    if isinstance(module, str) and "\n" not in module and module.endswith(
            (".mlir", ".mlirbc")) and Path(module).exists():
        module = Path(module).read_bytes()
    if hasattr(module, "operation") and not isinstance(module, (str, bytes)):
        module = module.operation.get_asm(enable_debug_info=False)
    try:
        return ir.Module.parse(module)
    except ir.MLIRError as exc:
        if isinstance(module, bytes):  # jax's serialized portable artifact
            try:
                return hlo.deserialize_portable_artifact(ir.Context.current, module)
            except Exception:  # noqa: BLE001 - report the parse error, the likelier cause
                pass
        raise StableHLOError(f"cannot parse the StableHLO module: {exc}") from None


def _entry(mod_: Any) -> Any:
    funcs = [f for f in mod_.body.operations if f.operation.name == "func.func"]
    for f in funcs:
        if ir.StringAttr(f.attributes["sym_name"]).value == "main":
            return f
    public = [f for f in funcs if "sym_visibility" not in f.attributes
              or ir.StringAttr(f.attributes["sym_visibility"]).value == "public"]
    if len(public) != 1:
        raise StableHLOError(f"no entry function: expected @main or one public function, "
                             f"found {[str(f.attributes['sym_name']) for f in funcs]}")
    return public[0]


def _op_key(op: Any) -> str:
    name = op.operation.name
    if name == "stablehlo.custom_call":
        target = ir.StringAttr(op.attributes["call_target_name"]).value
        return f"stablehlo.custom_call @{target}"
    return name


def _unsupported(funcs: dict[str, Any]) -> dict[str, str]:
    """Every op in the functions (not inside reduction bodies) with no import."""
    out: dict[str, str] = {}
    for f in funcs.values():
        for op in f.regions[0].blocks[0].operations:
            key = _op_key(op)
            if key not in _HANDLED:
                out[key] = "no DISC mapping"
    return out


class _Importer:
    """One import pass: MLIR values -> DISC values, plus symbolic contents of shape
    tensors."""

    def __init__(self, funcs: dict[str, Any], renames: dict[str, str], name: str | None):
        self.funcs = funcs
        self.rename = renames
        self.name = name
        self.b = GraphBuilder(name or "main")
        self.vals: dict[Any, Value] = {}
        #: symbolic contents (flattened) of small integer tensors
        self.known: dict[Any, list[Expr]] = {}
        #: (lhs, rhs) of rank-0 EQ comparisons between known scalars
        self.preds: dict[Any, tuple[Expr, Expr]] = {}
        self.equal: list[tuple[Expr, Expr]] = []
        self.named: list[tuple[Expr, str]] = []
        self.fresh = 0

    # -- driver ------------------------------------------------------------------------
    def run(self, entry: Any) -> None:
        block = entry.regions[0].blocks[0]
        arg_attrs = entry.attributes["arg_attrs"] if "arg_attrs" in entry.attributes else None
        for i, arg in enumerate(block.arguments):
            names = _dim_names(arg_attrs, i)
            t = arg.type
            dt = dtype_of_element(ir.RankedTensorType(t).element_type, f"argument #{i}")
            shape = []
            for j, d in enumerate(ir.RankedTensorType(t).shape):
                if d == DYNAMIC:
                    recorded = _recorded_dim(names[j]) if names else None
                    if recorded is not None and not recorded.is_symbol:
                        shape.append(recorded.subs({k: Expr.sym(v)
                                                    for k, v in self.rename.items()}))
                        continue
                    sym = recorded.symbol_name if recorded is not None else f"a{i}_{j}"
                    shape.append(Expr.sym(self.rename.get(sym, sym)))
                else:
                    shape.append(Expr.const(d))
            v = self.b.input(f"arg{i}", dt, shape)
            self.vals[arg] = v
        self.b.graph.outputs = self.body(block)

    def body(self, block: Any) -> list[Value]:
        for op in block.operations:
            key = _op_key(op)
            if key == "func.return":
                return [self.vals[o] for o in op.operands]
            handler = _HANDLED[key]
            outs = handler(self, op)
            if outs is None:
                continue
            for r, v in zip(op.results, outs):
                self._check(op, r, v)
                self.vals[r] = v
        raise StableHLOError("function without func.return")

    def _check(self, op: Any, r: Any, v: Value) -> None:
        t = ir.RankedTensorType(r.type)
        dt = dtype_of_element(t.element_type, op.operation.name)
        if dt is not v.dtype or len(t.shape) != v.rank:
            raise StableHLOError(f"{op.operation.name}: DISC infers {v.type}, the module "
                                 f"says {t}")

    def renames(self) -> dict[str, str]:
        """Symbol renames from jax's dimension-variable names and shape assertions."""
        parent: dict[str, str] = {}

        def find(s: str) -> str:
            while parent.get(s, s) != s:
                s = parent[s]
            return s

        for a, b in self.equal:
            if a.is_symbol and b.is_symbol:
                ra, rb = find(a.symbol_name), find(b.symbol_name)
                if ra != rb:
                    parent[max(ra, rb)] = min(ra, rb)
        out: dict[str, str] = {}
        syms = {s for v in self.b.graph.inputs for d in v.shape for s in d.free_symbols()}
        for s in syms:
            root = find(s)
            if root != s:
                out[s] = root
        for e, label in self.named:
            if e.is_symbol and label.isidentifier():
                root = find(e.symbol_name)
                for s in syms | {root}:
                    if find(s) == root:
                        out[s] = label
        return {k: v for k, v in out.items() if k != v}

    # -- helpers -----------------------------------------------------------------------
    def v(self, op: Any, i: int) -> Value:
        return self.vals[op.operands[i]]

    def rtype(self, op: Any, i: int = 0) -> tuple[DType, list[int]]:
        t = ir.RankedTensorType(op.results[i].type)
        return dtype_of_element(t.element_type, op.operation.name), list(t.shape)

    def static_shape(self, op: Any, what: str) -> list[int]:
        _, shape = self.rtype(op)
        if DYNAMIC in shape:
            raise StableHLOError(f"{op.operation.name}: {what} has a dynamic result type")
        return shape

    def known_of(self, op: Any, i: int, what: str) -> list[Expr]:
        got = self.known.get(op.operands[i])
        if got is None:
            raise StableHLOError(f"{op.operation.name}: the {what} operand is not computable "
                                 "from the input dims and constants, so DISC cannot name the "
                                 "result's dims")
        return got

    def ints(self, op: Any, attr: str) -> list[int]:
        return [int(x) for x in ir.DenseI64ArrayAttr(op.attributes[attr])]

    def int_attr(self, op: Any, attr: str) -> int:
        return int(ir.IntegerAttr(op.attributes[attr]).value)

    def add(self, name: str, *operands: Value, **attrs: Any) -> Any:
        return self.b.op(name, *operands, **attrs)

    def cast_to(self, v: Value, op: Any, i: int = 0) -> Value:
        dt, _ = self.rtype(op, i)
        return self.b.cast(v, dt)

    def note(self, op: Any, values: list[Expr] | None) -> None:
        if values is not None and len(values) <= _KNOWN_LIMIT:
            self.known[op.results[0]] = values

    def pointwise(self, op: Any, fn: Callable[..., Expr]) -> None:
        args = [self.known.get(o) for o in op.operands]
        if any(a is None for a in args):
            return
        n = max(len(a) for a in args)  # type: ignore[arg-type]
        if any(len(a) not in (1, n) for a in args):  # type: ignore[arg-type]
            return
        cols = [a * n if len(a) == 1 else a for a in args]  # type: ignore[operator]
        try:
            self.note(op, [fn(*xs) for xs in zip(*cols)])
        except (ZeroDivisionError, ValueError):
            return


def _recorded_dim(text: str) -> Expr | None:
    """A dim as DISC's export recorded it (a symbol or an expression of symbols)."""
    try:
        e = parse_expr(text)
    except ValueError:
        return None
    return None if e.is_const else e


def _dim_names(arg_attrs: Any, i: int) -> list[str] | None:
    """The dim names DISC's export recorded on argument ``i`` (``disc.dims``), if any."""
    if arg_attrs is None:
        return None
    attrs = ir.DictAttr(ir.ArrayAttr(arg_attrs)[i])
    if DIMS_ATTR not in attrs:
        return None
    return [ir.StringAttr(a).value for a in ir.ArrayAttr(attrs[DIMS_ATTR])]


# -- op handlers ---------------------------------------------------------------------------

def _constant(self: _Importer, op: Any) -> list[Value]:
    attr = ir.DenseElementsAttr(op.attributes["value"])
    dt, shape = self.rtype(op)
    if attr.is_splat:
        item = attr.get_splat_value()
        scalar = _attr_scalar(item, dt)
        arr = np.full(shape, scalar, dtype=dt.np)
    elif dt is DType.BF16:
        arr = _bf16_from_text(str(attr), shape)
    else:
        arr = np.array(attr).astype(dt.np).reshape(shape)
    if dt.is_int and arr.size <= _KNOWN_LIMIT and arr.ndim <= 1:
        self.known[op.results[0]] = [Expr.const(int(x)) for x in arr.reshape(-1)]
    return [self.b.constant(arr, dt)]


def _bf16_from_text(text: str, shape: list[int]) -> np.ndarray:
    """A bf16 dense attribute's values: the bindings expose no element access or buffer
    for bf16, so they are read from the attribute's own printed form (a list of decimal
    numbers, 0x bit patterns for NaN and infinities, or one hex blob of raw data)."""
    import re

    body = text[text.index("<") + 1:text.rindex(">")]
    body = body[:body.rindex(">")] if body.count(">") else body
    body = body.split(" : ")[0].strip()
    if body.startswith('"0x'):
        raw = bytes.fromhex(body[3:-1])
        return np.frombuffer(raw, np.uint16).view(DType.BF16.np).reshape(shape).copy()
    vals = []
    for tok in re.split(r"[\[\],\s]+", body):
        if not tok:
            continue
        if tok.lower().startswith("0x"):
            vals.append(np.array(int(tok, 16), np.uint16).view(DType.BF16.np))
        else:
            vals.append(np.array(float(tok)).astype(DType.BF16.np))
    return np.asarray(vals, DType.BF16.np).reshape(shape)


def _attr_scalar(item: Any, dt: DType) -> Any:
    if dt.is_float:
        return ir.FloatAttr(item).value
    if dt.is_bool:
        return bool(ir.IntegerAttr(item).value)
    return ir.IntegerAttr(item).value


def _unary(self: _Importer, op: Any) -> list[Value]:
    name = _UNARY_IN[op.operation.name]
    out = self.add(name, self.v(op, 0))
    if name == "neg":
        self.pointwise(op, lambda a: -a)
    return [out]


def _binary(self: _Importer, op: Any) -> list[Value]:
    name = _BINARY_IN[op.operation.name]
    out = self.add(name, self.v(op, 0), self.v(op, 1))
    fns: dict[str, Callable[..., Expr]] = {
        "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "div": _floordiv, "rem": _mod, "max": lambda a, b: smax(a, b),
        "min": lambda a, b: smin(a, b)}
    if name in fns and self.v(op, 0).dtype.is_int:
        self.pointwise(op, fns[name])
    return [out]


def _mod_atom(e: Expr, b: Expr) -> Any:
    """The ``mod(x, b)`` atom ``e`` is, or None."""
    if len(e.terms) == 1:
        ((mono, coeff),) = e.terms
        if coeff == 1 and len(mono) == 1 and getattr(mono[0], "fn", None) == "mod" \
                and mono[0].args[1] == b:
            return mono[0]
    return None


def _mod(a: Expr, b: Expr) -> Expr:
    """``a rem b`` of sizes, undoing the export's floor-division idiom: ``mod(a, b)`` and
    ``mod(a, b) + b`` both reduce to ``mod(a, b)`` (remainders of sizes are >= 0)."""
    for x in (a, a - b):
        if _mod_atom(x, b) is not None:
            return x
    return mod(a, b)


def _floordiv(a: Expr, b: Expr) -> Expr:
    """``a / b`` of sizes (truncation is floor for them); ``(x - mod(x, b)) / b`` is
    ``floordiv(x, b)``, the export's idiom."""
    for mono, coeff in a.terms:
        if coeff == -1 and len(mono) == 1:
            atom = mono[0]
            if getattr(atom, "fn", None) == "mod" and atom.args[1] == b \
                    and a + Expr.from_atom(atom) == atom.args[0]:
                return floordiv(atom.args[0], b)
    return floordiv(a, b)


def _compare(self: _Importer, op: Any) -> list[Value]:
    direction = str(hlo.ComparisonDirectionAttr(op.attributes["comparison_direction"]).value)
    if "compare_type" in op.attributes:
        ctype = str(hlo.ComparisonTypeAttr(op.attributes["compare_type"]).value)
        if ctype == "TOTALORDER":
            raise StableHLOError("stablehlo.compare with compare_type TOTALORDER has no DISC "
                                 "mapping (DISC compares floats as IEEE does)")
    a, b = self.known.get(op.operands[0]), self.known.get(op.operands[1])
    if direction == "EQ" and a is not None and b is not None and len(a) == len(b) == 1:
        self.preds[op.results[0]] = (a[0], b[0])
    return [self.add("compare", self.v(op, 0), self.v(op, 1), direction=direction.lower())]


def _select(self: _Importer, op: Any) -> list[Value]:
    return [self.add("select", self.v(op, 0), self.v(op, 1), self.v(op, 2))]


def _clamp(self: _Importer, op: Any) -> list[Value]:
    return [self.add("clamp", self.v(op, 0), self.v(op, 1), self.v(op, 2))]


def _convert(self: _Importer, op: Any) -> list[Value]:
    out = self.cast_to(self.v(op, 0), op)
    if out.dtype.is_int:
        self.note(op, self.known.get(op.operands[0]))
    return [out]


def _transpose(self: _Importer, op: Any) -> list[Value]:
    return [self.add("transpose", self.v(op, 0), permutation=self.ints(op, "permutation"))]


def _reverse(self: _Importer, op: Any) -> list[Value]:
    return [self.add("reverse", self.v(op, 0), dimensions=self.ints(op, "dimensions"))]


def _concatenate(self: _Importer, op: Any) -> list[Value]:
    dim = self.int_attr(op, "dimension")
    parts = [self.known.get(o) for o in op.operands]
    if dim == 0 and all(p is not None for p in parts):
        self.note(op, [e for p in parts for e in p])  # type: ignore[union-attr]
    return [self.add("concatenate", *[self.vals[o] for o in op.operands], dimension=dim)]


def _iota(self: _Importer, op: Any) -> list[Value]:
    dt, shape = self.rtype(op)
    return [self.add("iota", shape=self.static_shape(op, "iota"),
                     dimension=self.int_attr(op, "iota_dimension"), dtype=dt)]


def _dynamic_iota(self: _Importer, op: Any) -> list[Value]:
    dt, _ = self.rtype(op)
    shape = self.known_of(op, 0, "output_shape")
    return [self.add("iota", shape=shape, dimension=self.int_attr(op, "iota_dimension"),
                     dtype=dt)]


def _get_dimension_size(self: _Importer, op: Any) -> list[Value]:
    x = self.v(op, 0)
    dim = self.int_attr(op, "dimension")
    self.note(op, [x.shape[dim]])
    size = self.add("get_dimension_size", x, dimension=dim)
    return [self.cast_to(size, op)]


def _reshape(self: _Importer, op: Any) -> list[Value]:
    x = self.v(op, 0)
    shape = self.static_shape(op, "reshape")
    if x.dtype.is_int and int(np.prod(shape)) <= _KNOWN_LIMIT:
        self.note(op, self.known.get(op.operands[0]))
    return [self.b.reshape_to(x, shape)]


def _dynamic_reshape(self: _Importer, op: Any) -> list[Value]:
    x = self.v(op, 0)
    shape = self.known.get(op.operands[1])
    if shape is None:
        return [self.add("dynamic_reshape", x, self.v(op, 1),
                         shape=_fresh(self, op))]
    if x.dtype.is_int and len(shape) <= 1:
        self.note(op, self.known.get(op.operands[0]))
    return [self.b.reshape_to(x, shape)]


def _fresh(self: _Importer, op: Any) -> list[Expr]:
    _, shape = self.rtype(op)
    out = []
    for d in shape:
        if d == DYNAMIC:
            self.fresh += 1
            out.append(Expr.sym(f"r{self.fresh}"))
        else:
            out.append(Expr.const(d))
    return out


def _broadcast_known(self: _Importer, op: Any, shape: Sequence[Expr]) -> None:
    src = self.known.get(op.operands[0])
    if src is not None and len(src) == 1 and len(shape) <= 1 and all(
            as_expr(d).is_const for d in shape):
        n = as_expr(shape[0]).value if shape else 1
        self.note(op, src * n)


def _broadcast_in_dim(self: _Importer, op: Any) -> list[Value]:
    shape = self.static_shape(op, "broadcast_in_dim")
    _broadcast_known(self, op, [Expr.const(d) for d in shape])
    return [self.add("broadcast_in_dim", self.v(op, 0), shape=shape,
                     broadcast_dimensions=self.ints(op, "broadcast_dimensions"))]


def _dynamic_broadcast_in_dim(self: _Importer, op: Any) -> list[Value]:
    dims = self.ints(op, "broadcast_dimensions")
    shape = self.known.get(op.operands[1])
    if shape is None:
        return [self.add("dynamic_broadcast_in_dim", self.v(op, 0), self.v(op, 1),
                         shape=_fresh(self, op), broadcast_dimensions=dims)]
    _broadcast_known(self, op, shape)
    return [self.add("broadcast_in_dim", self.v(op, 0), shape=shape,
                     broadcast_dimensions=dims)]


def _broadcast(self: _Importer, op: Any) -> list[Value]:
    x = self.v(op, 0)
    sizes = self.ints(op, "broadcast_sizes")
    return [self.add("broadcast_in_dim", x, shape=[*sizes, *x.shape],
                     broadcast_dimensions=list(range(len(sizes), len(sizes) + x.rank)))]


def _slice(self: _Importer, op: Any) -> list[Value]:
    start, limit = self.ints(op, "start_indices"), self.ints(op, "limit_indices")
    strides = self.ints(op, "strides")
    src = self.known.get(op.operands[0])
    if src is not None and len(start) == 1:
        self.note(op, src[start[0]:limit[0]:strides[0]])
    return [self.add("slice", self.v(op, 0), start=start, limit=limit, stride=strides)]


def _parts(self: _Importer, v: Any) -> list[tuple[Value | None, Expr]] | None:
    """The elements of a 1-D index tensor as (run-time scalar or None) + dim expression:
    what the export of a dynamic_slice with symbolic sizes builds (clamped start, start +
    size)."""
    if v in self.known:
        return [(None, e) for e in self.known[v]]
    owner = v.owner
    name = owner.name if hasattr(owner, "name") else ""
    if name == "stablehlo.concatenate":
        out: list[tuple[Value | None, Expr]] = []
        for o in owner.operands:
            p = _parts(self, o)
            if p is None:
                return None
            out += p
        return out
    if name == "stablehlo.reshape":
        return _parts(self, owner.operands[0])
    if name == "stablehlo.add":
        a, b = (_parts(self, o) for o in owner.operands)
        if a is not None and b is not None and len(a) == len(b) == 1:
            (va, ea), (vb, eb) = a[0], b[0]
            if va is None or vb is None:
                return [(va if vb is None else vb, ea + eb)]
    d = self.vals.get(v)
    if d is not None and d.rank == 0 and d.dtype.is_int:
        return [(d, Expr.const(0))]
    return None


def _real_dynamic_slice(self: _Importer, op: Any) -> list[Value]:
    if op.operands[1] not in self.known:
        starts, limits = _parts(self, op.operands[1]), _parts(self, op.operands[2])
        strides = self.known.get(op.operands[3])
        if starts is not None and limits is not None and strides is not None and all(
                s.is_const and s.value == 1 for s in strides) and all(
                a[0] is b[0] for a, b in zip(starts, limits)):
            # a run-time start and a known size: DISC's dynamic_slice (its clamping is a
            # no-op on starts that are in bounds, which real_dynamic_slice requires)
            idx = [v if v is not None and e == 0 else self.b.size_value(e) if v is None
                   else self.add("add", v, self.b.size_value(e, v.dtype))
                   for v, e in starts]
            return [self.add("dynamic_slice", self.v(op, 0), *idx,
                             sizes=[b[1] - a[1] for a, b in zip(starts, limits)])]
    start = self.known_of(op, 1, "start_indices")
    limit = self.known_of(op, 2, "limit_indices")
    strides = self.known_of(op, 3, "strides")
    if not all(s.is_const for s in strides):
        raise StableHLOError("stablehlo.real_dynamic_slice with symbolic strides has no DISC "
                             "mapping")
    return [self.add("slice", self.v(op, 0), start=start, limit=limit,
                     stride=[s.value for s in strides])]


def _dynamic_slice(self: _Importer, op: Any) -> list[Value]:
    starts = [self.vals[o] for o in op.operands[1:]]
    return [self.add("dynamic_slice", self.v(op, 0), *starts,
                     sizes=self.ints(op, "slice_sizes"))]


def _dynamic_update_slice(self: _Importer, op: Any) -> list[Value]:
    starts = [self.vals[o] for o in op.operands[2:]]
    return [self.add("dynamic_update_slice", self.v(op, 0), self.v(op, 1), *starts)]


def _pad(self: _Importer, op: Any) -> list[Value]:
    return [self.add("pad", self.v(op, 0), self.v(op, 1),
                     low=self.ints(op, "edge_padding_low"),
                     high=self.ints(op, "edge_padding_high"),
                     interior=self.ints(op, "interior_padding"))]


def _dynamic_pad(self: _Importer, op: Any) -> list[Value]:
    interior = self.known_of(op, 4, "interior_padding")
    if not all(s.is_const for s in interior):
        raise StableHLOError("stablehlo.dynamic_pad with symbolic interior padding has no "
                             "DISC mapping")
    return [self.add("pad", self.v(op, 0), self.v(op, 1),
                     low=self.known_of(op, 2, "edge_padding_low"),
                     high=self.known_of(op, 3, "edge_padding_high"),
                     interior=[s.value for s in interior])]


def _iota_along(v: Value, axis: int) -> bool:
    """Is ``v`` an iota (or a convert of one) counting along ``axis``?"""
    p = v.producer
    while p is not None and p.name == "convert":
        p = p.operands[0].producer
    return p is not None and p.name == "iota" and p.attrs["dimension"] == axis


def _origin(v: Any) -> Any:
    """The value a comparator compares, seen through jax's canonicalizing selects
    (``select(x == 0, 0, x)``, ``select(x != x, nan, x)``: -0.0 as 0.0, one NaN), which
    leave the order DISC uses (NaN largest, -0.0 == 0.0) unchanged."""
    while hasattr(v.owner, "name") and v.owner.name == "stablehlo.select":
        v = v.owner.operands[2]
    return v


def _direction(block: Any) -> str | None:
    """The direction (GT or LT) of the comparison between the first two block arguments
    (the values) in a comparator or arg-reduction body; None if there is not exactly one."""
    a, b = block.arguments[0], block.arguments[1]
    if len(block.arguments) == 4 and block.owner.operation.name == "stablehlo.reduce":
        b = block.arguments[2]  # reduce bodies take (a_val, a_idx, b_val, b_idx)
    found = set()
    for op in block.operations:
        if op.operation.name == "stablehlo.compare":
            ops = [_origin(o) for o in op.operands]
            d = str(hlo.ComparisonDirectionAttr(op.attributes["comparison_direction"]).value)
            if ops == [a, b] and d in ("GT", "LT", "GE", "LE"):
                found.add(d[0] + "T")
            elif ops == [b, a] and d in ("GT", "LT", "GE", "LE"):
                found.add("LT" if d[0] == "G" else "GT")
    return found.pop() if len(found) == 1 else None


def _arg_reduce(self: _Importer, op: Any) -> list[Value]:
    """A two-operand reduce of (x, iota along the axis) whose body compares the values
    one way: argmax (GT) / argmin (LT), as jax and DISC's export write them. The body is
    recognized by that comparison; DISC's argmax semantics (first index among ties, NaN
    wins) are what both writers implement."""
    axes = self.ints(op, "dimensions")
    x, idx = self.v(op, 0), self.v(op, 1)
    direction = _direction(op.regions[0].blocks[0])
    if len(axes) != 1 or not _iota_along(idx, axes[0]) or direction is None:
        raise StableHLOError("stablehlo.reduce over 2 operands: DISC maps only the argmax / "
                             "argmin form (values, iota along the one reduced axis, a body "
                             "comparing the values GT or LT)")
    name = "argmax" if direction == "GT" else "argmin"
    out = self.add(name, x, axis=axes[0], index_dtype=idx.dtype)
    vals = self.add("reduce", x, kind="max" if name == "argmax" else "min", axes=axes)
    return [vals, out]


def _reduce(self: _Importer, op: Any) -> list[Value]:
    n = len(op.operands) // 2
    if n == 2:
        return _arg_reduce(self, op)
    if n != 1:
        raise StableHLOError(f"stablehlo.reduce over {n} operands has no DISC mapping")
    body = list(op.regions[0].blocks[0].operations)
    if len(body) != 2 or body[0].operation.name not in _REDUCE_IN or \
            body[1].operation.name != "stablehlo.return":
        names = [b.operation.name for b in body]
        raise StableHLOError(f"stablehlo.reduce with body {names}: DISC maps only one-op "
                             f"bodies ({', '.join(_REDUCE_IN)})")
    x, init = self.v(op, 0), self.v(op, 1)
    kind = _REDUCE_IN[body[0].operation.name]
    if x.dtype.is_bool and kind in ("sum", "prod"):
        raise StableHLOError(f"stablehlo.reduce: {kind} of booleans has no DISC mapping")
    axes = self.ints(op, "dimensions")
    out = self.add("reduce", x, kind=kind, axes=axes)
    return [_fold_init(self, out, init, kind, x.dtype)]


def _fold_init(self: _Importer, out: Value, init: Value, kind: str, dt: DType) -> Value:
    """Combine the reduction with its init value unless the init is the kind's identity
    (DISC's reduce has the identity built in)."""
    producer = init.producer
    if producer is not None and producer.name == "constant":
        val = producer.attrs["value"].array
        identity = {"sum": 0, "or": 0, "prod": 1, "and": 1}.get(kind)
        if identity is not None and np.all(val == identity):
            return out
        if kind in ("max", "min") and dt.is_float and np.all(
                val == (-np.inf if kind == "max" else np.inf)):
            return out
        if kind in ("max", "min") and dt.is_bool and bool(val) == (kind == "min"):
            return out
        if kind in ("max", "min") and dt.is_int:
            info = np.iinfo(dt.np)
            if int(val) == (info.min if kind == "max" else info.max):
                return out
    combine = {"sum": "add", "prod": "mul", "max": "max", "min": "min", "and": "and",
               "or": "or"}[kind]
    full = self.add("broadcast_in_dim", init, shape=list(out.shape), broadcast_dimensions=[])
    return self.add(combine, out, full)


def _sort(self: _Importer, op: Any) -> list[Value]:
    """stablehlo.sort of (x) or (x, iota along the dimension) with a comparator that
    compares the values one way: DISC's stable sort, ascending for LT, descending for GT.
    (NaN placement follows DISC's rule: NaN is the largest value.)"""
    dim = self.int_attr(op, "dimension")
    block = op.regions[0].blocks[0]
    direction = _direction(block)
    n = len(op.operands)
    if direction is None or n > 2 or (n == 2 and not _iota_along(self.v(op, 1), dim)):
        raise StableHLOError("stablehlo.sort: DISC maps only sorts of one tensor (plus an "
                             "iota along the sorted dim) whose comparator compares the "
                             "values GT or LT")
    values, indices = self.add("sort", self.v(op, 0), dimension=dim,
                               descending=direction == "GT")
    return [values] if n == 1 else [values, self.b.cast(indices, self.v(op, 1).dtype)]


def _reduce_window(self: _Importer, op: Any) -> list[Value]:
    """The running-reduction form of reduce_window (a window spanning the whole axis,
    padded low by its size - 1): DISC's ``cumulative``."""
    x = self.v(op, 0)
    window = self.ints(op, "window_dimensions")
    def opt(name: str) -> list[int]:
        return self.ints(op, name) if name in op.attributes else [1] * x.rank
    pad = (np.array(ir.DenseIntElementsAttr(op.attributes["padding"])).reshape(-1, 2)
           if "padding" in op.attributes else np.zeros((x.rank, 2), np.int64))
    body = list(op.regions[0].blocks[0].operations)
    axes = [k for k, w in enumerate(window) if w != 1]
    ok = (len(op.operands) == 2 and len(axes) == 1 and len(body) == 2
          and body[0].operation.name in _REDUCE_IN
          and all(v == 1 for n in ("window_strides", "base_dilations", "window_dilations")
                  for v in opt(n)))
    if ok:
        k = axes[0]
        size = x.shape[k]
        ok = size.is_const and window[k] == size.value and pad[k, 0] == size.value - 1 \
            and not pad[k, 1] and not np.delete(pad, k, axis=0).any()
    if not ok:
        raise StableHLOError("stablehlo.reduce_window: DISC maps only the cumulative form "
                             "(one operand, a window over one whole static axis padded low "
                             "by its size - 1, unit strides and dilations, a one-op body)")
    kind = _REDUCE_IN[body[0].operation.name]
    out = self.add("cumulative", x, kind=kind, axis=axes[0])
    return [_fold_init(self, out, self.v(op, 1), kind, x.dtype)]


def _index_operand(self: _Importer, op: Any, i: int, ivd: int) -> Value:
    """The index operand with its index-vector dim dropped (jax writes a trailing size-1
    dim; DISC's index operands hold one index per element)."""
    idx = self.v(op, i)
    if ivd == idx.rank:
        return idx
    if ivd != idx.rank - 1 or idx.shape[ivd] != Expr.const(1):
        raise StableHLOError(f"{op.operation.name}: index_vector_dim {ivd} of an index "
                             f"tensor {idx.type}: DISC maps one index per element (a "
                             "trailing size-1 index vector or none)")
    return self.b.reshape_to(idx, list(idx.shape[:-1]))


def _gather_axis(op: Any, start_index_map: list[int], collapsed: list[int]) -> int:
    if len(start_index_map) != 1 or collapsed != start_index_map:
        raise StableHLOError(f"{op.operation.name} indexing dims {start_index_map} "
                             f"(collapsed {collapsed}): DISC maps one collapsed index dim")
    return start_index_map[0]


def _gather_offsets(axis: int, b: int, q: int, r: int) -> list[int]:
    """Where DISC's gather(axis, batch_dims=b) puts the operand's untouched dims."""
    return list(range(b, axis)) + list(range(axis + q - b, axis + q - b + r - axis - 1))


def _window_gather(self: _Importer, op: Any, dn: Any, operand: Value) -> Value | None:
    """A gather of one window at a start vector (every dim an offset dim, the index
    tensor one vector): DISC's ``dynamic_slice``, which clamps the start the same way.
    This is how the export writes a dynamic_slice with symbolic sizes."""
    r = operand.rank
    vec = self.v(op, 1)
    if not (vec.rank == 1 and dn.index_vector_dim == 0 and list(dn.offset_dims) == list(
            range(r)) and not list(dn.collapsed_slice_dims) and list(dn.start_index_map) ==
            list(range(r)) and not list(dn.operand_batching_dims)
            and vec.shape[0] == Expr.const(r)):
        return None
    if op.operation.name == "stablehlo.dynamic_gather":
        sizes = self.known_of(op, 2, "slice_sizes")
    else:
        sizes = [Expr.const(d) for d in self.ints(op, "slice_sizes")]
    parts = _parts(self, op.operands[1])
    if parts is not None and len(parts) == r:
        starts = [v if v is not None and e == 0 else self.b.size_value(e) if v is None
                  else self.add("add", v, self.b.size_value(e, v.dtype)) for v, e in parts]
    else:
        starts = [self.b.reshape_to(self.add("slice", vec, start=[k], limit=[k + 1]), [])
                  for k in range(r)]
    return self.add("dynamic_slice", operand, *starts, sizes=sizes)


def _gather(self: _Importer, op: Any) -> list[Value]:
    dn = hlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
    operand = self.v(op, 0)
    window = _window_gather(self, op, dn, operand)
    if window is not None:
        return [window]
    axis = _gather_axis(op, list(dn.start_index_map), list(dn.collapsed_slice_dims))
    idx = _index_operand(self, op, 1, dn.index_vector_dim)
    r, q = operand.rank, idx.rank
    ob, ib, offs = (list(dn.operand_batching_dims), list(dn.start_indices_batching_dims),
                    list(dn.offset_dims))
    others = [k for k in range(r) if k != axis]
    if op.operation.name == "stablehlo.dynamic_gather":
        sizes = self.known_of(op, 2, "slice_sizes")
    else:
        sizes = [Expr.const(d) for d in self.ints(op, "slice_sizes")]
    want = [Expr.const(1) if k == axis or k in ob else d for k, d in enumerate(operand.shape)]
    if len(sizes) != r or any(a != w and not (a.is_const and w.is_const is False)
                              for a, w in zip(sizes, want)):
        raise StableHLOError(f"{op.operation.name} with slice_sizes {[str(d) for d in sizes]}:"
                             " DISC maps slices of one element along the indexed and batching "
                             f"dims and whole dims elsewhere ({[str(d) for d in want]})")
    if ob == ib == others and not offs and q == r:
        return [self.add("gather_elements", operand, idx, axis=axis)]
    b = len(ob)
    if ob == ib == list(range(b)) and offs == _gather_offsets(axis, b, q, r) and b <= axis:
        return [self.add("gather", operand, idx, axis=axis, batch_dims=b)]
    raise StableHLOError(f"stablehlo.gather with offset_dims {offs}, operand_batching_dims "
                         f"{ob}, start_indices_batching_dims {ib}: DISC maps the take form "
                         "(gather) and the take-along-axis form (gather_elements)")


def _scatter(self: _Importer, op: Any) -> list[Value]:
    """stablehlo.scatter with an add body. StableHLO drops an update whose index is out of
    bounds and DISC clamps it, so updates at such indices are zeroed first: the same sum."""
    body = list(op.regions[0].blocks[0].operations)
    if len(op.operands) != 3 or len(body) != 2 or body[0].operation.name != "stablehlo.add":
        raise StableHLOError("stablehlo.scatter: DISC maps only one-operand scatters with an "
                             "add body (scatter_add, scatter_elements_add)")
    dn = hlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
    axis = _gather_axis(op, list(dn.scattered_dims_to_operand_dims),
                        list(dn.inserted_window_dims))
    operand, updates = self.v(op, 0), self.v(op, 2)
    idx = _index_operand(self, op, 1, dn.index_vector_dim)
    r, q = operand.rank, idx.rank
    ob, ib, win = (list(dn.input_batching_dims), list(dn.scatter_indices_batching_dims),
                   list(dn.update_window_dims))
    others = [k for k in range(r) if k != axis]
    b = len(ob)
    if ob == ib == others and not win and q == r:
        name, idx_dims = "scatter_elements_add", list(range(q))
    elif ob == ib == list(range(b)) and win == _gather_offsets(axis, b, q, r) and b <= axis:
        name = "scatter_add"
        idx_dims = list(range(b)) + list(range(axis, axis + q - b))
    else:
        raise StableHLOError(f"stablehlo.scatter with update_window_dims {win}, "
                             f"input_batching_dims {ob}: DISC maps the forms of scatter_add "
                             "and scatter_elements_add")
    zero_i = self.b.constant(0, idx.dtype)
    size = self.b.cast(self.add("get_dimension_size", operand, dimension=axis), idx.dtype)
    ok = self.add("and", self.add("compare", idx, self.b.broadcast_to(zero_i, idx.shape),
                                  direction="ge"),
                  self.add("compare", idx, self.b.broadcast_to(size, idx.shape),
                           direction="lt"))
    mask = self.add("broadcast_in_dim", ok, shape=list(updates.shape),
                    broadcast_dimensions=idx_dims)
    zeros = self.b.broadcast_to(self.b.constant(0, updates.dtype), updates.shape)
    kept = self.add("select", mask, updates, zeros)
    kw = {"axis": axis} if name == "scatter_elements_add" else {"axis": axis, "batch_dims": b}
    return [self.add(name, operand, idx, kept, **kw)]


def _convolution(self: _Importer, op: Any) -> list[Value]:
    dn = hlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
    n = len(dn.input_spatial_dimensions)
    if not 1 <= n <= 3:
        raise StableHLOError(f"stablehlo.convolution with {n} spatial dims: DISC maps 1 to 3")
    if "window_reversal" in op.attributes and any(
            ir.DenseBoolArrayAttr(op.attributes["window_reversal"])):
        raise StableHLOError("stablehlo.convolution with window_reversal has no DISC mapping")
    letters = "DHW"[3 - n:]

    def layout(rank: int, first: tuple[int, str], second: tuple[int, str],
               spatial: list[int]) -> str:
        out = [""] * rank
        out[first[0]], out[second[0]] = first[1], second[1]
        for k, d in enumerate(spatial):
            out[d] = letters[k]
        return "".join(out)

    lhs, rhs = self.v(op, 0), self.v(op, 1)
    il = layout(lhs.rank, (dn.input_batch_dimension, "N"), (dn.input_feature_dimension, "C"),
                list(dn.input_spatial_dimensions))
    kl = layout(rhs.rank, (dn.kernel_output_feature_dimension, "O"),
                (dn.kernel_input_feature_dimension, "I"), list(dn.kernel_spatial_dimensions))
    ol = layout(lhs.rank, (dn.output_batch_dimension, "N"), (dn.output_feature_dimension, "C"),
                list(dn.output_spatial_dimensions))

    def ints(name: str) -> list[int]:
        return self.ints(op, name) if name in op.attributes else [1] * n

    pad = (np.array(ir.DenseIntElementsAttr(op.attributes["padding"])).reshape(n, 2).tolist()
           if "padding" in op.attributes else [[0, 0]] * n)
    out = self.add("convolution", lhs, rhs, window_strides=ints("window_strides"),
                   padding=pad, lhs_dilation=ints("lhs_dilation"),
                   rhs_dilation=ints("rhs_dilation"),
                   feature_group_count=self.int_attr(op, "feature_group_count"),
                   batch_group_count=self.int_attr(op, "batch_group_count"),
                   input_layout=il, kernel_layout=kl, output_layout=ol)
    return [self.cast_to(out, op)]


def _dot_general(self: _Importer, op: Any) -> list[Value]:
    dn = hlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    out = self.add("dot_general", self.v(op, 0), self.v(op, 1),
                   lhs_batch=list(dn.lhs_batching_dimensions),
                   rhs_batch=list(dn.rhs_batching_dimensions),
                   lhs_contract=list(dn.lhs_contracting_dimensions),
                   rhs_contract=list(dn.rhs_contracting_dimensions))
    return [self.cast_to(out, op)]


def _dot(self: _Importer, op: Any) -> list[Value]:
    lhs, rhs = self.v(op, 0), self.v(op, 1)
    out = self.add("dot_general", lhs, rhs, lhs_batch=[], rhs_batch=[],
                   lhs_contract=[lhs.rank - 1], rhs_contract=[0])
    return [self.cast_to(out, op)]


def _call(self: _Importer, op: Any) -> list[Value] | None:
    callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
    f = self.funcs[callee]
    block = f.regions[0].blocks[0]
    arg_attrs = f.attributes["arg_attrs"] if "arg_attrs" in f.attributes else None
    for i, (arg, operand) in enumerate(zip(block.arguments, op.operands)):
        self.vals[arg] = self.vals[operand]
        if operand in self.known:
            self.known[arg] = self.known[operand]
        if arg_attrs is not None:
            attrs = ir.DictAttr(ir.ArrayAttr(arg_attrs)[i])
            if "jax.global_constant" in attrs and operand in self.known:
                label = ir.StringAttr(attrs["jax.global_constant"]).value
                self.named.append((self.known[operand][0], label))
    return self.body(block)


def _shape_assertion(self: _Importer, op: Any) -> None:
    pred = self.preds.get(op.operands[0])
    if pred is not None:
        self.equal.append(pred)
    return None


def _barrier(self: _Importer, op: Any) -> list[Value]:
    return [self.vals[o] for o in op.operands]


_HANDLED: dict[str, Callable[[_Importer, Any], Any]] = {
    **{k: _unary for k in _UNARY_IN},
    **{k: _binary for k in _BINARY_IN},
    "stablehlo.constant": _constant,
    "stablehlo.compare": _compare,
    "stablehlo.select": _select,
    "stablehlo.clamp": _clamp,
    "stablehlo.convert": _convert,
    "stablehlo.transpose": _transpose,
    "stablehlo.reverse": _reverse,
    "stablehlo.concatenate": _concatenate,
    "stablehlo.iota": _iota,
    "stablehlo.dynamic_iota": _dynamic_iota,
    "stablehlo.get_dimension_size": _get_dimension_size,
    "stablehlo.reshape": _reshape,
    "stablehlo.dynamic_reshape": _dynamic_reshape,
    "stablehlo.broadcast_in_dim": _broadcast_in_dim,
    "stablehlo.dynamic_broadcast_in_dim": _dynamic_broadcast_in_dim,
    "stablehlo.broadcast": _broadcast,
    "stablehlo.slice": _slice,
    "stablehlo.real_dynamic_slice": _real_dynamic_slice,
    "stablehlo.dynamic_slice": _dynamic_slice,
    "stablehlo.dynamic_update_slice": _dynamic_update_slice,
    "stablehlo.pad": _pad,
    "stablehlo.dynamic_pad": _dynamic_pad,
    "stablehlo.reduce": _reduce,
    "stablehlo.reduce_window": _reduce_window,
    "stablehlo.sort": _sort,
    "stablehlo.dot_general": _dot_general,
    "stablehlo.gather": _gather,
    "stablehlo.dynamic_gather": _gather,
    "stablehlo.scatter": _scatter,
    "stablehlo.convolution": _convolution,
    "stablehlo.dot": _dot,
    "stablehlo.optimization_barrier": _barrier,
    "stablehlo.custom_call @shape_assertion": _shape_assertion,
    "func.call": _call,
    "func.return": lambda self, op: None,
}
