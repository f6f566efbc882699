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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..ir import Op, TensorType
from ..opdef import BOOL, STR, Attr, Ctx, Env, Fusion, LibraryCode, OpDef
from ..shape_facts import Fact
from .linalg import Convolution

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
                                     "never materialized)")}
    traits = frozenset({"pure"})
    #: a library call of its own (oneDNN's convolution primitive, native/onednn_conv.py)
    fusion = Fusion.LIBRARY

    @staticmethod
    def _conv_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in attrs.items() if k not in ("activation", "flip_kernel")}

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        if len(ctx.types) > 3:
            ctx.fail(f"expected at most one bias operand, got {len(ctx.types) - 2}")
        [out] = Convolution.infer(Ctx(cls, ctx.types[:2]), cls._conv_attrs(attrs))
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
        return [y]

    @classmethod
    def library_call(cls, op: Op, ptr: Any, syms: Any) -> LibraryCode:
        from ..native.onednn_conv import emit_fused_convolution

        return emit_fused_convolution(op, ptr, syms)
