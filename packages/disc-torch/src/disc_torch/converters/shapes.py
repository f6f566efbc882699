"""Views, layout changes, concatenation, padding and tensor creation.

In a functional ATen graph a view is just a new value, so views become reshapes,
transposes, slices and broadcasts; aliasing is aot_autograd's business, not ours. Result
shapes come from the recorded fake tensors (``-1`` and SymInt arithmetic are already
resolved there).
"""

from __future__ import annotations

from typing import Any

import torch

from disc_core.bridge.windows import spread
from disc_core.dtypes import DType
from disc_core.symbolic import Expr, product

from ..context import ConversionError, Lowering
from .registry import ALL_DTYPES, NUMERIC_DTYPES, converter

aten = torch.ops.aten

BIG = 2 ** 62  # torch writes "to the end" as INT64_MAX


def _squeeze_check(node):
    """A squeeze drops exactly the size-1 dims among its candidates, decided by the sizes
    of each call. Traced with sizes 0 and 1 like any other size, a symbolic candidate was
    kept (assumed not 1), which is wrong whenever it is 1 at run time: only static
    candidates are compiled; the rest runs in torch, which squeezes what the call has."""
    shape = node.args[0].meta["val"].shape
    if not shape:
        return None
    if node.target is aten.squeeze.default:
        dims = range(len(shape))
    else:
        dims = node.args[1] if node.target is aten.squeeze.dims else [node.args[1]]
    if any(not isinstance(shape[d % len(shape)], int) for d in dims):
        return "squeeze of a dim whose size is known only at run time (it may be 1)"
    return None


@converter(aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, dtypes=ALL_DTYPES,
           check=_squeeze_check)
@converter(aten.view.default, aten._unsafe_view.default, aten.reshape.default,
           aten.unsqueeze.default, aten.alias.default, aten.clone.default,
           aten.lift_fresh_copy.default, aten.detach.default, aten.contiguous.default,
           aten.flatten.using_ints, aten._reshape_alias.default, dtypes=ALL_DTYPES)
def reshape(ctx, node):
    return ctx.reshape(ctx.value(node.args[0]), ctx.shape(node))


def _to_copy_check(node):
    device = node.kwargs.get("device")
    if device is not None and torch.device(device).type != "cpu":
        return f"copy to device {device}"
    return None


@converter(aten._to_copy.default, aten.to.dtype, torch.ops.prims.convert_element_type.default,
           dtypes=ALL_DTYPES, check=_to_copy_check)
def to_copy(ctx, node):
    return ctx.cast(ctx.value(node.args[0]), ctx.dtype(node))


@converter(aten.copy.default, dtypes=ALL_DTYPES)
def copy(ctx, node):
    """The functional form of ``self.copy_(src)``, which an in-place assignment such as
    ``ids[..., 1:] = x[..., :-1]`` becomes (with a ``slice_scatter`` around it; T5 shifts
    its labels so): ``src`` broadcast to ``self``'s shape in ``self``'s dtype. ``self``'s
    values are not read. Uncompiled, it ran in torch and split T5's graph in four."""
    return ctx.cast(ctx.broadcast_to(ctx.value(node.args[1]), ctx.shape(node)),
                    ctx.dtype(node))


def _as_strided_check(node):
    x = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    if not isinstance(x, torch.Tensor):
        return "as_strided of a non-tensor"
    try:
        contiguous = bool(x.is_contiguous())
    except Exception:  # a layout fake tensors cannot decide without a guard
        contiguous = False
    if not contiguous:  # its storage order is not the row-major order a cluster keeps
        return "as_strided of a tensor that is not contiguous"
    return None


def _strided_layout(ctx: Lowering, node: Any) -> tuple[list[Expr], list[Expr], Expr, bool]:
    """The sizes, strides and offset (from the first element of the contiguous tensor
    ``node.args[0]``, whose storage offset it subtracts) of ``as_strided``-style arguments
    starting at ``node.args[pos]``, and whether they describe a window of contiguous
    elements: strides row-major over the dims larger than 1 (size-1 dims may have any
    stride, as Swin's pooler gives them)."""
    pos = 2 if node.target is aten.as_strided_scatter.default else 1
    meta = node.args[0].meta["val"]
    sizes = [ctx.expr(v) for v in node.args[pos]]
    strides = [ctx.expr(v) for v in node.args[pos + 1]]
    given = node.args[pos + 2] if len(node.args) > pos + 2 else node.kwargs.get("storage_offset")
    offset = (Expr.const(0) if given is None
              else ctx.expr(given) - ctx.expr(meta.storage_offset()))
    count, row_major = Expr.const(1), True
    for d, st in zip(reversed(sizes), reversed(strides)):
        if d != Expr.const(1) and st != count:
            row_major = False
        count = count * d
    return sizes, strides, offset, row_major


