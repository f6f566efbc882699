"""Convolutions, pooling and fused batch normalization, forward and backward.

TensorFlow states windows in the layout of ``data_format`` (``strides``, ``ksize``,
``dilations``, ``explicit_paddings`` have one entry per dim of NHWC or NCHW) and pads
``SAME`` windows by an amount that depends on the input size modulo the stride. DISC's
``convolution`` takes constant padding only, so a padding that is a run-time expression
(``SAME`` with stride > 1 on a dynamic spatial dim) becomes an explicit ``pad`` with
symbolic edges before a ``VALID`` window, and the backward ops crop it off again
(``pad`` with the negated edges). The padding is chosen so that the padded size is exactly
what the windows cover, which makes the result dims the canonical ``ceildiv(n, stride)``
TensorFlow infers instead of a ``max(...)`` expression that would not compare equal to
other paths computing the same dim.

Pooling is expressed with window taps (strided slices of the padded input), as in
disc-torch: the native engine fuses the taps into one loop. Pool gradients scatter each
tap back with interior padding (the stride) and edge padding (the tap offset), summed over
taps, with no scatter op; MaxPoolGrad routes each output's gradient to the first maximum
of its window in row-major order, TensorFlow's CPU tie rule.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from disc_core.dtypes import DType
from disc_core.ir import Value
from disc_core.symbolic import Expr, as_expr, ceildiv, floordiv, smax

from ..lowering import ConversionError, Lowering, core_dtype
from .math import reduce
from .registry import FLOAT_DTYPES, converter

_SPATIAL = "HW"


def _format(op: tf.Operation) -> str:
    fmt = op.get_attr("data_format").decode()
    if fmt not in ("NHWC", "NCHW"):
        raise ConversionError(f"data_format {fmt}")
    return fmt


def _per_spatial(op: tf.Operation, name: str, fmt: str) -> list[int]:
    vals = list(op.get_attr(name))
    if len(vals) != 4:
        raise ConversionError(f"{name}={vals} needs 4 entries")
    if vals[fmt.index("N")] != 1 or vals[fmt.index("C")] != 1:
        raise ConversionError(f"{name}={vals} over the batch or feature dim")
    return [vals[fmt.index(c)] for c in _SPATIAL]


Pads = list[tuple[Expr, Expr]]


def _pads(op: tf.Operation, fmt: str, sizes: Sequence[Expr], windows: Sequence[int],
          strides: Sequence[int]) -> Pads:
    """(low, high) padding per spatial dim; ``windows`` are the dilated window extents.

    ``SAME``: TensorFlow's output is ``ceil(n / s)`` and pads ``t = (out - 1) * s + w - n``
    in total (``max(t, 0)``), the smaller half before. A negative ``t`` (window smaller
    than the stride) becomes a crop at the end instead of a zero pad: those trailing
    elements are read by no window, and the padded size is then always
    ``(out - 1) * s + w``, whose window count is ``out`` exactly."""
    padding = op.get_attr("padding").decode()
    out: Pads = []
    for j, ch in enumerate(_SPATIAL):
        n, w, s = as_expr(sizes[j]), windows[j], strides[j]
        if padding == "VALID":
            out.append((Expr.const(0), Expr.const(0)))
        elif padding == "EXPLICIT":
            ex = list(op.get_attr("explicit_paddings"))
            k = fmt.index(ch)
            out.append((Expr.const(ex[2 * k]), Expr.const(ex[2 * k + 1])))
        elif padding == "SAME":
            t = (ceildiv(n, s) - 1) * s + w - n
            lo = floordiv(t, 2) if w >= s else floordiv(smax(t, 0), 2)
            out.append((lo, t - lo))
        else:
            raise ConversionError(f"padding {padding}")
    return out


def _static(pads: Pads) -> bool:
    return all(lo.is_const and hi.is_const for lo, hi in pads)


def _pad_spatial(ctx: Lowering, x: Value, fmt: str, pads: Pads, value: float | bool,
                 negate: bool = False) -> Value:
    """``x`` padded (or, ``negate``, cropped) by ``pads`` on its spatial dims."""
    if all(lo.is_const and lo.value == 0 and hi.is_const and hi.value == 0
           for lo, hi in pads):
        return x
    low: list[Any] = [0] * x.rank
    high: list[Any] = [Expr.const(0)] * x.rank
    for j, ch in enumerate(_SPATIAL):
        lo, hi = pads[j]
        low[fmt.index(ch)] = -lo if negate else lo
        high[fmt.index(ch)] = -hi if negate else hi
    return ctx.op("pad", x, ctx.b.constant(np.asarray(value, dtype=x.dtype.np), x.dtype),
                  low=low, high=high, interior=[0] * x.rank)


def _spatial_dims(shape: Sequence[Any], fmt: str) -> list[Expr]:
    return [as_expr(shape[fmt.index(c)]) for c in _SPATIAL]


def _padded_shape(shape: Sequence[Any], fmt: str, pads: Pads) -> list[Expr]:
    out = [as_expr(d) for d in shape]
    for j, ch in enumerate(_SPATIAL):
        out[fmt.index(ch)] = out[fmt.index(ch)] + pads[j][0] + pads[j][1]
    return out


# -- convolution ----------------------------------------------------------------------------

class _Conv:
    """One Conv2D-family op's window, in DISC's terms."""

    def __init__(self, op: tf.Operation, input_shape: Sequence[Any],
                 kernel_shape: Sequence[Any]):
        self.fmt = _format(op)
        self.strides = _per_spatial(op, "strides", self.fmt)
        self.dilations = _per_spatial(op, "dilations", self.fmt)
        ks = [as_expr(d) for d in kernel_shape[:2]]
        if not all(k.is_const for k in ks):
            raise ConversionError("kernel with a dynamic spatial size")
        self.kernel = [k.value for k in ks]
        windows = [(k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations)]
        self.pads = _pads(op, self.fmt, _spatial_dims(input_shape, self.fmt), windows,
                          self.strides)
        c, i = as_expr(input_shape[self.fmt.index("C")]), as_expr(kernel_shape[2])
        if not i.is_const or i.value == 0:
            raise ConversionError(f"kernel input features {i}")
        if c.is_const:
            if c.value % i.value:
                raise ConversionError(f"input features {c} vs kernel input features {i}")
            self.groups = c.value // i.value
        else:
            # features unknown when traced: one group (the module checks C == I at run
            # time; a grouped call then fails that check and runs in TensorFlow)
            self.groups = 1
        self.static = _static(self.pads)

    def kwargs(self) -> dict[str, Any]:
        """The forward convolution's attributes; padding folded in only when constant."""
        padding = [(lo.value, hi.value) for lo, hi in self.pads] if self.static \
            else [(0, 0)] * 2
        return dict(window_strides=self.strides, padding=padding,
                    rhs_dilation=self.dilations, feature_group_count=self.groups,
                    input_layout=self.fmt, kernel_layout="HWIO", output_layout=self.fmt)


