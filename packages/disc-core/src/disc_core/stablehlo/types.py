"""The MLIR side of the DISC <-> StableHLO bridge: contexts, element types, tensor types.

jaxlib is imported here and only inside ``disc_core.stablehlo``, so ``import disc_core``
stays free of it (the ``mlir`` extra installs it). Everything that touches MLIR objects goes
through :func:`new_context`, which loads the dialects a StableHLO module uses (func,
stablehlo, chlo) so that ``verify()`` and the parser know them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import TensorType
from ..symbolic import Expr

try:  # pragma: no cover - exercised by whether the extra is installed
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import chlo
    from jaxlib.mlir.dialects import stablehlo as hlo
except ImportError as exc:  # pragma: no cover
    raise ImportError(
        "disc_core.stablehlo needs the MLIR Python bindings that ship in jaxlib: "
        "pip install 'disc-core[mlir]'") from exc

__all__ = ["StableHLOError", "UnsupportedStableHLOError", "element_type", "dtype_of_element",
           "hlo", "chlo", "ir", "new_context", "tensor_type", "DYNAMIC"]


class StableHLOError(ValueError):
    """A graph or module cannot be converted; the message names the op and the reason."""


class UnsupportedStableHLOError(StableHLOError):
    """The module uses ops (or forms of ops) DISC has no mapping for: ``ops`` names them."""

    def __init__(self, ops: dict[str, str]):
        self.ops = dict(ops)
        lines = "\n".join(f"  {name}: {why}" for name, why in sorted(self.ops.items()))
        super().__init__(f"{len(self.ops)} unsupported StableHLO op(s):\n{lines}")


DYNAMIC: int = ir.ShapedType.get_dynamic_size()


def new_context() -> ir.Context:
    """A context with the func, stablehlo and chlo dialects loaded.

    jaxlib registers the upstream dialects (func, arith, ...) through its private
    ``_jax_mlir_ext``; stablehlo and chlo have public registration helpers. Without the
    registrations ``verify()`` rejects ``func.return`` as an unregistered op.
    """
    ctx = ir.Context()
    try:
        from jaxlib.mlir._mlir_libs import _jax_mlir_ext

        registry = ir.DialectRegistry()
        _jax_mlir_ext.register_dialects(registry)
        ctx.append_dialect_registry(registry)
        ctx.load_all_available_dialects()
    except (ImportError, AttributeError):  # pragma: no cover - older/newer jaxlib layout
        ctx.allow_unregistered_dialects = False
    hlo.register_dialect(ctx)
    chlo.register_dialect(ctx)
    return ctx


def element_type(dt: DType) -> Any:
    """The MLIR element type of a DISC dtype (bool is ``i1``, u8 is ``ui8``)."""
    if dt is DType.BOOL:
        return ir.IntegerType.get_signless(1)
    if dt is DType.U8:
        return ir.IntegerType.get_unsigned(8)
    if dt.is_int:
        return ir.IntegerType.get_signless(dt.bits)
    return {DType.F16: ir.F16Type, DType.BF16: ir.BF16Type, DType.F32: ir.F32Type,
            DType.F64: ir.F64Type}[dt].get()


def dtype_of_element(t: Any, where: str) -> DType:
    """The DISC dtype of an MLIR element type; anything else is a StableHLOError."""
    text = str(t)
    table = {"i1": DType.BOOL, "i8": DType.I8, "i16": DType.I16, "i32": DType.I32,
             "i64": DType.I64, "ui8": DType.U8, "f16": DType.F16, "bf16": DType.BF16,
             "f32": DType.F32, "f64": DType.F64}
    if text not in table:
        raise StableHLOError(f"{where}: element type {text} has no DISC dtype (supported: "
                             f"{', '.join(table)})")
    return table[text]


def static_dims(shape: tuple[Expr, ...]) -> list[int]:
    """Dims for an MLIR tensor type: a constant dim as itself, any symbolic one as ``?``."""
    return [d.value if d.is_const else DYNAMIC for d in shape]


def tensor_type(t: TensorType) -> Any:
    """``RankedTensorType`` of a DISC type: symbolic dims become ``?``."""
    return ir.RankedTensorType.get(static_dims(t.shape), element_type(t.dtype))


def scalar_type(dt: DType) -> Any:
    return ir.RankedTensorType.get([], element_type(dt))


def dense(arr: np.ndarray, t: Any) -> Any:
    """A DenseElementsAttr of ``arr`` (any DISC dtype, bf16 and bool included) as type ``t``."""
    return ir.DenseElementsAttr.get(np.ascontiguousarray(arr), type=t)