@converter(aten.as_strided.default, aten.as_strided_copy.default, dtypes=ALL_DTYPES,
           check=_as_strided_check)
def as_strided(ctx, node):
    """Element ``i`` of the result is element ``offset + sum(i_k * stride_k)`` of ``x``'s
    row-major storage (``x`` is contiguous: the check). Sizes, strides and the offset may
    be sizes known at run time. A window of contiguous elements is a slice and a reshape;
    any other layout gathers by computed positions (clamped in range, as core's gather
    is; torch rejects out-of-range layouts before)."""
    x = ctx.value(node.args[0])
    sizes, strides, offset, row_major = _strided_layout(ctx, node)
    flat = ctx.reshape(x, [product(x.shape)])
    if row_major:
        count = product(sizes)
        window = ctx.op("slice", flat, start=[offset], limit=[offset + count], stride=[1])
        return ctx.reshape(window, sizes)
    position = ctx.broadcast_to(ctx.size_value(offset, DType.I64), sizes)
    for k, st in enumerate(strides):
        step = ctx.op("mul", ctx.op("iota", shape=sizes, dimension=k, dtype=DType.I64),
                      ctx.broadcast_to(ctx.size_value(st, DType.I64), sizes))
        position = ctx.op("add", position, step)
    return ctx.op("gather", flat, position, axis=0)


@converter(aten.as_strided_scatter.default, dtypes=ALL_DTYPES, check=_as_strided_check)
def as_strided_scatter(ctx, node):
    """``input`` with ``src`` written over its ``as_strided`` view: how autograd writes the
    gradient of an ``as_strided`` (over zeros of the storage's size, then viewed back), as
    in Swin's pooler. A window of contiguous elements is ``src`` padded into place and a
    select over the flat storage. Other layouts run in torch: where positions repeat, the
    result depends on the order torch writes them in (autograd itself takes an
    ``index_put`` with accumulation for those)."""
    x = ctx.value(node.args[0])
    src = ctx.cast(ctx.value(node.args[1]), x.dtype)
    sizes, _, offset, row_major = _strided_layout(ctx, node)
    if not row_major:
        raise ConversionError("as_strided_scatter of a layout other than a window of "
                              "contiguous elements")
    count, total = product(sizes), product(x.shape)
    if count == Expr.const(0):
        return x
    flat = ctx.reshape(x, [total])
    placed = _place(ctx, ctx.reshape(src, [count]), ctx.scalar(0, x.dtype), 0, offset, 1,
                    total)
    where = _place(ctx, ctx.full(True, DType.BOOL, [count]), ctx.scalar(False, DType.BOOL),
                   0, offset, 1, total)
    return ctx.reshape(ctx.op("select", where, placed, flat), x.shape)


@converter(aten.permute.default, dtypes=ALL_DTYPES)
def permute(ctx, node):
    x = ctx.value(node.args[0])
    perm = [d % max(x.rank, 1) for d in node.args[1]]
    if perm == list(range(x.rank)):
        return x
    return ctx.op("transpose", x, permutation=perm)


@converter(aten.t.default, aten.transpose.int, aten.numpy_T.default, dtypes=ALL_DTYPES)
def transpose(ctx, node):
    x = ctx.value(node.args[0])
    if x.rank < 2:
        return x
    if node.target is aten.transpose.int:
        a, b = (d % x.rank for d in node.args[1:3])
    else:
        a, b = 0, 1
    perm = list(range(x.rank))
    perm[a], perm[b] = perm[b], perm[a]
    if a == b:
        return x
    return ctx.op("transpose", x, permutation=perm)


@converter(aten.expand.default, aten.expand_copy.default, dtypes=ALL_DTYPES)
def expand(ctx, node):
    return ctx.broadcast_to(ctx.value(node.args[0]), ctx.shape(node))


def _index(ctx: Lowering, value: Any, size: Expr, *, is_end: bool) -> Expr:
    """A slice bound (int or SymInt, maybe negative or past the end) as a core dim."""
    if value is None:
        return size if is_end else Expr.const(0)
    e = ctx.expr(value)
    if e.is_const:
        v = e.value
        if v >= BIG:
            return size
        if v < 0:
            if size.is_const:
                return Expr.const(max(size.value + v, 0))
            return size + v
        if size.is_const:
            return Expr.const(min(v, size.value))
        return e
    return e


def _slice_check(node):
    step = node.args[4] if len(node.args) > 4 else node.kwargs.get("step", 1)
    return None if isinstance(step, int) and step >= 1 else f"slice step {step!r}"