@converter("Conv2D", dtypes=FLOAT_DTYPES)
def conv2d(ctx: Lowering, op: tf.Operation) -> Value:
    x, w = ctx.value(op.inputs[0]), ctx.value(op.inputs[1])
    conv = _Conv(op, x.shape, w.shape)
    if not conv.static:
        x = _pad_spatial(ctx, x, conv.fmt, conv.pads, 0.0)
    return ctx.op("convolution", x, w, lhs_dilation=[1, 1], batch_group_count=1,
                  **conv.kwargs())


@converter("Conv2DBackpropInput", "Conv2DBackpropInputV2", dtypes=FLOAT_DTYPES)
def conv2d_backprop_input(ctx: Lowering, op: tf.Operation) -> Value:
    """``GraphBuilder.conv_input_grad`` (a convolution of the dilated gradient with the
    flipped kernel); a run-time padding is cropped off afterwards."""
    w, dy = ctx.value(op.inputs[1]), ctx.value(op.inputs[2])
    if op.type == "Conv2DBackpropInputV2":
        shape = list(ctx.value(op.inputs[0]).shape)
    else:
        shape = ctx.dims(op.inputs[0], "Conv2DBackpropInput input_sizes")
    if len(shape) != 4:
        raise ConversionError(f"input_sizes {shape} is not 4-D")
    conv = _Conv(op, shape, w.shape)
    kw = conv.kwargs()
    if conv.static:
        return ctx.b.conv_input_grad(dy, w, shape, **kw)
    dxp = ctx.b.conv_input_grad(dy, w, _padded_shape(shape, conv.fmt, conv.pads), **kw)
    return _pad_spatial(ctx, dxp, conv.fmt, conv.pads, 0.0, negate=True)


