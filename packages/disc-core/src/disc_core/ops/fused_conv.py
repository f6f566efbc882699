"""``fused_convolution``: a convolution with its bias and activation, one op.

``activation(convolution(lhs, rhs) + bias)``, with the attributes of ``convolution``
(``ops/linalg.py``) and an optional rank-1 ``bias`` added along the output's feature dim.
Nothing produces it but the native backend's lowering (``native/onednn_conv.py``), which
folds the bias add and ReLU that follow a convolution into it when the convolution runs as
a oneDNN primitive, where they are post-ops applied to the output while it is in cache.
The reference is the unfused computation, so the interpreter and every check see the same
semantics as the ops it replaced.

Activations: ``none``; ``relu`` = ``max(x, 0)``. With ``flip_kernel`` the kernel is read
with its taps reversed along every spatial dim: an input gradient's convolution
(``GraphBuilder.conv_input_grad``) of the forward's kernel, which oneDNN's backward-data
primitive computes from the kernel as it is (no reversed copy, no phase split of the
stride's input dilation).

``lhs_high`` and ``out_high`` (one per spatial dim, symbolic; default zeros) fold in the
zero-valued ``pad`` with a run-time edge that strided convolutions' gradients need
(``GraphBuilder.conv_input_grad`` / ``conv_filter_grad``: cut to the extent the windows
cover, or zero-extended where no window reads): ``lhs`` is read as if zero-padded
(negative: cut) at the high end of each spatial dim by ``lhs_high``, and the result is
zero-extended or cut by ``out_high``. oneDNN's right padding is derived from the sizes at
run time, so neither costs a pass over memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..ir import Op, TensorType
from ..opdef import BOOL, DIMS, STR, Attr, Ctx, Env, Fusion, LibraryCode, OpDef
from ..shape_facts import Fact
from ..symbolic import Expr
from .linalg import Convolution
from .shape_ops import provably_negative

#: activations the op applies after the bias (the oneDNN post-ops they map to: relu)
ACTIVATIONS = ("none", "relu")


class FusedConvolution(OpDef):
    """activation(convolution(lhs, rhs) + bias); see the module docstring."""

    name = "fused_convolution"
    operands = ("lhs", "rhs", "*bias")
    attrs = {**Convolution.attrs,
             "activation": Attr(STR, "none", choices=ACTIVATIONS,
                                doc="applied after the bias: none or relu"),
             "flip_kernel": Attr(BOOL, False,
                                 doc="the kernel's taps are read in reverse along every "
                                     "spatial dim (an input gradient's flipped kernel, "
                                     "never materialized)"),
             "lhs_high": Attr(DIMS, None, fill_like=("padding", 0),
                              doc="per spatial dim: lhs read as zero-padded (negative: cut) "
                                  "at its high end by this much"),
             "out_high": Attr(DIMS, None, fill_like=("padding", 0),
                              doc="per spatial dim: the result zero-extended (negative: "
                                  "cut) at its high end by this much")}
    traits = frozenset({"pure"})
    #: a library call of its own (oneDNN's convolution primitive, native/onednn_conv.py)
    fusion = Fusion.LIBRARY

    @staticmethod
    def _conv_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in attrs.items()
                if k not in ("activation", "flip_kernel", "lhs_high", "out_high")}

    @staticmethod
    def _spatial_axes(layout: str) -> list[int]:
        return [layout.index(ch) for ch in layout if ch not in "NC"]

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        if len(ctx.types) > 3:
            ctx.fail(f"expected at most one bias operand, got {len(ctx.types) - 2}")
        lhs = ctx.types[0]
        lhs_axes = cls._spatial_axes(attrs["input_layout"])
        out_axes = cls._spatial_axes(attrs["output_layout"])
        for name, axes in (("lhs_high", lhs_axes), ("out_high", out_axes)):
            if len(attrs[name]) != len(axes):
                ctx.fail(f"attribute {name} has {len(attrs[name])} entries, expected one per "
                         f"spatial dim ({len(axes)})")
        lhs = lhs.with_shape(_extended(ctx, "lhs", lhs.shape, lhs_axes, attrs["lhs_high"]))
        [out] = Convolution.infer(Ctx(cls, [lhs, ctx.types[1]]), cls._conv_attrs(attrs))
        out = out.with_shape(_extended(ctx, "result", out.shape, out_axes, attrs["out_high"]))
        if len(ctx.types) == 3:
            ctx.rank(2, 1)
            ctx.same_dtype(0, 2)
            feats = out.shape[attrs["output_layout"].index("C")]
            ctx.unify(ctx.types[2].shape[0], feats,
                      f"bias length of {ctx.operand_name(2)} vs output features")
        return [out]

    @classmethod
    def facts(cls, op: Op) -> Iterable[Fact]:
        return Convolution.facts(op)

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> list[np.ndarray]:
        lhs, rhs = inputs[:2]
        lhs = _zero_extend_or_cut(lhs, cls._spatial_axes(attrs["input_layout"]),
                                  env.shape(attrs["lhs_high"]))
        if attrs.get("flip_kernel"):
            kl = attrs["kernel_layout"]
            rhs = np.flip(rhs, axis=[kl.index(ch) for ch in kl if ch not in "OI"])
        y = Convolution.reference([lhs, np.ascontiguousarray(rhs)], cls._conv_attrs(attrs), env)
        y = y[0] if isinstance(y, list) else y
        if len(inputs) == 3:
            shape = [1] * y.ndim
            axis = attrs["output_layout"].index("C")
            shape[axis] = -1
            y = (y + inputs[2].reshape(shape)).astype(y.dtype)
        if attrs["activation"] == "relu":
            y = np.maximum(y, np.zeros((), y.dtype))
        y = _zero_extend_or_cut(y, cls._spatial_axes(attrs["output_layout"]),
                                env.shape(attrs["out_high"]))
        return [y]

    @classmethod
    def library_call(cls, op: Op, ptr: Any, syms: Any) -> LibraryCode:
        from ..native.onednn_conv import emit_fused_convolution

        return emit_fused_convolution(op, ptr, syms)


def _extended(ctx: Ctx, what: str, shape: Sequence[Expr], axes: list[int],
              highs: Sequence[Expr]) -> list[Expr]:
    """``shape`` with each of ``axes`` grown by its entry of ``highs`` (never negative)."""
    out = list(shape)
    for ax, h in zip(axes, highs):
        if h != 0:
            out[ax] = out[ax] + h
            if provably_negative(out[ax]):
                ctx.fail(f"{what} dim {ax} cut by {h} has negative size {out[ax]}")
    return out


def _zero_extend_or_cut(x: np.ndarray, axes: list[int], highs: Iterable[int]) -> np.ndarray:
    """``x`` with each of ``axes`` zero-extended (h > 0) or cut (h < 0) at its high end."""
    for ax, h in zip(axes, highs):
        if h < 0:
            x = x[(slice(None),) * ax + (slice(0, x.shape[ax] + h),)]
        elif h > 0:
            widths = [(0, 0)] * x.ndim
            widths[ax] = (0, h)
            x = np.pad(x, widths)
    return np.ascontiguousarray(x)