@converter(aten.slice.Tensor, dtypes=ALL_DTYPES, check=_slice_check)
def slice_(ctx, node):
    x = ctx.value(node.args[0])
    dim = (node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)) % x.rank
    start = node.args[2] if len(node.args) > 2 else node.kwargs.get("start")
    step = node.args[4] if len(node.args) > 4 else node.kwargs.get("step", 1)
    size = x.shape[dim]
    lo = _index(ctx, start, size, is_end=False)
    out_len = ctx.shape(node)[dim]
    if lo == Expr.const(0) and out_len == size and step == 1:
        return x
    hi = lo + out_len if step == 1 else lo + (out_len - 1) * step + 1
    starts = [Expr.const(0)] * x.rank
    limits = list(x.shape)
    strides = [1] * x.rank
    starts[dim], limits[dim], strides[dim] = lo, hi, step
    return ctx.op("slice", x, start=starts, limit=limits, stride=strides)


@converter(aten.select.int, dtypes=ALL_DTYPES)
def select(ctx, node):
    x = ctx.value(node.args[0])
    dim = node.args[1] % x.rank
    index = ctx.expr(node.args[2])
    size = x.shape[dim]
    if index.is_const and index.value < 0:
        index = size + index.value
    starts = [Expr.const(0)] * x.rank
    limits = list(x.shape)
    starts[dim], limits[dim] = index, index + 1
    s = ctx.op("slice", x, start=starts, limit=limits, stride=[1] * x.rank)
    return ctx.reshape(s, ctx.shape(node))


def _place(ctx: Lowering, v: Any, fill: Any, dim: int, start: Expr, step: int, size: Expr
           ) -> Any:
    """``v`` laid out along ``dim`` of a tensor ``size`` long, element k at ``start + k *
    step`` and ``fill`` everywhere else: the inverse of a slice."""
    v = spread(ctx, v, fill, dim, step, size - start)
    low, high = [Expr.const(0)] * v.rank, [Expr.const(0)] * v.rank
    low[dim], high[dim] = start, size - start - v.shape[dim]
    return ctx.op("pad", v, fill, low=low, high=high)


def _slice_scatter_check(node):
    step = node.args[5] if len(node.args) > 5 else node.kwargs.get("step", 1)
    if not (isinstance(step, int) and step >= 1):
        return f"slice_scatter step {step!r}"
    return None


@converter(aten.slice_scatter.default, dtypes=ALL_DTYPES, check=_slice_scatter_check)
def slice_scatter(ctx, node):
    """``input`` with ``src`` written over the slice ``start:end:step`` of ``dim`` (what
    autograd makes of a slice's gradient, over zeros): a select between ``input`` and
    ``src`` placed by padding, so it fuses with its producers and users."""
    x = ctx.value(node.args[0])
    u = ctx.cast(ctx.value(node.args[1]), x.dtype)
    dim = (node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)) % x.rank
    start = node.args[3] if len(node.args) > 3 else node.kwargs.get("start")
    step = node.args[5] if len(node.args) > 5 else node.kwargs.get("step", 1)
    start = _index(ctx, start, x.shape[dim], is_end=False)
    if u.shape[dim] == Expr.const(0):
        return x
    size = x.shape[dim]
    if start == Expr.const(0) and step == 1 and u.shape[dim] == size:
        return u
    placed = _place(ctx, u, ctx.scalar(0, u.dtype), dim, start, step, size)
    where = _place(ctx, ctx.full(True, DType.BOOL, u.shape), ctx.scalar(False, DType.BOOL),
                   dim, start, step, size)
    return ctx.op("select", where, placed, x)


@converter(aten.cat.default, dtypes=ALL_DTYPES)
def cat(ctx, node):
    tensors = node.args[0]
    dt = ctx.dtype(node)
    out_rank = len(ctx.shape(node))
    dim = (node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)) % out_rank
    parts = []
    for t in tensors:
        v = ctx.value(t)
        if v.rank == 1 and out_rank != 1 and v.shape[0] == Expr.const(0):
            continue  # torch skips legacy empty 1-d inputs
        if v.shape[dim] == Expr.const(0):
            continue
        parts.append(ctx.cast(v, dt))
    if not parts:
        return ctx.full(0, dt, ctx.shape(node))
    if len(parts) == 1:
        return parts[0]
    return ctx.op("concatenate", *parts, dimension=dim)


@converter(aten.split_with_sizes.default, aten.split.Tensor, aten.unbind.int,
           dtypes=ALL_DTYPES)
