"""Sorting: ``sort`` (values and permutation along one dim) and ``top_k``.

Both order as ``torch.sort(stable=True)`` / ``torch.topk`` do: NaN counts as larger than
every number (so it sorts last ascending and first descending), -0.0 and 0.0 are equal,
and equal elements (NaNs included) keep their original order in either direction, so
ties resolve to the lower index first. The index result is i64.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..dtypes import ALL_DTYPES, NUMERIC_DTYPES, DType, dtype_of
from ..ir import TensorType
from ..opdef import BOOL, INT, Attr, Ctx, Env, InterpretError, OpDef
from ..symbolic import Expr


def stable_order(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """The i64 permutation sorting ``x`` along ``axis`` (see the module docstring)."""
    xc = x.astype(dtype_of(x.dtype).compute_np, copy=False)
    if not descending:
        return np.argsort(xc, axis=axis, kind="stable").astype(np.int64)
    # Stable descending: stably sort the reversed array ascending (NaN last), then read
    # the result backwards; ties come out in increasing original index.
    n = x.shape[axis]
    rev = np.argsort(np.flip(xc, axis), axis=axis, kind="stable").astype(np.int64)
    return np.flip(n - 1 - rev, axis)


class Sort(OpDef):
    """Sort ``x`` along ``dimension``; results: the sorted values and the i64 indices
    into ``x`` they came from (``values == take_along_axis(x, indices, dimension)``).

    Stable in both directions; NaN is the largest value (torch semantics, see the module
    docstring). Any dtype.
    """

    name = "sort"
    operands = ("x",)
    attrs = {"dimension": Attr(INT, doc="the axis sorted along"),
             "descending": Attr(BOOL, default=False)}
    traits = frozenset({"pure"})

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        ctx.dtype_in(0, ALL_DTYPES)
        x = ctx.types[0]
        ctx.axis(attrs["dimension"], x.rank, "dimension")
        return [x, x.with_dtype(DType.I64)]

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> list[np.ndarray]:
        x = inputs[0]
        axis = attrs["dimension"]
        if not 0 <= axis < x.ndim:
            raise InterpretError(f"sort: dimension={axis} out of range for an input of "
                                 f"shape {x.shape}")
        idx = stable_order(x, axis, attrs["descending"])
        return [np.take_along_axis(x, idx, axis), idx]


class TopK(OpDef):
    """The ``k`` largest elements along the last dim, in descending order, and their i64
    indices. Results have shape ``x.shape[:-1] + [k]``.

    Ties give the lower index first; NaN is the largest value (``torch.topk``). ``k`` must
    not exceed the last dim: a VerifyError when that dim is static, an InterpretError at
    run time when it is symbolic. Numeric dtypes.
    """

    name = "top_k"
    operands = ("x",)
    attrs = {"k": Attr(INT, doc="how many elements to keep (0 <= k <= last dim)")}
    traits = frozenset({"pure"})

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        ctx.dtype_in(0, NUMERIC_DTYPES, "a numeric dtype:")
        x = ctx.types[0]
        k = attrs["k"]
        if x.rank < 1:
            ctx.fail(f"operand #0 'x' ({x}) must have rank >= 1")
        if k < 0:
            ctx.fail(f"attribute k={k} must be >= 0")
        last = x.shape[-1]
        if last.is_const and k > last.value:
            ctx.fail(f"attribute k={k} exceeds the last dim of operand #0 'x' ({x})")
        shape = x.shape[:-1] + (Expr.const(k),)
        return [x.with_shape(shape), TensorType(DType.I64, shape)]

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> list[np.ndarray]:
        x = inputs[0]
        k = attrs["k"]
        if x.ndim < 1 or not 0 <= k <= x.shape[-1]:
            raise InterpretError(f"top_k: k={k} does not fit the last dim of an input of "
                                 f"shape {x.shape}")
        idx = np.ascontiguousarray(stable_order(x, -1, True)[..., :k])
        return [np.take_along_axis(x, idx, -1), idx]