@converter("Conv2DBackpropFilter", "Conv2DBackpropFilterV2", dtypes=FLOAT_DTYPES)
def conv2d_backprop_filter(ctx: Lowering, op: tf.Operation) -> Value:
    """``GraphBuilder.conv_filter_grad`` (a convolution contracting over batch and output
    positions); a run-time padding is applied to the input first."""
    x, dy = ctx.value(op.inputs[0]), ctx.value(op.inputs[2])
    if op.type == "Conv2DBackpropFilterV2":
        kshape = list(ctx.value(op.inputs[1]).shape)
    else:
        kshape = ctx.dims(op.inputs[1], "Conv2DBackpropFilter filter_sizes")
    if len(kshape) != 4 or not all(as_expr(d).is_const for d in kshape):
        raise ConversionError(f"filter_sizes {kshape} must be 4 static sizes")
    conv = _Conv(op, x.shape, kshape)
    if not conv.static:
        x = _pad_spatial(ctx, x, conv.fmt, conv.pads, 0.0)
    return ctx.b.conv_filter_grad(x, dy, kshape, **conv.kwargs())


# -- pooling --------------------------------------------------------------------------------

class _Pool:
    """One pooling op's window: kernel, strides, padding (always applied with ``pad``)."""

    def __init__(self, op: tf.Operation, input_shape: Sequence[Any],
                 grad: Value | None = None):
        self.fmt = _format(op)
        self.kernel = _per_spatial(op, "ksize", self.fmt)
        self.strides = _per_spatial(op, "strides", self.fmt)
        if min(self.kernel + self.strides) < 1:
            raise ConversionError("ksize and strides must be >= 1")
        self.sizes = _spatial_dims(input_shape, self.fmt)
        self.pads = _pads(op, self.fmt, self.sizes, self.kernel, self.strides)
        # the window count per spatial dim, as the windows over the padded input give it
        self.out = [floordiv(n + lo + hi - k, s) + 1
                    for n, (lo, hi), k, s in zip(self.sizes, self.pads, self.kernel,
                                                 self.strides)]
        for n, o in zip(self.sizes, self.out):
            if n.is_const and (n.value == 0 or o.value < 0):
                raise ConversionError(f"window does not fit spatial size {n}")
        if grad is not None:
            # a gradient fed from another cluster has dims of its own symbols; they equal
            # the window counts at run time, and taking them keeps every shape exact
            self.out = _spatial_dims(grad.shape, self.fmt)

    def taps(self) -> list[tuple[int, int]]:
        return list(itertools.product(*(range(k) for k in self.kernel)))

    def tap(self, ctx: Lowering, padded: Value, tap: Sequence[int]) -> Value:
        """The padded input at output position ``o * stride + tap``, for every output."""
        start: list[Any] = [0] * padded.rank
        limit: list[Any] = list(padded.shape)
        stride = [1] * padded.rank
        for j, ch in enumerate(_SPATIAL):
            k = self.fmt.index(ch)
            start[k] = tap[j]
            limit[k] = Expr.const(tap[j]) + (self.out[j] - 1) * self.strides[j] + 1
            stride[k] = self.strides[j]
        return ctx.op("slice", padded, start=start, limit=limit, stride=stride)

    def scatter(self, ctx: Lowering, g: Value, tap: Sequence[int], shape: Sequence[Any]
                ) -> Value:
        """The inverse of :meth:`tap`: ``g`` (output-shaped) placed at the input positions
        tap ``tap`` read (interior padding spreads it ``stride`` apart), zeros elsewhere;
        the result has the input's ``shape`` (the padding cropped off)."""
        low: list[Any] = [0] * g.rank
        high: list[Any] = [Expr.const(0)] * g.rank
        interior = [0] * g.rank
        for j, ch in enumerate(_SPATIAL):
            k = self.fmt.index(ch)
            lo = Expr.const(tap[j]) - self.pads[j][0]
            low[k] = lo
            high[k] = as_expr(shape[k]) - lo - (self.out[j] - 1) * self.strides[j] - 1
            interior[k] = self.strides[j] - 1
        zero = ctx.b.constant(np.zeros((), g.dtype.np), g.dtype)
        return ctx.op("pad", g, zero, low=low, high=high, interior=interior)

    def counts(self, ctx: Lowering, shape: Sequence[Any], dtype: DType) -> Value:
        """How many input (not padding) positions each window covers: the divisor of
        TensorFlow's average pooling, which excludes padding."""
        ones = _pad_spatial(ctx, ctx.full(1, dtype, shape), self.fmt, self.pads, 0.0)
        total: Value | None = None
        for tap in self.taps():
            part = self.tap(ctx, ones, tap)
            total = part if total is None else ctx.op("add", total, part)
        assert total is not None
        return total

    def padding_free(self) -> bool:
        return all(lo.is_const and lo.value == 0 and hi.is_const and hi.value <= 0
                   for lo, hi in self.pads)


