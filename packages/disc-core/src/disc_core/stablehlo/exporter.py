"""DISC graph -> StableHLO module, built op by op with the MLIR Python bindings.

Symbolic dims become ``?`` in the function type. Wherever a DISC op's shape is symbolic
(a reshape or broadcast target, an iota, slice bounds, pad edges, a gather's slice sizes),
the StableHLO ``dynamic_*`` form takes a shape tensor computed in the module itself: each
symbol is read from an input dim that carries it (``stablehlo.get_dimension_size``) and
the dim expression is rebuilt with i64 arithmetic (floor division corrected from
``stablehlo.divide``'s truncation, as ``GraphBuilder.size_value`` does). The module is
verified before it is returned, so a malformed export fails here, not in a consumer.

``bindings`` substitutes concrete values for symbols, which gives a fully static module
(what a consumer without shape refinement needs, and how a size-0 dim reaches XLA).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Graph, Op, TensorType, Value
from ..symbolic import Expr, as_expr
from . import mapping
from .types import (
    StableHLOError,
    UnsupportedStableHLOError,
    chlo,
    dense,
    element_type,
    hlo,
    ir,
    new_context,
    scalar_type,
    tensor_type,
)

__all__ = ["StableHLOModule", "export", "exportable"]

_I64 = DType.I64
#: argument attribute holding each dim of the argument as DISC dim text ("B", "4")
DIMS_ATTR = "disc.dims"


class StableHLOModule:
    """A verified StableHLO module and the MLIR context that owns it.

    ``text`` is the MLIR assembly (no debug locations), ``bytecode()`` the MLIR bytecode
    (``module.operation.write_bytecode``), ``write(path)`` picks by suffix: ``.mlirbc`` for
    bytecode, anything else text.
    """

    def __init__(self, context: Any, module: Any):
        self.context = context
        self.module = module

    @property
    def text(self) -> str:
        with self.context:
            return self.module.operation.get_asm(enable_debug_info=False)

    def bytecode(self) -> bytes:
        buf = io.BytesIO()
        with self.context:
            self.module.operation.write_bytecode(buf)
        return buf.getvalue()

    def write(self, path: str | Path) -> Path:
        p = Path(path)
        if p.suffix == ".mlirbc":
            p.write_bytes(self.bytecode())
        else:
            p.write_text(self.text)
        return p

    def __str__(self) -> str:
        return self.text


def exportable(graph: Graph) -> dict[str, str]:
    """The ops of ``graph`` with no StableHLO export, with the reason (empty: all map)."""
    out = {}
    for op in graph.ops:
        if op.name in mapping.NOT_EXPORTED:
            out[op.name] = mapping.NOT_EXPORTED[op.name]
        elif not hasattr(_Exporter, f"_op_{op.name}") and op.name not in _TABLE_OPS:
            out[op.name] = "no StableHLO mapping"
    return out


_TABLE_OPS = frozenset(mapping.UNARY) | frozenset(mapping.BINARY)


def export(graph: Graph, *, bindings: Mapping[str, int] | None = None,
           name: str = "main") -> StableHLOModule:
    """``graph`` as a verified StableHLO module with one public function ``name``.

    Raises :class:`UnsupportedStableHLOError` naming every op with no mapping (before any
    MLIR is built) and :class:`StableHLOError` for an unsupported form of a mapped op.
    """
    bad = exportable(graph)
    if bad:
        raise UnsupportedStableHLOError(bad)
    ctx = new_context()
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        _Exporter(graph, dict(bindings or {}), name).build(module)
        try:
            module.operation.verify()
        except ir.MLIRError as exc:
            raise StableHLOError(f"the exported module of @{graph.name} does not verify: "
                                 f"{exc}") from None
    return StableHLOModule(ctx, module)


def _linear(d: Expr) -> tuple[str, int, int] | None:
    """``(symbol, c, k)`` when ``d`` is ``c * symbol + k`` with c != 0, else None."""
    sym, coeff, offset = None, 0, 0
    for mono, c in d.terms:
        if not mono:
            offset = c
        elif len(mono) == 1 and getattr(mono[0], "fn", None) is None and sym is None:
            sym, coeff = mono[0].name, c
        else:
            return None
    return (sym, coeff, offset) if sym is not None and coeff else None


class _Exporter:
    """One graph's export: values, cached dim computations, one method per structured op."""

    def __init__(self, graph: Graph, bindings: dict[str, int], name: str):
        self.graph = graph
        self.bind = {k: Expr.const(int(v)) for k, v in bindings.items()}
        self.name = name
        self.env: dict[Value, Any] = {}
        self.dims: dict[Expr, Any] = {}
        #: where each symbol is read: (input, axis, coefficient, offset) with the input
        #: dim equal to coefficient * symbol + offset (a plain symbol first)
        self.sites: dict[str, tuple[Value, int, int, int]] = {}
        for v in graph.inputs:
            for axis, d in enumerate(v.shape):
                if d.is_symbol and d.symbol_name not in self.sites:
                    self.sites[d.symbol_name] = (v, axis, 1, 0)
        for v in graph.inputs:
            for axis, d in enumerate(v.shape):
                linear = _linear(d)
                if linear is not None and linear[0] not in self.sites:
                    self.sites[linear[0]] = (v, axis, linear[1], linear[2])

    # -- types and dims -------------------------------------------------------------
    def e(self, x: Any) -> Expr:
        return as_expr(x).subs(self.bind) if self.bind else as_expr(x)

    def ty(self, t: TensorType) -> Any:
        return tensor_type(t.with_shape([self.e(d) for d in t.shape]))

    def rty(self, op: Op, i: int = 0) -> Any:
        return self.ty(op.results[i].type)

    def i64_const(self, value: int | Sequence[int], shape: Sequence[int] = ()) -> Any:
        arr = np.asarray(value, np.int64).reshape(shape)
        return hlo.ConstantOp(dense(arr, ir.RankedTensorType.get(list(shape),
                                                                  element_type(_I64)))).result

    def dim(self, x: Any) -> Any:
        """The value of dim expression ``x`` as a ``tensor<i64>``, computed once."""
        e = self.e(x)
        if e in self.dims:
            return self.dims[e]
        if e.is_const:
            out = self.i64_const(e.value)
        else:
            total = None
            for mono, coeff in e.terms:
                term = None if coeff == 1 else self.i64_const(coeff)
                for atom in mono:
                    a = self._atom(atom)
                    term = a if term is None else hlo.MulOp(term, a).result
                if term is None:
                    term = self.i64_const(coeff)
                total = term if total is None else hlo.AddOp(total, term).result
            out = total
        self.dims[e] = out
        return out

    def _atom(self, atom: Any) -> Any:
        fn = getattr(atom, "fn", None)
        if fn is None:
            site = self.sites.get(atom.name)
            if site is None:
                raise StableHLOError(f"@{self.graph.name}: symbol {atom.name} is not a dim of "
                                     "any input, so the module cannot compute it")
            v, axis, coeff, offset = site
            size = hlo.GetDimensionSizeOp(self.env[v], axis).result
            size = hlo.ConvertOp(scalar_type(_I64), size).result
            if offset:
                size = hlo.SubtractOp(size, self.i64_const(offset)).result
            if coeff != 1:
                size = hlo.DivOp(size, self.i64_const(coeff)).result
            return size
        args = [self.dim(a) for a in atom.args]
        if fn == "min":
            out = args[0]
            for a in args[1:]:
                out = hlo.MinOp(out, a).result
            return out
        if fn == "max":
            out = args[0]
            for a in args[1:]:
                out = hlo.MaxOp(out, a).result
            return out
        a, b = args
        if fn == "ceildiv":  # ceil(a / b) = -floor(-a / b)
            return hlo.NegOp(self._floordiv(hlo.NegOp(a).result, b)).result
        q = self._floordiv(a, b)
        return q if fn == "floordiv" else hlo.SubtractOp(a, hlo.MulOp(q, b).result).result

    def _floordiv(self, a: Any, b: Any) -> Any:
        """Python's floor division of i64 scalars for a positive divisor (a divisor in a
        dim expression is a size: positive wherever the dim is used), written with
        arithmetic only: ``(a - ((a rem b) + b) rem b) / b``. ``stablehlo.divide``
        truncates, and a sign correction through compare/select would not be folded by
        StableHLO's shape refinement, which XLA needs to compile the dynamic ops."""
        m = hlo.RemOp(hlo.AddOp(hlo.RemOp(a, b).result, b).result, b).result
        return hlo.DivOp(hlo.SubtractOp(a, m).result, b).result

    def shape_tensor(self, dims: Sequence[Any]) -> Any:
        """A ``tensor<Nxi64>`` holding ``dims`` (a constant when they are all static)."""
        exprs = [self.e(d) for d in dims]
        if all(d.is_const for d in exprs):
            return self.i64_const([d.value for d in exprs], [len(exprs)])
        one = ir.RankedTensorType.get([1], element_type(_I64))
        parts = [hlo.ReshapeOp(one, self.dim(d)).result for d in exprs]
        return hlo.ConcatenateOp(parts, 0).result

    def static(self, dims: Sequence[Any]) -> bool:
        return all(self.e(d).is_const for d in dims)

    # -- comparisons and region bodies ---------------------------------------------
    @staticmethod
    def compare_type(dt: DType) -> str:
        if dt.is_float:
            return "FLOAT"
        return "UNSIGNED" if dt in (DType.U8, DType.BOOL) else "SIGNED"

    def _cmp(self, a: Any, b: Any, direction: str, dt: DType) -> Any:
        return hlo.CompareOp(a, b, hlo.ComparisonDirectionAttr.get(direction),
                             compare_type=hlo.ComparisonTypeAttr.get(self.compare_type(dt))
                             ).result

    def _body(self, op: Any, scalar_types: Sequence[Any]) -> Any:
        block = op.regions[0].blocks.append(*scalar_types)
        return block

    def _identity(self, kind: str, dt: DType) -> np.ndarray:
        """The init value of a reduction of ``kind`` (what an empty reduction yields)."""
        if kind in ("sum", "or"):
            return np.zeros((), dt.np)
        if kind in ("prod", "and"):
            return np.ones((), dt.np)
        lowest = kind == "max"
        if dt.is_bool:
            return np.asarray(not lowest)
        if dt.is_float:
            return np.asarray(-np.inf if lowest else np.inf).astype(dt.np)
        info = np.iinfo(dt.np)
        return np.asarray(info.min if lowest else info.max, dt.np)

    def const(self, arr: np.ndarray, dt: DType) -> Any:
        arr = np.asarray(arr).astype(dt.np)
        return hlo.ConstantOp(dense(arr, ir.RankedTensorType.get(list(arr.shape),
                                                                  element_type(dt)))).result

    def iota(self, t: TensorType, dimension: int) -> Any:
        if self.static(t.shape):
            return hlo.IotaOp(self.ty(t), dimension).result
        return hlo.DynamicIotaOp(self.ty(t), self.shape_tensor(t.shape), dimension).result

    # -- driver ---------------------------------------------------------------------
    def build(self, module: Any) -> None:
        from jaxlib.mlir.dialects import func

        g = self.graph
        in_types = [self.ty(v.type) for v in g.inputs]
        out_types = [self.ty(v.type) for v in g.outputs]
        with ir.InsertionPoint(module.body):
            fn = func.FuncOp(self.name, ir.FunctionType.get(in_types, out_types))
            fn.attributes["sym_visibility"] = ir.StringAttr.get("public")
            # the symbolic dims by name, so that import_ restores them (other consumers
            # ignore a discardable attribute)
            fn.arg_attrs = ir.ArrayAttr.get([ir.DictAttr.get({DIMS_ATTR: ir.ArrayAttr.get(
                [ir.StringAttr.get(str(self.e(d))) for d in v.shape])}) for v in g.inputs])
            block = fn.add_entry_block()
        with ir.InsertionPoint(block):
            for v, arg in zip(g.inputs, block.arguments):
                self.env[v] = arg
            for op in g.ops:
                outs = self.emit(op)
                for r, o in zip(op.results, outs):
                    self.env[r] = o
            func.ReturnOp([self.env[v] for v in g.outputs])

    def emit(self, op: Op) -> list[Any]:
        args = [self.env[v] for v in op.operands]
        if op.name != "constant" and all(self._empty(r.type) for r in op.results):
            # a statically empty result is an empty constant: StableHLO rejects some forms
            # (a gather's size-1 slice of a size-0 batching dim) that have no elements anyway
            return [self.const(np.zeros([self.e(d).value for d in r.shape], r.dtype.np),
                               r.dtype) for r in op.results]
        if op.name in mapping.UNARY:
            special = getattr(self, f"_op_{op.name}", None)
            if special is not None:
                out = special(op, args)
                if out is not None:
                    return out
            return [self._generic(mapping.UNARY[op.name], op, args)]
        if op.name in mapping.BINARY:
            return [self._generic(mapping.BINARY[op.name], op, args)]
        return getattr(self, f"_op_{op.name}")(op, args)

    def _generic(self, name: str, op: Op, args: list[Any]) -> Any:
        if name.startswith("chlo."):
            return chlo.ErfOp(args[0], results=[self.rty(op)]).result
        return ir.Operation.create(name, results=[self.rty(op)], operands=args).result

    # -- elementwise specials ---------------------------------------------------------
    def _op_abs(self, op: Op, args: list[Any]) -> list[Any] | None:
        # stablehlo.abs takes signed types only; |x| of an unsigned x is x.
        return [args[0]] if op.operands[0].dtype is DType.U8 else None

    def _op_sign(self, op: Op, args: list[Any]) -> list[Any] | None:
        # stablehlo.sign takes signed types only; sign of an unsigned x is x != 0.
        if op.operands[0].dtype is not DType.U8:
            return None
        x = args[0]
        zero = hlo.BroadcastInDimOp(x.type, self.const(np.zeros(()), DType.U8), []).result \
            if self.static(op.operands[0].shape) else self._splat_like(0, op.operands[0])
        ne = self._cmp(x, zero, "NE", DType.U8)
        return [hlo.ConvertOp(self.rty(op), ne).result]

    def _empty(self, t: TensorType) -> bool:
        dims = [self.e(d) for d in t.shape]
        return any(d.is_const and d.value == 0 for d in dims) and all(d.is_const for d in dims)

    def _splat_like(self, value: Any, v: Value) -> Any:
        c = self.const(np.asarray(value), v.dtype)
        t = self.ty(v.type)
        if self.static(v.shape):
            return hlo.BroadcastInDimOp(t, c, []).result
        return hlo.DynamicBroadcastInDimOp(t, c, self.shape_tensor(v.shape), []).result

    def _op_compare(self, op: Op, args: list[Any]) -> list[Any]:
        return [hlo.CompareOp(args[0], args[1],
                              hlo.ComparisonDirectionAttr.get(op.attrs["direction"].upper()),
                              compare_type=hlo.ComparisonTypeAttr.get(
                                  self.compare_type(op.operands[0].dtype)),
                              results=[self.rty(op)]).result]

    def _op_select(self, op: Op, args: list[Any]) -> list[Any]:
        return [hlo.SelectOp(*args, results=[self.rty(op)]).result]

    def _op_clamp(self, op: Op, args: list[Any]) -> list[Any]:
        return [hlo.ClampOp(*args, results=[self.rty(op)]).result]

    def _op_convert(self, op: Op, args: list[Any]) -> list[Any]:
        return [hlo.ConvertOp(self.rty(op), args[0]).result]

    # -- constants and shapes -----------------------------------------------------------
    def _op_constant(self, op: Op, args: list[Any]) -> list[Any]:
        arr = op.attrs["value"].array
        return [hlo.ConstantOp(dense(arr, self.rty(op))).result]

    def _op_iota(self, op: Op, args: list[Any]) -> list[Any]:
        return [self.iota(op.results[0].type, op.attrs["dimension"])]

    def _op_get_dimension_size(self, op: Op, args: list[Any]) -> list[Any]:
        size = hlo.GetDimensionSizeOp(args[0], op.attrs["dimension"]).result
        return [hlo.ConvertOp(self.rty(op), size).result]

    def _op_reshape(self, op: Op, args: list[Any]) -> list[Any]:
        shape = op.results[0].shape
        if self.static(shape):
            return [hlo.ReshapeOp(self.rty(op), args[0]).result]
        return [hlo.DynamicReshapeOp(self.rty(op), args[0], self.shape_tensor(shape)).result]

    def _op_dynamic_reshape(self, op: Op, args: list[Any]) -> list[Any]:
        return [hlo.DynamicReshapeOp(self.rty(op), args[0], args[1]).result]

    def _op_broadcast_in_dim(self, op: Op, args: list[Any]) -> list[Any]:
        dims = list(op.attrs["broadcast_dimensions"])
        if self.static(op.results[0].shape) and self.static(op.operands[0].shape):
            return [hlo.BroadcastInDimOp(self.rty(op), args[0], dims).result]
        return [hlo.DynamicBroadcastInDimOp(self.rty(op), args[0],
                                            self.shape_tensor(op.results[0].shape),
                                            dims).result]

    def _op_dynamic_broadcast_in_dim(self, op: Op, args: list[Any]) -> list[Any]:
        return [hlo.DynamicBroadcastInDimOp(self.rty(op), args[0], args[1],
                                            list(op.attrs["broadcast_dimensions"])).result]

    def _op_transpose(self, op: Op, args: list[Any]) -> list[Any]:
        return [hlo.TransposeOp(args[0], list(op.attrs["permutation"]),
                                results=[self.rty(op)]).result]

    # -- data movement ------------------------------------------------------------------
    def _op_reverse(self, op: Op, args: list[Any]) -> list[Any]:
        return [hlo.ReverseOp(args[0], list(op.attrs["dimensions"]),
                              results=[self.rty(op)]).result]

    def _op_concatenate(self, op: Op, args: list[Any]) -> list[Any]:
        return [hlo.ConcatenateOp(args, op.attrs["dimension"], results=[self.rty(op)]).result]

    def _slice(self, x: Any, start: Sequence[Any], limit: Sequence[Any],
               stride: Sequence[int], result: Any) -> Any:
        if self.static(start) and self.static(limit):
            return hlo.SliceOp(x, [self.e(s).value for s in start],
                               [self.e(s).value for s in limit], list(stride),
                               results=[result]).result
        return hlo.RealDynamicSliceOp(result, x, self.shape_tensor(start),
                                      self.shape_tensor(limit),
                                      self.i64_const(list(stride), [len(stride)])).result

    def _op_slice(self, op: Op, args: list[Any]) -> list[Any]:
        return [self._slice(args[0], op.attrs["start"], op.attrs["limit"], op.attrs["stride"],
                            self.rty(op))]

    def _starts(self, op: Op, args: list[Any], first: int) -> list[Any]:
        """Start indices as i64 scalars (StableHLO wants one type for all of them)."""
        out = []
        for v, a in zip(op.operands[first:], args[first:]):
            out.append(a if v.dtype is _I64 else hlo.ConvertOp(scalar_type(_I64), a).result)
        return out

    def _op_dynamic_slice(self, op: Op, args: list[Any]) -> list[Any]:
        sizes = op.attrs["sizes"]
        starts = self._starts(op, args, 1)
        if self.static(sizes):
            return [hlo.DynamicSliceOp(args[0], starts, [self.e(s).value for s in sizes],
                                       results=[self.rty(op)]).result]
        # Symbolic sizes: a gather of one window whose start is the index vector. Its
        # slice sizes are a shape tensor that shape refinement folds (a real_dynamic_slice
        # from start to start + size would have a data-dependent result shape for XLA), and
        # gather clamps the start so the window fits, as dynamic_slice does.
        rank = len(sizes)
        one = ir.RankedTensorType.get([1], element_type(_I64))
        vec = hlo.ConcatenateOp([hlo.ReshapeOp(one, st).result for st in starts], 0).result
        dims = hlo.GatherDimensionNumbers.get(
            offset_dims=list(range(rank)), collapsed_slice_dims=[], operand_batching_dims=[],
            start_indices_batching_dims=[], start_index_map=list(range(rank)),
            index_vector_dim=0)
        return [hlo.DynamicGatherOp(args[0], vec, self.shape_tensor(sizes), dims,
                                    results=[self.rty(op)]).result]

    def _op_dynamic_update_slice(self, op: Op, args: list[Any]) -> list[Any]:
        return [hlo.DynamicUpdateSliceOp(args[0], args[1], self._starts(op, args, 2),
                                         results=[self.rty(op)]).result]

    def _op_pad(self, op: Op, args: list[Any]) -> list[Any]:
        low, high, interior = op.attrs["low"], op.attrs["high"], list(op.attrs["interior"])
        if self.static(low) and self.static(high):
            return [hlo.PadOp(args[0], args[1], [self.e(d).value for d in low],
                              [self.e(d).value for d in high], interior,
                              results=[self.rty(op)]).result]
        return [hlo.DynamicPadOp(self.rty(op), args[0], args[1], self.shape_tensor(low),
                                 self.shape_tensor(high),
                                 self.i64_const(interior, [len(interior)])).result]

    # -- reductions -----------------------------------------------------------------------
    def _reduce_body(self, op: Any, kind: str, dt: DType) -> None:
        s = scalar_type(dt)
        block = self._body(op, [s, s])
        with ir.InsertionPoint(block):
            r = ir.Operation.create(mapping.REDUCE_BODY[kind], results=[s],
                                    operands=list(block.arguments)).result
            hlo.ReturnOp([r])

    def _op_reduce(self, op: Op, args: list[Any]) -> list[Any]:
        dt = op.operands[0].dtype
        kind = op.attrs["kind"]
        init = self.const(self._identity(kind, dt), dt)
        red = hlo.ReduceOp([self.rty(op)], [args[0]], [init], list(op.attrs["axes"]))
        self._reduce_body(red, kind, dt)
        return [red.results[0]]

    def _arg_reduce(self, op: Op, args: list[Any], direction: str) -> list[Any]:
        x = op.operands[0]
        axis = op.attrs["axis"]
        idt: DType = op.attrs["index_dtype"]
        idx = self.iota(TensorType(idt, x.shape), axis)
        init_v = self.const(self._identity("max" if direction == "GT" else "min", x.dtype),
                            x.dtype)
        init_i = self.const(np.zeros((), idt.np), idt)
        val_t = self.ty(TensorType(x.dtype, op.results[0].shape))
        red = hlo.ReduceOp([val_t, self.rty(op)], [args[0], idx], [init_v, init_i], [axis])
        sv, si = scalar_type(x.dtype), scalar_type(idt)
        block = self._body(red, [sv, si, sv, si])
        with ir.InsertionPoint(block):
            av, ai, bv, bi = block.arguments
            # a wins if strictly better, or NaN against a number; ties (NaN pairs included)
            # go to the lower index, so the first occurrence wins whatever the tree order
            a_nan = self._cmp(av, av, "NE", x.dtype)
            b_nan = self._cmp(bv, bv, "NE", x.dtype)
            not_b_nan = hlo.NotOp(b_nan).result
            better = hlo.OrOp(hlo.AndOp(self._cmp(av, bv, direction, x.dtype), not_b_nan).result,
                              hlo.AndOp(a_nan, not_b_nan).result).result
            tie = hlo.OrOp(self._cmp(av, bv, "EQ", x.dtype),
                           hlo.AndOp(a_nan, b_nan).result).result
            lower = self._cmp(ai, bi, "LT", idt)
            pick = hlo.OrOp(better, hlo.AndOp(tie, lower).result).result
            hlo.ReturnOp([hlo.SelectOp(pick, av, bv).result, hlo.SelectOp(pick, ai, bi).result])
        return [red.results[1]]

    def _op_argmax(self, op: Op, args: list[Any]) -> list[Any]:
        return self._arg_reduce(op, args, "GT")

    def _op_argmin(self, op: Op, args: list[Any]) -> list[Any]:
        return self._arg_reduce(op, args, "LT")

    def _op_cumulative(self, op: Op, args: list[Any]) -> list[Any]:
        x = op.operands[0]
        axis, kind = op.attrs["axis"], op.attrs["kind"]
        n = self.e(x.shape[axis])
        if not n.is_const:
            raise StableHLOError(f"cumulative along axis {axis} of symbolic size {n}: "
                                 "stablehlo.reduce_window needs a static window")
        if n.value == 0:
            return [args[0]]
        window = [1] * x.rank
        window[axis] = n.value
        pad = np.zeros((x.rank, 2), np.int64)
        pad[axis, 0] = n.value - 1
        pad_attr = ir.DenseIntElementsAttr.get(pad, type=ir.RankedTensorType.get(
            [x.rank, 2], element_type(_I64)))
        init = self.const(self._identity(kind, x.dtype), x.dtype)
        rw = hlo.ReduceWindowOp([self.rty(op)], [args[0]], [init], window, padding=pad_attr)
        self._reduce_body(rw, kind, x.dtype)
        return [rw.results[0]]

    # -- contractions -----------------------------------------------------------------
    def _op_dot_general(self, op: Op, args: list[Any]) -> list[Any]:
        a = op.attrs
        dims = hlo.DotDimensionNumbers.get(
            lhs_batching_dimensions=list(a["lhs_batch"]),
            rhs_batching_dimensions=list(a["rhs_batch"]),
            lhs_contracting_dimensions=list(a["lhs_contract"]),
            rhs_contracting_dimensions=list(a["rhs_contract"]))
        return [hlo.DotGeneralOp(self.rty(op), args[0], args[1], dims).result]

    def _op_convolution(self, op: Op, args: list[Any]) -> list[Any]:
        a = op.attrs
        il, kl, ol = a["input_layout"], a["kernel_layout"], a["output_layout"]
        sp = [ch for ch in il if ch not in "NC"]
        dims = hlo.ConvDimensionNumbers.get(
            input_batch_dimension=il.index("N"), input_feature_dimension=il.index("C"),
            input_spatial_dimensions=[il.index(c) for c in sp],
            kernel_input_feature_dimension=kl.index("I"),
            kernel_output_feature_dimension=kl.index("O"),
            kernel_spatial_dimensions=[kl.index(c) for c in sp],
            output_batch_dimension=ol.index("N"), output_feature_dimension=ol.index("C"),
            output_spatial_dimensions=[ol.index(c) for c in sp])
        pad = np.asarray(a["padding"], np.int64).reshape(len(sp), 2)
        pad_attr = ir.DenseIntElementsAttr.get(pad, type=ir.RankedTensorType.get(
            [len(sp), 2], element_type(_I64)))
        return [hlo.ConvolutionOp(self.rty(op), args[0], args[1], dims,
                                  a["feature_group_count"], a["batch_group_count"],
                                  window_strides=list(a["window_strides"]), padding=pad_attr,
                                  lhs_dilation=list(a["lhs_dilation"]),
                                  rhs_dilation=list(a["rhs_dilation"])).result]

    # -- indexing -----------------------------------------------------------------------
    def _op_gather(self, op: Op, args: list[Any]) -> list[Any]:
        operand, indices = op.operands
        axis, b = op.attrs["axis"], op.attrs["batch_dims"]
        q = indices.rank
        # result = [batch..., pre..., index dims..., post...]; pre and post are offset dims
        offset = list(range(b, axis)) + list(range(axis + q - b, axis + q - b + operand.rank
                                                   - axis - 1))
        dims = hlo.GatherDimensionNumbers.get(
            offset_dims=offset, collapsed_slice_dims=[axis],
            operand_batching_dims=list(range(b)), start_indices_batching_dims=list(range(b)),
            start_index_map=[axis], index_vector_dim=q)
        sizes: list[Any] = list(operand.shape)
        sizes[axis] = 1
        for k in range(b):
            sizes[k] = 1
        if self.static(sizes):
            return [hlo.GatherOp(args[0], args[1], dims, [self.e(s).value for s in sizes],
                                 results=[self.rty(op)]).result]
        return [hlo.DynamicGatherOp(args[0], args[1], self.shape_tensor(sizes), dims,
                                    results=[self.rty(op)]).result]

    def _clamped_indices(self, indices: Value, arg: Any, size: Expr) -> Any:
        """``indices`` clamped into ``[0, size - 1]``: DISC's scatters clamp (never drop an
        update), where stablehlo.scatter skips out-of-bounds updates."""
        dt = indices.dtype
        hi = hlo.SubtractOp(self.dim(size), self.i64_const(1)).result
        if dt is not _I64:
            hi = hlo.ConvertOp(scalar_type(dt), hi).result
        zero = self.const(np.zeros((), dt.np), dt)
        return hlo.ClampOp(zero, arg, hi, results=[self.ty(indices.type)]).result

    def _add_body(self, op: Any, dt: DType) -> None:
        self._reduce_body(op, "sum", dt)

    def _elements_operand(self, op: Op, args: list[Any], axis: int) -> Any:
        """The operand cut to the indices' extent off ``axis`` (DISC allows indices smaller
        there, a batching dim of stablehlo.gather needs equal sizes)."""
        operand, indices = op.operands[0], op.operands[1]
        if all(a == b for k, (a, b) in enumerate(zip(operand.shape, indices.shape))
               if k != axis):
            return args[0]
        limit = [d if k == axis else indices.shape[k] for k, d in enumerate(operand.shape)]
        t = TensorType(operand.dtype, tuple(limit))
        return self._slice(args[0], [0] * operand.rank, limit, [1] * operand.rank, self.ty(t))

    def _op_gather_elements(self, op: Op, args: list[Any]) -> list[Any]:
        axis = op.attrs["axis"]
        operand, indices = op.operands
        r = operand.rank
        others = [k for k in range(r) if k != axis]
        dims = hlo.GatherDimensionNumbers.get(
            offset_dims=[], collapsed_slice_dims=[axis], operand_batching_dims=others,
            start_indices_batching_dims=others, start_index_map=[axis], index_vector_dim=r)
        src = self._elements_operand(op, args, axis)
        return [hlo.GatherOp(src, args[1], dims, [1] * r, results=[self.rty(op)]).result]

    def _op_scatter_elements_add(self, op: Op, args: list[Any]) -> list[Any]:
        axis = op.attrs["axis"]
        operand, indices, updates = op.operands
        r = operand.rank
        idx_arg, upd_arg = args[1], args[2]
        if any(a != b for k, (a, b) in enumerate(zip(operand.shape, indices.shape))
               if k != axis):
            # indices smaller than the operand off the axis (torch allows it): pad indices
            # and updates to the operand's extent there with zeros, which add nothing
            low = [0] * r
            high = [Expr.const(0) if k == axis else operand.shape[k] - indices.shape[k]
                    for k in range(r)]
            idx_arg = self._pad_zeros(indices, idx_arg, low, high)
            upd_arg = self._pad_zeros(updates, upd_arg, low, high)
            indices = Value(TensorType(indices.dtype, tuple(
                d + h for d, h in zip(indices.shape, high))))
        others = [k for k in range(r) if k != axis]
        dims = hlo.ScatterDimensionNumbers.get(
            update_window_dims=[], inserted_window_dims=[axis], input_batching_dims=others,
            scatter_indices_batching_dims=others, scattered_dims_to_operand_dims=[axis],
            index_vector_dim=r)
        idx = self._clamped_indices(indices, idx_arg, operand.shape[axis])
        sc = hlo.ScatterOp([self.rty(op)], [args[0]], idx, [upd_arg], dims)
        self._add_body(sc, operand.dtype)
        return [sc.results[0]]

    def _pad_zeros(self, v: Value, arg: Any, low: list[int], high: list[Expr]) -> Any:
        zero = self.const(np.zeros((), v.dtype.np), v.dtype)
        shape = tuple(self.e(d + h) for d, h in zip(v.shape, high))
        t = self.ty(TensorType(v.dtype, shape))
        if self.static(high):
            return hlo.PadOp(arg, zero, low, [self.e(h).value for h in high], [0] * len(low),
                             results=[t]).result
        return hlo.DynamicPadOp(t, arg, zero, self.shape_tensor(low), self.shape_tensor(high),
                                self.i64_const([0] * len(low), [len(low)])).result

    def _op_scatter_add(self, op: Op, args: list[Any]) -> list[Any]:
        operand, indices, updates = op.operands
        axis, b = op.attrs["axis"], op.attrs["batch_dims"]
        q = indices.rank
        window = list(range(b, axis)) + list(range(axis + q - b, axis + q - b + operand.rank
                                                   - axis - 1))
        dims = hlo.ScatterDimensionNumbers.get(
            update_window_dims=window, inserted_window_dims=[axis],
            input_batching_dims=list(range(b)), scatter_indices_batching_dims=list(range(b)),
            scattered_dims_to_operand_dims=[axis], index_vector_dim=q)
        idx = self._clamped_indices(indices, args[1], operand.shape[axis])
        sc = hlo.ScatterOp([self.rty(op)], [args[0]], idx, [args[2]], dims)
        self._add_body(sc, operand.dtype)
        return [sc.results[0]]

    # -- sorting ------------------------------------------------------------------------
    def _sort(self, x: Value, arg: Any, dimension: int, descending: bool) -> tuple[Any, Any]:
        idx = self.iota(TensorType(_I64, x.shape), dimension)
        srt = hlo.SortOp([self.ty(x.type), self.ty(TensorType(_I64, x.shape))], [arg, idx],
                         dimension=dimension, is_stable=True)
        sv, si = scalar_type(x.dtype), scalar_type(_I64)
        block = self._body(srt, [sv, sv, si, si])
        with ir.InsertionPoint(block):
            av, bv = block.arguments[0], block.arguments[1]
            a_nan = self._cmp(av, av, "NE", x.dtype)
            b_nan = self._cmp(bv, bv, "NE", x.dtype)
            if descending:  # NaN first, then larger values
                first = hlo.OrOp(hlo.AndOp(a_nan, hlo.NotOp(b_nan).result).result,
                                 self._cmp(av, bv, "GT", x.dtype)).result
            else:  # smaller values first, NaN last
                first = hlo.OrOp(hlo.AndOp(b_nan, hlo.NotOp(a_nan).result).result,
                                 self._cmp(av, bv, "LT", x.dtype)).result
            hlo.ReturnOp([first])
        return srt.results[0], srt.results[1]

    def _op_sort(self, op: Op, args: list[Any]) -> list[Any]:
        v, i = self._sort(op.operands[0], args[0], op.attrs["dimension"],
                          op.attrs["descending"])
        return [v, i]

    def _op_top_k(self, op: Op, args: list[Any]) -> list[Any]:
        x = op.operands[0]
        last = x.rank - 1
        v, i = self._sort(x, args[0], last, True)
        start = [0] * x.rank
        limit = list(x.shape[:-1]) + [op.attrs["k"]]
        stride = [1] * x.rank
        return [self._slice(v, start, limit, stride, self.rty(op, 0)),
                self._slice(i, start, limit, stride, self.rty(op, 1))]
