"""Indexing by tensors: index_select, gather, embedding, index (one index tensor),
scatter_add, index_put(accumulate=True) and scatter with one index per row.

Core gather/scatter clamp indices into range (XLA's rule); torch wraps negative indices
and rejects out-of-range ones, so converters first map ``i < 0`` to ``i + size``.
"""

from __future__ import annotations

from typing import Any

import torch

from disc_core.dtypes import DType
from disc_core.symbolic import Expr

from ..context import ConversionError, Lowering
from .registry import ALL_DTYPES, converter

aten = torch.ops.aten


def wrap_negative(ctx: Lowering, idx, operand, axis: int):
    """torch-style negative indices: ``i + size`` where ``i < 0``."""
    size = ctx.broadcast_to(ctx.b.dim_size(operand, axis, idx.dtype), idx.shape)
    zero = ctx.full(0, idx.dtype, idx.shape)
    neg = ctx.op("compare", idx, zero, direction="lt")
    return ctx.op("select", neg, ctx.op("add", idx, size), idx)


def _index_value(ctx: Lowering, arg):
    idx = ctx.value(arg)
    if idx.dtype.is_bool or idx.dtype.is_float:
        raise ConversionError(f"index tensor of dtype {idx.dtype}")
    return idx


@converter(aten.index_select.default, dtypes=ALL_DTYPES)
def index_select(ctx, node):
    x = ctx.value(node.args[0])
    axis = node.args[1] % max(x.rank, 1)
    idx = wrap_negative(ctx, _index_value(ctx, node.args[2]), x, axis)
    return ctx.reshape(ctx.op("gather", x, idx, axis=axis), ctx.shape(node))


@converter(aten.embedding.default, dtypes=ALL_DTYPES)
def embedding(ctx, node):
    w = ctx.value(node.args[0])
    idx = wrap_negative(ctx, _index_value(ctx, node.args[1]), w, 0)
    return ctx.op("gather", w, idx, axis=0)


def _one_index(node):
    indices = node.args[1]
    real = [i for i in indices if i is not None]
    if len(real) != 1:
        return "advanced indexing with several index tensors"
    return _index_tensors_check(real)


def _index_tensors_check(real) -> str | None:
    for t in real:
        meta = t.meta.get("val") if isinstance(t, torch.fx.Node) else None
        if meta is None:
            return "index is not a tensor"
        if meta.dtype == torch.bool:
            return "boolean mask indexing (data-dependent shape)"
    return None


def _index_check(node):
    indices = list(node.args[1])
    held = [i for i, t in enumerate(indices) if t is not None]
    if not held:
        return "indexing without index tensors"
    if held != list(range(held[0], held[-1] + 1)):
        return "index tensors separated by slices (result dims move to the front)"
    return _index_tensors_check([indices[i] for i in held])


@converter(aten.index.Tensor, dtypes=ALL_DTYPES, check=_index_check)
def index(ctx, node):
    """``x[..., i, j, ...]`` with adjacent index tensors: the indexed dims are merged into
    one and gathered by the linear index ``i * size_j + j`` (indices broadcast together)."""
    x = ctx.value(node.args[0])
    indices = list(node.args[1])
    held = [i for i, t in enumerate(indices) if t is not None]
    first, last = held[0], held[-1]
    out_shape = ctx.shape(node)
    n_bcast = len(out_shape) - (x.rank - len(held))
    bshape = out_shape[first:first + n_bcast]
    linear = None
    for axis in held:
        idx = wrap_negative(ctx, _index_value(ctx, indices[axis]), x, axis)
        idx = ctx.broadcast_to(ctx.cast(idx, DType.I64), bshape)
        if linear is not None:
            size = ctx.broadcast_to(ctx.b.dim_size(x, axis, DType.I64), bshape)
            linear = ctx.op("add", ctx.op("mul", linear, size), idx)
        else:
            linear = idx
    if len(held) > 1:
        merged = Expr.const(1)
        for axis in held:
            merged = merged * x.shape[axis]
        x = ctx.reshape(x, list(x.shape[:first]) + [merged] + list(x.shape[last + 1:]))
    return ctx.op("gather", x, linear, axis=first)


@converter(aten.gather.default, dtypes=ALL_DTYPES)
def gather(ctx, node):
    x = ctx.value(node.args[0])
    axis = node.args[1] % max(x.rank, 1)
    idx = wrap_negative(ctx, _index_value(ctx, node.args[2]), x, axis)
    if x.rank == 0:
        return x
    return ctx.op("gather_elements", x, idx, axis=axis)