@converter("MaxPool", dtypes=FLOAT_DTYPES)
def max_pool(ctx: Lowering, op: tf.Operation) -> Value:
    """The maximum over the window taps; padding is -inf, so it never wins. TensorFlow's
    kernel starts each window at the dtype's lowest finite value, so a window of -inf
    gives that value, not -inf: so does this."""
    x = ctx.value(op.inputs[0])
    pool = _Pool(op, x.shape)
    padded = _pad_spatial(ctx, x, pool.fmt, pool.pads, float("-inf"))
    best = ctx.full(float(np.finfo(x.dtype.np).min), x.dtype, pool.tap(ctx, padded,
                                                                     (0, 0)).shape)
    for tap in pool.taps():
        best = ctx.op("max", best, pool.tap(ctx, padded, tap))
    return best


@converter("AvgPool", dtypes=FLOAT_DTYPES)
def avg_pool(ctx: Lowering, op: tf.Operation) -> Value:
    """The window sum divided by the number of input positions in the window."""
    x = ctx.value(op.inputs[0])
    pool = _Pool(op, x.shape)
    padded = _pad_spatial(ctx, x, pool.fmt, pool.pads, 0.0)
    total: Value | None = None
    for tap in pool.taps():
        part = pool.tap(ctx, padded, tap)
        total = part if total is None else ctx.op("add", total, part)
    assert total is not None
    if pool.padding_free():
        return ctx.op("div", total, ctx.full(int(np.prod(pool.kernel)), x.dtype, total.shape))
    return ctx.op("div", total, pool.counts(ctx, x.shape, x.dtype))


@converter("AvgPoolGrad", dtypes=FLOAT_DTYPES)
def avg_pool_grad(ctx: Lowering, op: tf.Operation) -> Value:
    """Each output's gradient over its divisor, spread back to every input its window
    covered (one interior/edge ``pad`` per tap, summed)."""
    shape = ctx.dims(op.inputs[0], "AvgPoolGrad orig_input_shape")
    g = ctx.value(op.inputs[1])
    if len(shape) != 4:
        raise ConversionError(f"orig_input_shape {shape} is not 4-D")
    pool = _Pool(op, shape, g)
    if pool.padding_free():
        g = ctx.op("div", g, ctx.full(int(np.prod(pool.kernel)), g.dtype, g.shape))
    else:
        g = ctx.op("div", g, pool.counts(ctx, shape, g.dtype))
    total: Value | None = None
    for tap in pool.taps():
        part = pool.scatter(ctx, g, tap, shape)
        total = part if total is None else ctx.op("add", total, part)
    assert total is not None
    return total


