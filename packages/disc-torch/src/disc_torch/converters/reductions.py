"""Reductions: sum, mean, prod, amax/amin, var/var_mean, argmax/argmin, any/all, max/min.dim;
and the scan cumsum.

Torch's ``keepdim`` is a reshape of the reduced value to the result shape torch recorded;
an empty ``dim`` list means every dim (``sum(x, [])`` sums everything, as in torch).
"""

from __future__ import annotations

from typing import Any

import torch

from disc_core.dtypes import DType
from disc_core.symbolic import Expr

from ..context import ConversionError, Lowering, core_dtype
from .registry import ALL_DTYPES, FLOAT_DTYPES, NUMERIC_DTYPES, converter

aten = torch.ops.aten


def axes_of(rank: int, dim: Any) -> list[int]:
    """torch's dim argument (int, list, None or []) as sorted non-negative axes."""
    if dim is None:
        return list(range(rank))
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims or rank == 0:  # torch: [] means every dim; a scalar has none
        return list(range(rank))
    return sorted({d % rank for d in dims})


def _arg(node: torch.fx.Node, i: int, name: str, default: Any) -> Any:
    return node.args[i] if len(node.args) > i else node.kwargs.get(name, default)


def reduce(ctx: Lowering, v, kind: str, axes: list[int]):
    return ctx.op("reduce", v, kind=kind, axes=axes) if axes else v


def _finish(ctx: Lowering, node: torch.fx.Node, v):
    return ctx.reshape(v, ctx.shape(node))


def _sum_like(ctx: Lowering, node: torch.fx.Node, kind: str):
    x = ctx.value(node.args[0])
    dt = ctx.dtype(node)
    dim = None if node.target._overloadname == "default" else _arg(node, 1, "dim", None)
    axes = axes_of(x.rank, dim)
    v = reduce(ctx, ctx.cast(x, dt), kind, axes)
    return _finish(ctx, node, v), x, axes, dt


@converter(aten.sum.dim_IntList, aten.sum.default, dtypes=ALL_DTYPES)
def sum_(ctx, node):
    return _sum_like(ctx, node, "sum")[0]


@converter(aten.prod.dim_int, aten.prod.default, dtypes=NUMERIC_DTYPES | {torch.bool})
def prod(ctx, node):
    return _sum_like(ctx, node, "prod")[0]


@converter(aten.mean.dim, aten.mean.default, dtypes=FLOAT_DTYPES)
def mean(ctx, node):
    x = ctx.value(node.args[0])
    dt = ctx.dtype(node)
    axes = axes_of(x.rank, None if node.target._overloadname == "default"
                   else _arg(node, 1, "dim", None))
    s = reduce(ctx, ctx.cast(x, dt), "sum", axes)
    n = ctx.b.element_count(x, axes, dt)
    return _finish(ctx, node, ctx.op("div", s, ctx.broadcast_to(n, s.shape)))


@converter(aten.amax.default, aten.amin.default, aten.max.default, aten.min.default,
           dtypes=ALL_DTYPES)
def amax(ctx, node):
    x = ctx.value(node.args[0])
    kind = "max" if node.target.overloadpacket in (aten.amax, aten.max) else "min"
    dim = _arg(node, 1, "dim", None) if node.target.overloadpacket in (aten.amax,
                                                                      aten.amin) else None
    if x.dtype.is_bool:
        kind = "or" if kind == "max" else "and"
    return _finish(ctx, node, reduce(ctx, x, kind, axes_of(x.rank, dim)))


@converter(aten.any.default, aten.any.dim, aten.any.dims, aten.all.default, aten.all.dim,
           aten.all.dims, dtypes=ALL_DTYPES)