@converter(aten.scatter_add.default, dtypes=ALL_DTYPES)
def scatter_add(ctx, node):
    x = ctx.value(node.args[0])
    axis = node.args[1] % max(x.rank, 1)
    idx = wrap_negative(ctx, _index_value(ctx, node.args[2]), x, axis)
    src = ctx.value(node.args[3])
    if tuple(src.shape) != tuple(idx.shape):
        src = ctx.op("slice", src, start=[Expr.const(0)] * src.rank, limit=list(idx.shape),
                     stride=[1] * src.rank)
    return ctx.op("scatter_elements_add", x, idx, src, axis=axis)


def _index_put_check(node):
    accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    if not accumulate:
        return "index_put without accumulate (an overwriting scatter)"
    return _one_index(node)


@converter(aten.index_put.default, dtypes=ALL_DTYPES, check=_index_put_check)
def index_put(ctx, node):
    x = ctx.value(node.args[0])
    indices = list(node.args[1])
    axis = next(i for i, t in enumerate(indices) if t is not None)
    idx = wrap_negative(ctx, _index_value(ctx, indices[axis]), x, axis)
    gathered = list(x.shape[:axis]) + list(idx.shape) + list(x.shape[axis + 1:])
    values = ctx.operand(node.args[2], x.dtype, gathered)
    return ctx.op("scatter_add", x, idx, values, axis=axis)


def _scatter_check(node):
    idx = node.args[2].meta.get("val") if isinstance(node.args[2], torch.fx.Node) else None
    if node.kwargs.get("reduce") is not None:
        return "scatter with reduce="
    if idx is None:
        return "index has no recorded value"
    dim = node.args[1] % max(idx.dim(), 1)
    if idx.dim() == 0 or not (isinstance(idx.shape[dim], int) and idx.shape[dim] == 1):
        return "overwriting scatter with several (or a symbolic number of) indices per row"
    return None


def _pad_rows(ctx: Lowering, v: Any, fill: Any, shape: list[Expr], axis: int) -> Any:
    """``v`` (one entry along ``axis``) padded at the end of every other dim to ``shape``'s
    size there, with ``fill``."""
    low = [Expr.const(0)] * v.rank
    high = [Expr.const(0) if d == axis or v.shape[d] == shape[d] else shape[d] - v.shape[d]
            for d in range(v.rank)]
    if all(h == Expr.const(0) for h in high):
        return v
    return ctx.op("pad", v, fill, low=low, high=high)


@converter(aten.scatter.value, aten.scatter.src, dtypes=ALL_DTYPES, check=_scatter_check)
def scatter(ctx, node):
    """One index per row (one-hot, nll_loss backward): ``where(iota == index, src, x)``.

    torch lets the index be shorter than ``self`` in the other dims (rows past its end are
    left as they are); two inputs' dims of equal size are distinct symbols unless the
    program ties them, so the index is padded to ``self``'s rows with -1, which no
    position matches, by the difference (0 where the sizes turn out equal)."""
    x = ctx.value(node.args[0])
    axis = node.args[1] % x.rank
    idx = wrap_negative(ctx, _index_value(ctx, node.args[2]), x, axis)
    shape = list(x.shape)
    covered = list(idx.shape)  # the rows the index (and a src tensor) writes
    idx = _pad_rows(ctx, idx, ctx.scalar(-1, idx.dtype), shape, axis)
    positions = ctx.op("iota", shape=shape, dimension=axis, dtype=idx.dtype)
    row_idx = ctx.op("broadcast_in_dim", ctx.reshape(idx, shape[:axis] + shape[axis + 1:]),
                     shape=shape, broadcast_dimensions=[i for i in range(x.rank) if i != axis])
    hit = ctx.op("compare", positions, row_idx, direction="eq")
    src = node.args[3]
    if node.target is aten.scatter.src:
        s = ctx.value(src)
        row = ctx.op("slice", s, start=[Expr.const(0)] * s.rank, limit=covered,
                     stride=[1] * s.rank)
        row = _pad_rows(ctx, row, ctx.scalar(0, row.dtype), shape, axis)
        new = ctx.op("broadcast_in_dim", ctx.reshape(row, shape[:axis] + shape[axis + 1:]),
                     shape=shape, broadcast_dimensions=[i for i in range(x.rank) if i != axis])
        new = ctx.cast(new, x.dtype)
    else:
        new = ctx.operand(src, x.dtype, shape)
    return ctx.op("select", hit, new, x)
