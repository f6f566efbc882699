"""The context every ATen converter sees: :class:`Lowering`, and the dtype and metadata helpers.

:class:`Lowering` maps FX nodes to core values and gives converters what they need (shapes
as symbolic dims, dtype casts, numpy-style broadcasting, scalars). Shapes always come from
the fake tensors dynamo recorded in ``node.meta['val']``, never from the op's size
arguments, so a ``view(x, [s0 * 4, -1])`` needs no arithmetic in the converter and symbolic
sizes stay exact.

It is its own module so that the converters (which use it) and :mod:`disc_torch.lowering`
(which runs them) import it without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from disc_core.bridge.context import LoweringContext
from disc_core.bridge.errors import ConversionError
from disc_core.dtypes import DType
from disc_core.ir import Value
from disc_core.symbolic import Expr

from .symbolic import to_expr

__all__ = ["ConversionError", "Lowering", "TORCH_DTYPES", "core_dtype", "is_sym_node",
           "meta_of"]

TORCH_DTYPES: dict[torch.dtype, DType] = {
    torch.bool: DType.BOOL, torch.int8: DType.I8, torch.int16: DType.I16,
    torch.int32: DType.I32, torch.int64: DType.I64, torch.uint8: DType.U8,
    torch.float16: DType.F16, torch.bfloat16: DType.BF16, torch.float32: DType.F32,
    torch.float64: DType.F64,
}


def core_dtype(dtype: torch.dtype) -> DType:
    try:
        return TORCH_DTYPES[dtype]
    except KeyError:
        raise ConversionError(f"dtype {dtype} has no DISC equivalent") from None


def is_sym_node(node: torch.fx.Node) -> bool:
    """A host computation of a size (SymInt arithmetic, sym_size): never lowered, its value
    is a symbolic dim already."""
    m = node.meta.get("val")
    return isinstance(m, (int, torch.SymInt, torch.SymFloat, torch.SymBool, float, bool))


def meta_of(node: Any) -> Any:
    """The fake tensor (or SymInt, or tuple) dynamo recorded for ``node``."""
    if not isinstance(node, torch.fx.Node):
        return node
    if "val" not in node.meta:
        raise ConversionError(f"node {node.name} has no recorded value (meta['val'])")
    return node.meta["val"]


class Lowering(LoweringContext):
    """Builds one core graph; ``env`` maps FX nodes to core values (or tuples of them)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.env: dict[torch.fx.Node, Any] = {}

    # -- values ---------------------------------------------------------------------------
    def add_input(self, node: torch.fx.Node, name: str) -> Value:
        t = meta_of(node)
        v = self.b.input(name, core_dtype(t.dtype), self.shape(node))
        self.env[node] = v
        return v

    def value(self, arg: Any) -> Value:
        """The core value of a tensor argument."""
        if isinstance(arg, torch.fx.Node):
            v = self.env.get(arg)
            if isinstance(v, Value):
                return v
            raise ConversionError(f"argument {arg.name} is not a tensor inside this cluster")
        raise ConversionError(f"expected a tensor argument, got {type(arg).__name__} {arg!r}")

    @staticmethod
    def is_tensor(arg: Any) -> bool:
        return isinstance(arg, torch.fx.Node) and isinstance(meta_of(arg), torch.Tensor)

    # -- metadata -------------------------------------------------------------------------
    def shape(self, node: Any) -> tuple[Expr, ...]:
        t = meta_of(node)
        if not isinstance(t, torch.Tensor):
            raise ConversionError(f"{getattr(node, 'name', node)} is not a tensor")
        return tuple(to_expr(d) for d in t.shape)

    def dtype(self, node: Any) -> DType:
        return core_dtype(meta_of(node).dtype)

    @staticmethod
    def expr(size: Any) -> Expr:
        """A size argument (int, SymInt, or an FX node computing one) as a core dim."""
        return to_expr(meta_of(size))

    # -- builders (op, cast, reshape, full, broadcast_to: LoweringContext's) ------------
    def scalar(self, value: Any, dtype: DType) -> Value:
        if isinstance(value, torch.fx.Node):
            raise ConversionError("a scalar computed at run time (SymFloat/SymInt) as an operand")
        return self.b.constant(value, dtype)

    def size_value(self, e: Expr, dtype: DType) -> Value:
        """A symbolic size as a rank-0 value (:meth:`GraphBuilder.size_value`); a symbol no
        cluster input carries gets a zero-byte carrier input, fed like any unbound one."""
        return self.b.size_value(e, dtype, unbound=self._carrier)

    def _carrier(self, name: str) -> tuple[Value, int]:
        return self.b.input(f"sym_{name}", DType.U8, [Expr.sym(name), 0]), 0

    def float_value(self, e: Any, dtype: DType) -> Value:
        """A SymFloat (sympy over the size symbols, e.g. batch norm's ``1 / (N*H*W)``) as a
        rank-0 value: true divisions and float arithmetic of sizes read at run time."""
        import sympy

        if not dtype.is_float:
            raise ConversionError(f"float size expression {e} used as a {dtype} operand")
        fn = type(e).__name__
        if isinstance(e, (sympy.Float, sympy.Rational)) and e.is_number:
            return self.scalar(float(e), dtype)
        if fn in ("FloatTrueDiv", "IntTrueDiv"):
            return self.op("div", self.float_value(e.args[0], dtype),
                           self.float_value(e.args[1], dtype))
        if fn == "ToFloat":
            return self.float_value(e.args[0], dtype)
        if isinstance(e, (sympy.Add, sympy.Mul)) and not e.is_integer:
            parts = [self.float_value(a, dtype) for a in e.args]
            out = parts[0]
            for p in parts[1:]:
                out = self.op("add" if isinstance(e, sympy.Add) else "mul", out, p)
            return out
        try:
            return self.size_value(to_expr(e), dtype)  # an integer-valued size
        except Exception as exc:
            raise ConversionError(f"float size expression {e} ({fn}): {exc}") from None

    def operand(self, arg: Any, dtype: DType, shape: Sequence[Expr] | None = None) -> Value:
        """A tensor or Python-number argument as a core value of ``dtype`` (and ``shape``)."""
        if isinstance(arg, torch.fx.Node):
            meta = meta_of(arg)
            if isinstance(meta, torch.SymFloat):
                v = self.float_value(meta.node.expr, dtype)
            elif not self.is_tensor(arg):
                v = self.size_value(self.expr(arg), dtype)
            else:
                v = self.cast(self.value(arg), dtype)
        elif isinstance(arg, (bool, int, float)):
            v = self.scalar(arg, dtype)
        else:
            raise ConversionError(f"unsupported operand {type(arg).__name__} {arg!r}")
        return v if shape is None else self.broadcast_to(v, shape)