@converter("MaxPoolGrad", dtypes=FLOAT_DTYPES)
def max_pool_grad(ctx: Lowering, op: tf.Operation) -> Value:
    """Each output's gradient goes to the first input position of its window (row-major
    tap order) holding the window's maximum, as TensorFlow's CPU kernel does: it
    recomputes the maximum from ``orig_input`` (the ``orig_output`` operand only fixes the
    shape), keeps the first tap that compares greater, and never picks padding. Per tap, a
    mask ``tap == max and no earlier tap matched`` selects the gradient, which is scattered
    back like an average pool's."""
    x, g = ctx.value(op.inputs[0]), ctx.value(op.inputs[2])
    pool = _Pool(op, x.shape, g)
    padded = _pad_spatial(ctx, x, pool.fmt, pool.pads, float("-inf"))
    valid = None if pool.padding_free() else _pad_spatial(
        ctx, ctx.full(True, DType.BOOL, x.shape), pool.fmt, pool.pads, False)
    taps = pool.taps()
    vals = [pool.tap(ctx, padded, t) for t in taps]
    best = vals[0]
    for v in vals[1:]:
        best = ctx.op("select", ctx.op("compare", best, v, direction="lt"), v, best)
    zero = ctx.full(0, g.dtype, g.shape)
    taken: Value | None = None
    total: Value | None = None
    for t, v in zip(taps, vals):
        hit = ctx.op("compare", v, best, direction="eq")
        if valid is not None:
            hit = ctx.op("and", hit, pool.tap(ctx, valid, t))
        if taken is not None:
            hit = ctx.op("and", hit, ctx.op("not", taken))
        taken = hit if taken is None else ctx.op("or", taken, hit)
        part = pool.scatter(ctx, ctx.op("select", hit, g, zero), t, x.shape)
        total = part if total is None else ctx.op("add", total, part)
    assert total is not None
    return total


# -- batch normalization --------------------------------------------------------------------

def _bn_axes(x: Value, fmt: str) -> tuple[list[int], int]:
    if x.rank != 4:
        raise ConversionError(f"batch norm of a rank-{x.rank} input")
    c = fmt.index("C")
    return [i for i in range(4) if i != c], c


def _per_channel(ctx: Lowering, v: Value, x: Value, c: int) -> Value:
    return ctx.op("broadcast_in_dim", v, shape=list(x.shape), broadcast_dimensions=[c])


def _bn_check(op: tf.Operation) -> str:
    fmt = op.get_attr("data_format").decode()
    if fmt not in ("NHWC", "NCHW"):
        raise ConversionError(f"data_format {fmt}")
    if op.get_attr("T") != tf.float32 or op.get_attr("U") != tf.float32:
        raise ConversionError("batch norm on types other than float32",
                              code="unsupported_dtype")
    return fmt


def _empty(ctx: Lowering, t: tf.Tensor, dtype: DType) -> Value:
    """An output nothing meaningful is stored in (TF's reserve spaces on CPU): zeros of
    TF's static shape, unknown dims 0, rank 1 when TF does not know the rank."""
    dims = t.shape.as_list() if t.shape.rank is not None else [0]
    return ctx.full(0, dtype, [d or 0 for d in dims])