def split(ctx, node):
    x = ctx.value(node.args[0])
    is_unbind = node.target is aten.unbind.int
    dim_pos = 1 if is_unbind else 2
    dim = (node.args[dim_pos] if len(node.args) > dim_pos else node.kwargs.get("dim", 0))
    dim %= x.rank
    outs = []
    offset = Expr.const(0)
    for meta in node.meta["val"]:
        shape = ctx.shape(meta)
        length = Expr.const(1) if is_unbind else shape[dim]
        starts = [Expr.const(0)] * x.rank
        limits = list(x.shape)
        starts[dim], limits[dim] = offset, offset + length
        s = ctx.op("slice", x, start=starts, limit=limits, stride=[1] * x.rank)
        outs.append(ctx.reshape(s, shape))
        offset = offset + length
    return tuple(outs)


@converter(aten.stack.default, dtypes=ALL_DTYPES)
def stack(ctx, node):
    shape = ctx.shape(node)
    dim = (node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)) % len(shape)
    dt = ctx.dtype(node)
    parts = []
    for t in node.args[0]:
        v = ctx.cast(ctx.value(t), dt)
        dims = list(v.shape)
        dims.insert(dim, Expr.const(1))
        parts.append(ctx.reshape(v, dims))
    return parts[0] if len(parts) == 1 else ctx.op("concatenate", *parts, dimension=dim)


@converter(aten.constant_pad_nd.default, dtypes=ALL_DTYPES)
def constant_pad(ctx, node):
    """Amounts may be sizes computed at run time (Swin pads each window grid up to a
    multiple of the window: ``(w - W % w) % w``) and negative (a crop, as the backward of
    a pad is): core's ``pad`` takes dims and crops by negative amounts, as torch does."""
    x = ctx.value(node.args[0])
    pad = list(node.args[1])
    value = node.args[2] if len(node.args) > 2 else node.kwargs.get("value", 0)
    low, high = [Expr.const(0)] * x.rank, [Expr.const(0)] * x.rank
    for i in range(len(pad) // 2):
        axis = x.rank - 1 - i
        low[axis], high[axis] = ctx.expr(pad[2 * i]), ctx.expr(pad[2 * i + 1])
    return ctx.op("pad", x, ctx.scalar(value, x.dtype), low=low, high=high,
                  interior=[0] * x.rank)


@converter(aten.flip.default, dtypes=ALL_DTYPES)
def flip(ctx, node):
    x = ctx.value(node.args[0])
    dims = sorted({d % x.rank for d in node.args[1]})
    return ctx.op("reverse", x, dimensions=dims) if dims else x


# -- creation ------------------------------------------------------------------------------

def _device_check(node):
    device = node.kwargs.get("device")
    if device is not None and torch.device(device).type != "cpu":
        return f"tensor created on {device}"
    if node.kwargs.get("pin_memory"):
        return "pin_memory=True"
    return None


def _fill_value(node: torch.fx.Node, position: int) -> Any:
    """A Python number, or an FX node computing a SymInt/SymFloat (a size-derived value)."""
    value = node.args[position] if len(node.args) > position else node.kwargs.get("fill_value")
    if not isinstance(value, (bool, int, float, torch.fx.Node)):
        raise ConversionError(f"fill value {value!r}")
    return value


@converter(aten.full.default, aten.scalar_tensor.default, dtypes=ALL_DTYPES,
           check=_device_check)
def full(ctx, node):
    position = 1 if node.target is aten.full.default else 0
    return ctx.operand(_fill_value(node, position), ctx.dtype(node), ctx.shape(node))


@converter(aten.full_like.default, aten.zeros_like.default, aten.ones_like.default,
           dtypes=ALL_DTYPES, check=_device_check)
def full_like(ctx, node):
    if node.target is aten.full_like.default:
        value = _fill_value(node, 1)
    else:
        value = 0 if node.target is aten.zeros_like.default else 1
    return ctx.operand(value, ctx.dtype(node), ctx.shape(node))


@converter(aten.arange.start_step, aten.arange.default, aten.arange.start,
           dtypes=NUMERIC_DTYPES, check=_device_check)
def arange(ctx, node):
    args = list(node.args)
    if node.target is aten.arange.default:
        start, step = 0, 1
    else:
        start = args[0]
        step = args[2] if len(args) > 2 else node.kwargs.get("step", 1)
    for v in (start, step):
        if not isinstance(v, (int, float)):
            raise ConversionError("arange start/step computed at run time")
    dt = ctx.dtype(node)
    shape = ctx.shape(node)
    idx = ctx.op("iota", shape=list(shape), dimension=0, dtype=dt)
    if step != 1:
        idx = ctx.op("mul", idx, ctx.full(step, dt, shape))
    if start != 0:
        idx = ctx.op("add", idx, ctx.full(start, dt, shape))
    return idx