def any_all(ctx, node):
    x = ctx.value(node.args[0])
    if not x.dtype.is_bool:
        x = ctx.op("compare", x, ctx.full(0, x.dtype, x.shape), direction="ne")
    kind = "or" if node.target.overloadpacket is aten.any else "and"
    dim = None if node.target._overloadname == "default" else _arg(node, 1, "dim", None)
    return _finish(ctx, node, reduce(ctx, x, kind, axes_of(x.rank, dim)))


def _variance(ctx: Lowering, node: torch.fx.Node):
    x = ctx.value(node.args[0])
    meta = node.meta["val"]
    dt = ctx.dtype(node) if not isinstance(meta, tuple) else core_dtype(meta[0].dtype)
    x = ctx.cast(x, dt)
    axes = axes_of(x.rank, _arg(node, 1, "dim", None))
    correction = node.kwargs.get("correction", 1)
    if correction is None:
        correction = 1
    if not isinstance(correction, (int, float)):
        raise ConversionError("correction computed at run time")
    n = ctx.b.element_count(x, axes, dt)
    total = reduce(ctx, x, "sum", axes)
    mean = ctx.op("div", total, ctx.broadcast_to(n, total.shape))
    centred = ctx.op("sub", x, ctx.op("broadcast_in_dim", mean, shape=list(x.shape),
                                      broadcast_dimensions=[i for i in range(x.rank)
                                                            if i not in axes]))
    sq = reduce(ctx, ctx.op("mul", centred, centred), "sum", axes)
    denom = ctx.op("sub", n, ctx.scalar(correction, dt)) if correction else n
    return ctx.op("div", sq, ctx.broadcast_to(denom, sq.shape)), mean


@converter(aten.var.correction, aten.var.dim, dtypes=FLOAT_DTYPES)
def var(ctx, node):
    v, _ = _variance(ctx, node)
    return _finish(ctx, node, v)


@converter(aten.var_mean.correction, aten.var_mean.dim, dtypes=FLOAT_DTYPES)
def var_mean(ctx, node):
    v, m = _variance(ctx, node)
    shape = ctx.shape(node.meta["val"][0])
    return ctx.reshape(v, shape), ctx.reshape(m, shape)


@converter(aten.argmax.default, aten.argmin.default, dtypes=NUMERIC_DTYPES)
def argmax(ctx, node):
    x = ctx.value(node.args[0])
    dim = _arg(node, 1, "dim", None)
    name = "argmax" if node.target.overloadpacket is aten.argmax else "argmin"
    if dim is None:
        n = Expr.const(1)
        for d in x.shape:
            n = n * d
        x, axis = ctx.reshape(x, [n]), 0
    else:
        axis = dim % max(x.rank, 1)
    if x.rank == 0:
        return ctx.full(0, ctx.dtype(node), ())
    return _finish(ctx, node, ctx.op(name, x, axis=axis, index_dtype=DType.I64))


@converter(aten.max.dim, aten.min.dim, dtypes=NUMERIC_DTYPES)
def max_dim(ctx, node):
    x = ctx.value(node.args[0])
    axis = node.args[1] % max(x.rank, 1)
    is_max = node.target.overloadpacket is aten.max
    values = reduce(ctx, x, "max" if is_max else "min", [axis])
    idx = ctx.op("argmax" if is_max else "argmin", x, axis=axis, index_dtype=DType.I64)
    shape = ctx.shape(node.meta["val"][0])
    return ctx.reshape(values, shape), ctx.reshape(idx, shape)


@converter(aten.cumsum.default, dtypes=ALL_DTYPES)
def cumsum(ctx, node):
    """A running sum along ``dim`` in the result's dtype (torch casts first: integer and
    bool inputs give int64, ``dtype=`` picks another); a scalar is its own cumsum. The
    backward (torch's reversed cumsum) arrives as flip, cumsum, flip."""
    x = ctx.cast(ctx.value(node.args[0]), ctx.dtype(node))
    if x.rank == 0:
        return x
    return ctx.op("cumulative", x, kind="sum", axis=_arg(node, 1, "dim", 0) % x.rank)