@converter("FusedBatchNormV3", "FusedBatchNormV2", dtypes=[tf.float32])
def fused_batch_norm(ctx: Lowering, op: tf.Operation) -> list[Value]:
    """Training: normalize with the batch's mean and (biased) variance; the running
    statistics TensorFlow returns blend the old ones with the batch's (``exponential_avg_
    factor``), the variance unbiased by ``n / max(n - 1, 1)``; the reserve spaces keep the
    batch mean and biased variance for the gradient. Inference: normalize with the given
    statistics, which are returned as they are."""
    fmt = _bn_check(op)
    x, scale, offset, mean, var = (ctx.value(t) for t in op.inputs[:5])
    axes, c = _bn_axes(x, fmt)
    eps = op.get_attr("epsilon")
    f32 = x.dtype
    if op.get_attr("is_training"):
        n = ctx.b.element_count(x, axes, f32)
        bmean = ctx.op("div", reduce(ctx, x, "sum", axes), ctx.broadcast_to(n, scale.shape))
        xc = ctx.op("sub", x, _per_channel(ctx, bmean, x, c))
        bvar = ctx.op("div", reduce(ctx, ctx.op("mul", xc, xc), "sum", axes),
                      ctx.broadcast_to(n, scale.shape))
        inv = ctx.op("rsqrt", ctx.op("add", bvar, ctx.full(eps, f32, bvar.shape)))
        y = ctx.op("mul", xc, _per_channel(ctx, ctx.op("mul", inv, scale), x, c))
        y = ctx.op("add", y, _per_channel(ctx, offset, x, c))
        one = ctx.const(1.0, f32)
        adjust = ctx.op("div", n, ctx.op("max", ctx.op("sub", n, one), one))
        uvar = ctx.op("mul", bvar, ctx.broadcast_to(adjust, bvar.shape))
        factor = op.get_attr("exponential_avg_factor")
        if factor == 1.0:
            new_mean, new_var = bmean, uvar
        else:
            keep = ctx.full(1.0 - factor, f32, bvar.shape)
            fac = ctx.full(factor, f32, bvar.shape)
            new_mean = ctx.op("add", ctx.op("mul", keep, mean), ctx.op("mul", fac, bmean))
            new_var = ctx.op("add", ctx.op("mul", keep, var), ctx.op("mul", fac, uvar))
        outs = [y, new_mean, new_var, bmean, bvar]
    else:
        inv = ctx.op("rsqrt", ctx.op("add", var, ctx.full(eps, f32, var.shape)))
        xc = ctx.op("sub", x, _per_channel(ctx, mean, x, c))
        y = ctx.op("mul", xc, _per_channel(ctx, ctx.op("mul", inv, scale), x, c))
        y = ctx.op("add", y, _per_channel(ctx, offset, x, c))
        outs = [y, mean, var, mean, var]
    if op.type == "FusedBatchNormV3":
        outs.append(_empty(ctx, op.outputs[5], f32))
    return outs


@converter("FusedBatchNormGradV3", "FusedBatchNormGradV2", dtypes=[tf.float32])
def fused_batch_norm_grad(ctx: Lowering, op: tf.Operation) -> list[Value]:
    """With ``c = rsqrt(var + eps)`` and ``xc = x - mean`` (the forward's saved batch
    statistics, or the population ones in inference): ``offset' = sum(dy)``,
    ``scale' = c * sum(dy * xc)``; training
    ``dx = scale * c * (dy - mean(dy) - xc * c^2 * mean(dy * xc))`` (the batch statistics
    depend on x), inference ``dx = scale * c * dy``."""
    fmt = _bn_check(op)
    dy, x, scale, mean, var = (ctx.value(t) for t in op.inputs[:5])
    axes, c = _bn_axes(x, fmt)
    f32 = x.dtype
    inv = ctx.op("rsqrt", ctx.op("add", var, ctx.full(op.get_attr("epsilon"), f32,
                                                        var.shape)))
    dy = ctx.broadcast_to(dy, x.shape)
    xc = ctx.op("sub", x, _per_channel(ctx, mean, x, c))
    doffset = reduce(ctx, dy, "sum", axes)
    dyxc = reduce(ctx, ctx.op("mul", dy, xc), "sum", axes)
    dscale = ctx.op("mul", dyxc, inv)
    k = _per_channel(ctx, ctx.op("mul", scale, inv), x, c)
    if op.get_attr("is_training"):
        n = ctx.broadcast_to(ctx.b.element_count(x, axes, f32), doffset.shape)
        mdy = ctx.op("div", doffset, n)
        coef = ctx.op("div", ctx.op("mul", dyxc, ctx.op("mul", inv, inv)), n)
        inner = ctx.op("sub", ctx.op("sub", dy, _per_channel(ctx, mdy, x, c)),
                       ctx.op("mul", xc, _per_channel(ctx, coef, x, c)))
        dx = ctx.op("mul", k, inner)
    else:
        dx = ctx.op("mul", k, dy)
    rest = [_empty(ctx, t, core_dtype(t.dtype)) for t in op.outputs[3:]]
    return [dx, dscale, doffset, *rest]
