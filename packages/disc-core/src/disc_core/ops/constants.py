"""Ops that create values from attributes alone: constant and iota."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..dtypes import NUMERIC_DTYPES, dtype_of
from ..ir import Op, TensorType
from ..opdef import ARRAY, DIMS, DTYPE, INT, Attr, Ctx, Env, Fusion, KernelContext, OpDef


class Constant(OpDef):
    """A literal tensor. Its shape is static by construction."""

    name = "constant"
    attrs = {"value": Attr(ARRAY)}
    traits = frozenset({"pure", "constant"})
    #: a scalar is a C literal in every kernel that reads it; a larger constant is a
    #: static array (never a step of its own)
    fusion = Fusion.DUPLICABLE

    @classmethod
    def c_kernel(cls, op: Op, ctx: KernelContext) -> str:
        return ctx.literal(op.attrs["value"].array.item(), op.results[0].dtype)

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        arr = attrs["value"].array
        return [TensorType.of(dtype_of(arr.dtype), arr.shape)]

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        return attrs["value"].array


class Iota(OpDef):
    """A tensor of ``shape`` whose value is its index along ``dimension``."""

    name = "iota"
    attrs = {"shape": Attr(DIMS), "dimension": Attr(INT), "dtype": Attr(DTYPE)}
    traits = frozenset({"pure"})
    fusion = Fusion.DUPLICABLE

    @classmethod
    def c_kernel(cls, op: Op, ctx: KernelContext) -> str:
        return f"({ctx.ctype(op.results[0].dtype)})({ctx.index(op.attrs['dimension'])})"

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        ctx.axis(attrs["dimension"], len(attrs["shape"]), "dimension")
        if attrs["dtype"] not in NUMERIC_DTYPES:
            ctx.fail(f"attribute dtype={attrs['dtype'].short} must be a numeric dtype")
        return [TensorType(attrs["dtype"], attrs["shape"])]

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        shape = env.tensor_shape(attrs["shape"])
        d = attrs["dimension"]
        idx = np.arange(shape[d]).reshape([-1 if i == d else 1 for i in range(len(shape))])
        return np.broadcast_to(idx, shape).astype(attrs["dtype"].np)
