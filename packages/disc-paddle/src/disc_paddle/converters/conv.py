"""Convolutions, batch normalization and pooling, and their gradients.

Paddle states windows per spatial dim (``strides``, ``dilations``, ``paddings`` of 2
entries, or 4 as ``[top, bottom, left, right]``), keeps filters ``OIHW`` whatever the
``data_format`` and pads ``SAME`` windows by ``max((ceil(n / s) - 1) * s + k - n, 0)`` with
the smaller half first (and, for convolutions, drops the dilation). DISC's
``convolution`` takes constant padding only, so a padding that is a run-time expression
(``SAME`` with stride > 1 on a dynamic spatial dim) becomes an explicit ``pad`` with
symbolic edges before an unpadded window, and the backward ops crop it off again; the
edges are chosen so the result dims are the canonical ``ceildiv(n, s)``.

Pooling is expressed with window taps (strided slices of the padded input) that the
native engine fuses into one loop; gradients scatter each tap back with interior padding
(the stride) and edge padding (the tap offset), summed over taps, with no scatter op.
Paddle's CPU kernels fix the details followed here: a window starts at ``o * s - pad_low``
and is clipped to the input; max pooling starts from ``-FLT_MAX`` (whatever the dtype);
average pooling divides by the window's input positions (``exclusive``) or by its extent
within ``[-pad_low, n + pad_low)``; the max gradient goes to the first position of the
window (row-major) equal to the forward output, the average gradient is ``dy`` times
``float(1 / count)``. Windows that cover the whole plane (global, adaptive to 1x1) are
reductions.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from disc_core.dtypes import DType
from disc_core.ir import Value
from disc_core.symbolic import Expr, as_expr, ceildiv, floordiv, smax, smin

from ..lowering import ConversionError, Lowering, core_dtype
from .registry import FLOAT_DTYPES, INPLACE, converter

_SPATIAL = "HW"
#: the initial value of Paddle's max pooling, in every dtype (``-FLT_MAX``)
_MAX_INIT = -float(np.finfo(np.float32).max)

Pads = list[tuple[Expr, Expr]]


# -- layouts and windows ----------------------------------------------------------------------

def _format(ctx: Lowering, op: Any) -> str:
    """Paddle's kernels read every format but ``NHWC`` as channels-first."""
    fmt = ctx.attr(op, "data_format", "NCHW")
    if fmt in ("NCHW", "AnyLayout"):
        return "NCHW"
    if fmt == "NHWC":
        return fmt
    raise ConversionError(f"{op.name()}: data_format {fmt!r}")


def _pairs(op: Any, what: str, vals: Sequence[int]) -> list[int]:
    vals = [int(v) for v in vals]
    if len(vals) != 2:
        raise ConversionError(f"{op.name()}: {what}={vals} needs 2 entries")
    return vals


def _explicit_pads(op: Any, vals: Sequence[int]) -> Pads:
    """``[h, w]`` (both sides) or ``[top, bottom, left, right]``."""
    p = [int(v) for v in vals]
    if len(p) == 2:
        p = [p[0], p[0], p[1], p[1]]
    if len(p) != 4:
        raise ConversionError(f"{op.name()}: paddings={list(vals)} needs 2 or 4 entries")
    return [(Expr.const(p[0]), Expr.const(p[1])), (Expr.const(p[2]), Expr.const(p[3]))]


def _same_pads(n: Expr, k: int, s: int) -> tuple[Expr, Expr]:
    """Paddle's ``SAME``: ``t = (ceil(n / s) - 1) * s + k - n`` split with the smaller half
    first, ``max(t, 0)``. A negative ``t`` (window smaller than the stride) becomes a crop
    at the end instead: those trailing positions are read by no window, and the padded
    size is then always ``(ceil(n / s) - 1) * s + k``, whose window count is exactly
    ``ceil(n / s)``."""
    t = (ceildiv(n, s) - 1) * s + k - n
    lo = floordiv(t, 2) if k >= s else floordiv(smax(t, 0), 2)
    return lo, t - lo


def _spatial(shape: Sequence[Any], fmt: str) -> list[Expr]:
    return [as_expr(shape[fmt.index(c)]) for c in _SPATIAL]


def _is_zero(pads: Pads) -> bool:
    return all(lo.is_const and lo.value == 0 and hi.is_const and hi.value == 0
               for lo, hi in pads)


def _pad_spatial(ctx: Lowering, x: Value, fmt: str, pads: Pads, value: float,
                 negate: bool = False) -> Value:
    """``x`` padded (``negate``: cropped) by ``pads`` on its spatial dims."""
    if _is_zero(pads):
        return x
    low: list[Any] = [0] * x.rank
    high: list[Any] = [Expr.const(0)] * x.rank
    for j, ch in enumerate(_SPATIAL):
        lo, hi = pads[j]
        low[fmt.index(ch)] = -lo if negate else lo
        high[fmt.index(ch)] = -hi if negate else hi
    return ctx.op("pad", x, ctx.scalar(value, x.dtype), low=low, high=high,
                  interior=[0] * x.rank)


def _per_channel(ctx: Lowering, v: Value, shape: Sequence[Any], c: int) -> Value:
    return ctx.op("broadcast_in_dim", v, shape=list(shape), broadcast_dimensions=[c])


# -- convolution ------------------------------------------------------------------------------

class _Conv:
    """One conv2d-family op's window, in DISC's terms."""

    def __init__(self, ctx: Lowering, op: Any, input_shape: Sequence[Any],
                 kernel_shape: Sequence[Any]):
        self.fmt = _format(ctx, op)
        self.strides = _pairs(op, "strides", ctx.attr(op, "strides"))
        self.dilations = _pairs(op, "dilations", ctx.attr(op, "dilations", [1, 1]))
        self.groups = int(ctx.attr(op, "groups", 1))
        if len(kernel_shape) != 4 or len(input_shape) != 4:
            raise ConversionError(f"{op.name()}: only 4-D inputs and filters")
        ks = [as_expr(d) for d in kernel_shape[2:]]
        if not all(k.is_const for k in ks):
            raise ConversionError(f"{op.name()}: filter with a dynamic spatial size")
        if min(self.strides + self.dilations) < 1 or self.groups < 1:
            raise ConversionError(f"{op.name()}: strides, dilations and groups must be >= 1")
        self.kernel = [k.value for k in ks]
        algo = ctx.attr(op, "padding_algorithm", "EXPLICIT")
        sizes = _spatial(input_shape, self.fmt)
        if algo == "EXPLICIT":
            self.pads = _explicit_pads(op, ctx.attr(op, "paddings"))
        elif algo == "VALID":
            self.pads = [(Expr.const(0), Expr.const(0))] * 2
        elif algo == "SAME":  # Paddle ignores the dilations here
            self.dilations = [1, 1]
            self.pads = [_same_pads(n, k, s) for n, k, s in
                         zip(sizes, self.kernel, self.strides)]
        else:
            raise ConversionError(f"{op.name()}: padding_algorithm {algo!r}")
        self.static = all(lo.is_const and hi.is_const for lo, hi in self.pads)

    def kwargs(self) -> dict[str, Any]:
        """The forward convolution's attributes; padding folded in only when constant."""
        padding = [(lo.value, hi.value) for lo, hi in self.pads] if self.static \
            else [(0, 0)] * 2
        return dict(window_strides=self.strides, padding=padding,
                    rhs_dilation=self.dilations, feature_group_count=self.groups,
                    input_layout=self.fmt, kernel_layout="OIHW", output_layout=self.fmt)

    def padded_shape(self, shape: Sequence[Any]) -> list[Expr]:
        out = [as_expr(d) for d in shape]
        for j, ch in enumerate(_SPATIAL):
            k = self.fmt.index(ch)
            out[k] = out[k] + self.pads[j][0] + self.pads[j][1]
        return out


@converter("pd_op.conv2d", "pd_op.depthwise_conv2d", dtypes=FLOAT_DTYPES)
def conv2d(ctx: Lowering, op: Any) -> Value:
    """A ``convolution`` (filters ``OIHW``, ``groups`` feature groups: a depthwise
    convolution is the case ``groups == C``)."""
    x, w = ctx.input(op, 0), ctx.input(op, 1)
    conv = _Conv(ctx, op, x.shape, w.shape)
    if not conv.static:
        x = _pad_spatial(ctx, x, conv.fmt, conv.pads, 0.0)
    return ctx.op("convolution", x, w, lhs_dilation=[1, 1], batch_group_count=1,
                  **conv.kwargs())


@converter("pd_op.conv2d_grad", "pd_op.depthwise_conv2d_grad", dtypes=FLOAT_DTYPES)
def conv2d_grad(ctx: Lowering, op: Any) -> list[Value | None]:
    """``(input_grad, filter_grad)`` by ``GraphBuilder.conv_input_grad`` and
    ``conv_filter_grad``; either result may be unset (not needed). A run-time padding is
    applied to the input before the filter gradient and cropped off the input gradient."""
    x, w, dy = ctx.input(op, 0), ctx.input(op, 1), ctx.input(op, 2)
    conv = _Conv(ctx, op, x.shape, w.shape)
    kw = conv.kwargs()
    dx = dw = None
    if op.result(0).initialized():
        if conv.static:
            dx = ctx.b.conv_input_grad(dy, w, list(x.shape), **kw)
        else:
            dxp = ctx.b.conv_input_grad(dy, w, conv.padded_shape(x.shape), **kw)
            dx = _pad_spatial(ctx, dxp, conv.fmt, conv.pads, 0.0, negate=True)
    if op.result(1).initialized():
        xp = x if conv.static else _pad_spatial(ctx, x, conv.fmt, conv.pads, 0.0)
        dw = ctx.b.conv_filter_grad(xp, dy, list(w.shape), **kw)
    return [dx, dw]


# -- batch normalization ----------------------------------------------------------------------

def _bn_channel(ctx: Lowering, op: Any, x: Value) -> int:
    """The channel axis: 1 (``NCHW``, any rank >= 2) or the last (``NHWC``)."""
    if x.rank < 2:
        raise ConversionError(f"{op.name()}: a rank-{x.rank} input")
    return x.rank - 1 if _format(ctx, op) == "NHWC" and x.rank > 2 else 1


def _bn_global(ctx: Lowering, op: Any, forward: bool) -> bool:
    """Whether the running statistics normalize (Paddle: the forward is in test mode when
    ``is_test and not trainable_statistics``; the gradient ignores the latter)."""
    is_test = bool(ctx.attr(op, "is_test", False))
    if forward:
        is_test = is_test and not bool(ctx.attr(op, "trainable_statistics", False))
    return is_test or bool(ctx.attr(op, "use_global_stats", False))


def _scale_bias(ctx: Lowering, op: Any, i: int, c: Expr, dtype: DType) -> tuple[Value, Value]:
    """The optional ``scale`` and ``bias`` operands (at ``i``, ``i + 1``); 1 and 0 when
    unset."""
    s, b = ctx.optional(op, i), ctx.optional(op, i + 1)
    return (s if s is not None else ctx.full(1, dtype, [c]),
            b if b is not None else ctx.full(0, dtype, [c]))


def _sum_but(ctx: Lowering, v: Value, c: int) -> Value:
    return ctx.op("reduce", v, kind="sum", axes=[i for i in range(v.rank) if i != c])


def _single(ctx: Lowering, x: Value, c: int) -> Value:
    """A rank-0 bool: the batch statistics cover at most one element per channel
    (N*H*W <= 1), where Paddle's CPU kernels pass ``x`` (``dy``) through, keep the running
    statistics and give zero saved statistics and scale/bias gradients."""
    n = ctx.b.element_count(x, [i for i in range(x.rank) if i != c], DType.I64)
    return ctx.op("compare", n, ctx.scalar(1, DType.I64), direction="le")


def _pick(ctx: Lowering, flag: Value, a: Value, b: Value) -> Value:
    """``a`` where the rank-0 ``flag`` holds, else ``b``."""
    return ctx.op("select", ctx.broadcast_to(flag, a.shape), a, b)


@converter("pd_op.batch_norm", dtypes=FLOAT_DTYPES)
def batch_norm(ctx: Lowering, op: Any) -> list[Value | None]:
    """Operands ``(x, mean, variance, scale?, bias?)``, results ``(out, mean_out,
    variance_out, saved_mean, saved_variance, reserve_space)``.

    Test mode (running statistics): ``y = x * a + (bias - mean * a)`` with
    ``a = scale / sqrt(variance + eps)``; the running statistics pass through and the
    saved ones are zeros. Training: the batch mean and biased variance normalize;
    ``mean_out = mean * momentum + batch_mean * (1 - momentum)`` (the variance likewise,
    biased), ``saved_mean`` is the batch mean and ``saved_variance`` the batch's *inverse
    std* ``1 / sqrt(var + eps)`` (what the gradient reads). With at most one element per
    channel Paddle copies ``x`` and keeps the running statistics (saved ones zero): so does
    this.
    ``reserve_space`` is empty on CPU."""
    x, mean, var = ctx.input(op, 0), ctx.input(op, 1), ctx.input(op, 2)
    c = _bn_channel(ctx, op, x)
    dt = x.dtype
    cdim = x.shape[c]
    scale, bias = _scale_bias(ctx, op, 3, cdim, dt)
    eps = float(ctx.attr(op, "epsilon", 1e-5))
    zeros = ctx.full(0, dt, mean.shape)
    reserve = None if not op.result(5).initialized() else \
        ctx.full(0, core_dtype(op.result(5).dtype), [0])
    if _bn_global(ctx, op, forward=True):
        inv = ctx.op("rsqrt", ctx.op("add", var, ctx.full(eps, dt, var.shape)))
        a = ctx.op("mul", inv, scale)
        shift = ctx.op("sub", bias, ctx.op("mul", mean, a))
        y = ctx.op("add", ctx.op("mul", x, _per_channel(ctx, a, x.shape, c)),
                   _per_channel(ctx, shift, x.shape, c))
        return [y, mean, var, zeros, zeros, reserve]
    axes = [i for i in range(x.rank) if i != c]
    n = ctx.broadcast_to(ctx.b.element_count(x, axes, dt), [cdim])
    bmean = ctx.op("div", _sum_but(ctx, x, c), n)
    xc = ctx.op("sub", x, _per_channel(ctx, bmean, x.shape, c))
    bvar = ctx.op("div", _sum_but(ctx, ctx.op("mul", xc, xc), c), n)
    inv = ctx.op("rsqrt", ctx.op("add", bvar, ctx.full(eps, dt, bvar.shape)))
    a = ctx.op("mul", inv, scale)
    shift = ctx.op("sub", bias, ctx.op("mul", bmean, a))
    y = ctx.op("add", ctx.op("mul", x, _per_channel(ctx, a, x.shape, c)),
               _per_channel(ctx, shift, x.shape, c))
    momentum = float(ctx.attr(op, "momentum", 0.9))
    keep, take = ctx.full(momentum, dt, [cdim]), ctx.full(1.0 - momentum, dt, [cdim])
    new_mean = ctx.op("add", ctx.op("mul", mean, keep), ctx.op("mul", bmean, take))
    new_var = ctx.op("add", ctx.op("mul", var, keep), ctx.op("mul", bvar, take))
    one = _single(ctx, x, c)
    return [_pick(ctx, one, x, y), _pick(ctx, one, mean, new_mean),
            _pick(ctx, one, var, new_var), _pick(ctx, one, zeros, bmean),
            _pick(ctx, one, zeros, inv), reserve]


@converter("pd_op.batch_norm_", dtypes=FLOAT_DTYPES)
def batch_norm_inplace(ctx: Lowering, op: Any) -> list[Value | None]:
    """The form Paddle's layers emit: ``mean_out``/``variance_out`` are the running
    statistics themselves, updated in place (``INPLACE``: the launch writes them back into
    the running-statistics parameters; in test mode they pass through, nothing to write)."""
    return batch_norm(ctx, op)


INPLACE["pd_op.batch_norm_"] = {1: 1, 2: 2}


@converter("pd_op.batch_norm_grad", dtypes=FLOAT_DTYPES)
def batch_norm_grad(ctx: Lowering, op: Any) -> list[Value | None]:
    """Operands ``(x, scale?, bias?, mean_out?, variance_out?, saved_mean, saved_variance,
    reserve_space?, out_grad)``, results ``(x_grad, scale_grad, bias_grad)``, each may be
    unset. With ``m`` and ``inv`` the statistics that normalized (the running ones in
    test mode, else the saved batch mean and inverse std): ``bias' = sum(dy)``,
    ``scale' = inv * sum(dy * (x - m))``; test mode ``dx = scale * inv * dy``, training
    ``dx = scale * inv * (dy - mean(dy) - (x - m) * inv^2 * mean(dy * (x - m)))``, and
    ``dx = dy`` and zero ``scale'``, ``bias'`` with at most one element per channel
    (Paddle's CPU kernel)."""
    x, dy = ctx.input(op, 0), ctx.input(op, 8)
    c = _bn_channel(ctx, op, x)
    dt = x.dtype
    cdim = x.shape[c]
    scale, _ = _scale_bias(ctx, op, 1, cdim, dt)
    dy = ctx.broadcast_to(dy, x.shape)
    glob = _bn_global(ctx, op, forward=False)
    if glob:
        mean, var = ctx.optional(op, 3), ctx.optional(op, 4)
        if mean is None or var is None:
            raise ConversionError(f"{op.name()}: test mode without running statistics")
        eps = float(ctx.attr(op, "epsilon", 1e-5))
        inv = ctx.op("rsqrt", ctx.op("add", var, ctx.full(eps, dt, var.shape)))
    else:
        mean, inv = ctx.input(op, 5), ctx.input(op, 6)
    xc = ctx.op("sub", x, _per_channel(ctx, mean, x.shape, c))
    dbias = _sum_but(ctx, dy, c)
    dyxc = _sum_but(ctx, ctx.op("mul", dy, xc), c)
    dscale = ctx.op("mul", dyxc, inv)
    k = _per_channel(ctx, ctx.op("mul", scale, inv), x.shape, c)
    if glob:
        dx = ctx.op("mul", k, dy)
    else:
        axes = [i for i in range(x.rank) if i != c]
        n = ctx.broadcast_to(ctx.b.element_count(x, axes, dt), [cdim])
        mdy = ctx.op("div", dbias, n)
        coef = ctx.op("div", ctx.op("mul", dyxc, ctx.op("mul", inv, inv)), n)
        inner = ctx.op("sub", ctx.op("sub", dy, _per_channel(ctx, mdy, x.shape, c)),
                       ctx.op("mul", xc, _per_channel(ctx, coef, x.shape, c)))
        one = _single(ctx, x, c)
        zeros = ctx.full(0, dt, [cdim])
        dx = _pick(ctx, one, dy, ctx.op("mul", k, inner))
        dscale, dbias = _pick(ctx, one, zeros, dscale), _pick(ctx, one, zeros, dbias)
    return [dx if op.result(0).initialized() else None,
            dscale if op.result(1).initialized() else None,
            dbias if op.result(2).initialized() else None]


# -- pooling ----------------------------------------------------------------------------------

def _out_size(n: Expr, k: int, lo: Expr, hi: Expr, s: int, ceil: bool) -> Expr:
    """Paddle's window count ``(n + lo + hi - k [+ s - 1]) / s + 1`` in C's truncating
    division: a window larger than the padded input by less than a stride still makes one
    (clipped) window, and by a stride or more none. Floor division gives the same for the
    sizes where the numerator cannot be negative; otherwise the negative part rounds up."""
    num = n + lo + hi - k + (s - 1 if ceil else 0)
    if s == 1:
        return num + 1
    if num.is_const:
        return Expr.const(int(num.value / s) + 1)
    least = num - n + 1  # at the smallest non-empty size
    if least.is_const and least.value >= 0:
        return floordiv(num, s) + 1
    return floordiv(smax(num, 0), s) + ceildiv(smin(num, 0), s) + 1


class _Pool:
    """One pooling op's windows (NCHW or NHWC), from its attributes.

    ``whole``: every window is the whole plane (global pooling, adaptive to 1x1), a
    reduction. Otherwise regular windows: ``kernel``, ``strides``, ``pads`` (low, and the
    high edge that makes the padded size exactly what the ``out`` windows cover: a
    negative one crops positions no window reads) and ``paddle_hi`` (the low padding
    again: Paddle's kernels bound non-exclusive windows by ``n + pad_low``)."""

    def __init__(self, ctx: Lowering, op: Any, fmt: str, shape: Sequence[Any],
                 kernel: Sequence[Any], grad: Value | None = None):
        self.fmt = fmt
        self.name = op.name()
        self.sizes = _spatial(shape, fmt)
        kernel = [as_expr(k) for k in kernel]
        if len(kernel) != 2 or not all(k.is_const for k in kernel):
            raise ConversionError(f"{self.name}: kernel_size {kernel} must be 2 known sizes")
        ks = [k.value for k in kernel]
        adaptive = bool(ctx.attr(op, "adaptive", False))
        self.whole = bool(ctx.attr(op, "global_pooling", False)) or (adaptive and ks == [1, 1])
        if self.whole:
            return
        if adaptive:  # output size ks; regular windows when it divides a static input
            if not all(n.is_const and k > 0 and n.value % k == 0
                       for n, k in zip(self.sizes, ks)):
                raise ConversionError(f"{self.name}: adaptive pooling to {ks} of spatial "
                                      f"sizes {self.sizes} (only to 1x1, or dividing)")
            self.kernel = [n.value // k for n, k in zip(self.sizes, ks)]
            self.strides = list(self.kernel)
            zero = Expr.const(0)
            self._windows([(zero, zero)] * 2, ceil=False, grad=grad)
            return
        self.kernel = ks
        self.strides = _pairs(op, "strides", ctx.attr(op, "strides"))
        if min(self.kernel + self.strides) < 1:
            raise ConversionError(f"{self.name}: kernel_size and strides must be >= 1")
        algo = ctx.attr(op, "padding_algorithm", "EXPLICIT")
        ceil = bool(ctx.attr(op, "ceil_mode", False))
        if algo == "EXPLICIT":
            pads = _explicit_pads(op, ctx.attr(op, "paddings"))
        elif algo == "VALID":
            pads = [(Expr.const(0), Expr.const(0))] * 2
        elif algo == "SAME":
            pads = []
            for n, k, s in zip(self.sizes, self.kernel, self.strides):
                t = smax((ceildiv(n, s) - 1) * s + k - n, 0)
                pads.append((floordiv(t, 2), t - floordiv(t, 2)))
        else:
            raise ConversionError(f"{self.name}: padding_algorithm {algo!r}")
        self._windows(pads, ceil, grad, same=algo == "SAME" and not ceil)

    def _windows(self, pads: Pads, ceil: bool, grad: Value | None, same: bool = False
                 ) -> None:
        if grad is not None:
            # a gradient fed from another cluster has dims of its own symbols; they equal
            # the window counts at run time, and taking them keeps every shape exact
            self.out = _spatial(grad.shape, self.fmt)
        elif same:
            self.out = [ceildiv(n, s) for n, s in zip(self.sizes, self.strides)]
        else:
            self.out = [_out_size(n, k, lo, hi, s, ceil) for n, k, (lo, hi), s in
                        zip(self.sizes, self.kernel, pads, self.strides)]
        self.pads = [(lo, (o - 1) * s + k - n - lo) for n, k, (lo, _), s, o in
                     zip(self.sizes, self.kernel, pads, self.strides, self.out)]
        for n, o in zip(self.sizes, self.out):
            if n.is_const and (n.value == 0 or (o.is_const and o.value < 0)):
                raise ConversionError(f"{self.name}: windows do not fit spatial size {n}")

    def taps(self) -> list[tuple[int, ...]]:
        return list(itertools.product(*(range(k) for k in self.kernel)))

    def tap(self, ctx: Lowering, padded: Value, tap: Sequence[int], axes: Sequence[int]
            ) -> Value:
        """The padded input at ``o * stride + tap`` for every window ``o`` (``axes``: the
        spatial axes of ``padded``)."""
        start: list[Any] = [0] * padded.rank
        limit: list[Any] = list(padded.shape)
        stride = [1] * padded.rank
        for j, a in enumerate(axes):
            start[a] = tap[j]
            limit[a] = Expr.const(tap[j]) + (self.out[j] - 1) * self.strides[j] + 1
            stride[a] = self.strides[j]
        return ctx.op("slice", padded, start=start, limit=limit, stride=stride)

    def axes(self) -> list[int]:
        return [self.fmt.index(ch) for ch in _SPATIAL]

    def padded(self, ctx: Lowering, x: Value, value: float) -> Value:
        return _pad_spatial(ctx, x, self.fmt, self.pads, value)

    def scatter(self, ctx: Lowering, g: Value, tap: Sequence[int]) -> Value:
        """The inverse of :meth:`tap`: ``g`` (window-shaped) placed at the input positions
        tap ``tap`` read (interior padding spreads it ``stride`` apart), zeros elsewhere,
        the padding cropped off: the input's shape."""
        low: list[Any] = [0] * g.rank
        high: list[Any] = [Expr.const(0)] * g.rank
        interior = [0] * g.rank
        for j, a in enumerate(self.axes()):
            lo = Expr.const(tap[j]) - self.pads[j][0]
            low[a] = lo
            high[a] = self.sizes[j] - lo - (self.out[j] - 1) * self.strides[j] - 1
            interior[a] = self.strides[j] - 1
        return ctx.op("pad", g, ctx.scalar(0, g.dtype), low=low, high=high,
                      interior=interior)

    def counts(self, ctx: Lowering, exclusive: bool, shape: Sequence[Any]) -> Value | None:
        """The divisor of each window (f32, broadcast to the output ``shape``): its input
        positions (``exclusive``) or its extent within ``[-pad_low, n + pad_low)``; None
        when every window is whole (``kernel`` positions)."""
        if all(lo.is_const and lo.value == 0 and hi.is_const and hi.value <= 0
               for lo, hi in self.pads):
            return None
        total: Value | None = None
        for j, a in enumerate(self.axes()):
            lo, hi = self.pads[j]
            ones = ctx.full(1, DType.F32, [self.sizes[j]])
            if exclusive:
                v = ctx.op("pad", ones, ctx.scalar(0, DType.F32), low=[lo], high=[hi],
                           interior=[0])
            else:
                v = ctx.op("pad", ones, ctx.scalar(1, DType.F32), low=[lo], high=[lo],
                           interior=[0])
                v = ctx.op("pad", v, ctx.scalar(0, DType.F32), low=[0], high=[hi - lo],
                           interior=[0])
            count: Value | None = None
            for t in range(self.kernel[j]):
                part = ctx.op("slice", v, start=[t],
                              limit=[Expr.const(t) + (self.out[j] - 1) * self.strides[j] + 1],
                              stride=[self.strides[j]])
                count = part if count is None else ctx.op("add", count, part)
            assert count is not None
            count = _per_channel(ctx, count, shape, a)
            total = count if total is None else ctx.op("mul", total, count)
        return total


def _pool_attrs(ctx: Lowering, op: Any) -> tuple[str, bool]:
    kind = ctx.attr(op, "pooling_type", "max")
    if kind not in ("max", "avg"):
        raise ConversionError(f"{op.name()}: pooling_type {kind!r}")
    return kind, bool(ctx.attr(op, "exclusive", True))


def _plane_axes(fmt: str) -> list[int]:
    return [fmt.index(ch) for ch in _SPATIAL]


def _reduce_plane(ctx: Lowering, x: Value, fmt: str, kind: str) -> Value:
    """The whole-plane window: ``reduce`` over H and W, kept as 1x1."""
    axes = _plane_axes(fmt)
    out = ctx.op("reduce", x, kind=kind, axes=axes)
    return ctx.reshape(out, [1 if i in axes else d for i, d in enumerate(x.shape)])


def _max_pool(ctx: Lowering, pool: _Pool, x: Value) -> Value:
    padded = pool.padded(ctx, x, float("-inf"))
    best: Value | None = None
    for t in pool.taps():
        v = pool.tap(ctx, padded, t, pool.axes())
        best = v if best is None else ctx.op("max", best, v)
    assert best is not None
    return ctx.op("max", best, ctx.full(_MAX_INIT, x.dtype, best.shape))


def _recip(ctx: Lowering, count: Value, dtype: DType) -> Value:
    """``float(1 / count)`` in ``dtype``: Paddle's pool gradients scale by a float32
    reciprocal whatever the dtype."""
    one = ctx.full(1, DType.F32, count.shape)
    return ctx.cast(ctx.op("div", one, count), dtype)


@converter("pd_op.pool2d", dtypes=FLOAT_DTYPES)
def pool2d(ctx: Lowering, op: Any) -> Value:
    """Max: the largest tap, at least ``-FLT_MAX`` (padding is -inf, never chosen). Avg:
    the sum of taps over the zero-padded input divided by the window's count."""
    x = ctx.input(op, 0)
    kind, exclusive = _pool_attrs(ctx, op)
    fmt = _format(ctx, op)
    if x.rank != 4:
        raise ConversionError(f"{op.name()}: a rank-{x.rank} input")
    pool = _Pool(ctx, op, fmt, x.shape, ctx.int_list(op, 1, "kernel_size", "kernel_size"))
    if pool.whole:
        if kind == "max":
            best = _reduce_plane(ctx, x, fmt, "max")
            return ctx.op("max", best, ctx.full(_MAX_INIT, x.dtype, best.shape))
        total = _reduce_plane(ctx, x, fmt, "sum")
        n = ctx.b.element_count(x, _plane_axes(fmt), x.dtype)
        return ctx.op("div", total, ctx.broadcast_to(n, total.shape))
    if kind == "max":
        return _max_pool(ctx, pool, x)
    padded = pool.padded(ctx, x, 0.0)
    total: Value | None = None
    for t in pool.taps():
        v = pool.tap(ctx, padded, t, pool.axes())
        total = v if total is None else ctx.op("add", total, v)
    assert total is not None
    count = pool.counts(ctx, exclusive or bool(ctx.attr(op, "adaptive", False)),
                        total.shape)
    if count is None:
        return ctx.op("div", total, ctx.full(int(np.prod(pool.kernel)), x.dtype,
                                             total.shape))
    return ctx.op("div", total, ctx.cast(count, x.dtype))


def _first_hits(ctx: Lowering, hits: Sequence[Value]) -> list[Value]:
    """Each mask and-ed with "no earlier mask held": the first hit only."""
    out: list[Value] = []
    taken: Value | None = None
    for h in hits:
        first = h if taken is None else ctx.op("and", h, ctx.op("not", taken))
        taken = h if taken is None else ctx.op("or", taken, h)
        out.append(first)
    return out


def _plane_first(ctx: Lowering, hit: Value, fmt: str) -> Value:
    """``hit`` kept at its first true position of each plane (row-major), others false."""
    n, h, w = hit.shape[0], hit.shape[fmt.index("H")], hit.shape[fmt.index("W")]
    c = hit.shape[fmt.index("C")]
    flat_axis = 2 if fmt == "NCHW" else 1
    flat = [n, c, h * w] if fmt == "NCHW" else [n, h * w, c]
    as_int = ctx.reshape(ctx.cast(hit, DType.I32), flat)
    first = ctx.op("argmax", as_int, axis=flat_axis, index_dtype=DType.I64)
    pos = ctx.op("iota", shape=flat, dimension=flat_axis, dtype=DType.I64)
    at = ctx.op("compare", pos, ctx.op("broadcast_in_dim", first, shape=flat,
                                       broadcast_dimensions=[i for i in range(3)
                                                             if i != flat_axis]),
                direction="eq")
    return ctx.op("and", ctx.reshape(at, list(hit.shape)), hit)


@converter("pd_op.pool2d_grad", dtypes=FLOAT_DTYPES)
def pool2d_grad(ctx: Lowering, op: Any) -> Value:
    """Operands ``(x, out, out_grad, kernel_size)``. Max: each window's gradient goes to
    its first position (row-major, padding never) equal to ``out``. Avg: ``dy`` times
    ``float(1 / count)`` spread over the window. Per tap, scattered back and summed."""
    x, out, g = ctx.input(op, 0), ctx.input(op, 1), ctx.input(op, 2)
    kind, exclusive = _pool_attrs(ctx, op)
    fmt = _format(ctx, op)
    if x.rank != 4:
        raise ConversionError(f"{op.name()}: a rank-{x.rank} input")
    adaptive = bool(ctx.attr(op, "adaptive", False))
    if kind == "max" and adaptive:
        raise ConversionError(f"{op.name()}: Paddle's adaptive max pool gradient walks "
                              f"plain windows (max_pool2d_with_index is the adaptive max)")
    pool = _Pool(ctx, op, fmt, x.shape, ctx.int_list(op, 3, "kernel_size", "kernel_size"),
                 grad=g)
    if pool.whole:
        gb = ctx.op("broadcast_in_dim", ctx.reshape(g, [g.shape[0], g.shape[fmt.index("C")]]),
                    shape=list(x.shape), broadcast_dimensions=[0, fmt.index("C")])
        if kind == "avg":
            n = ctx.b.element_count(x, _plane_axes(fmt), DType.F32)
            return ctx.op("mul", gb, ctx.broadcast_to(_recip(ctx, n, x.dtype), x.shape))
        ob = ctx.op("broadcast_in_dim", ctx.reshape(out, [g.shape[0], g.shape[fmt.index("C")]]),
                    shape=list(x.shape), broadcast_dimensions=[0, fmt.index("C")])
        hit = _plane_first(ctx, ctx.op("compare", x, ob, direction="eq"), fmt)
        return ctx.op("select", hit, gb, ctx.full(0, g.dtype, x.shape))
    axes = pool.axes()
    total: Value | None = None
    if kind == "avg":
        count = pool.counts(ctx, exclusive or adaptive, g.shape)
        if count is None:
            count = ctx.full(float(np.prod(pool.kernel)), DType.F32, g.shape)
        gs = ctx.op("mul", g, _recip(ctx, count, g.dtype))
        for t in pool.taps():
            part = pool.scatter(ctx, gs, t)
            total = part if total is None else ctx.op("add", total, part)
    else:
        out = ctx.broadcast_to(out, g.shape)
        padded = pool.padded(ctx, x, float("nan"))  # NaN equals nothing: padding never hits
        taps = pool.taps()
        hits = [ctx.op("compare", pool.tap(ctx, padded, t, axes), out, direction="eq")
                for t in taps]
        gz = ctx.full(0, g.dtype, g.shape)
        for t, h in zip(taps, _first_hits(ctx, hits)):
            part = pool.scatter(ctx, ctx.op("select", h, g, gz), t)
            total = part if total is None else ctx.op("add", total, part)
    assert total is not None
    return total


# -- max pooling with indices -----------------------------------------------------------------

def _with_index_pool(ctx: Lowering, op: Any, x: Value, grad: Value | None = None) -> _Pool:
    if x.rank != 4:
        raise ConversionError(f"{op.name()}: a rank-{x.rank} input")
    if len(ctx.attr(op, "paddings", [0, 0])) != 2:
        raise ConversionError(f"{op.name()}: paddings {ctx.attr(op, 'paddings')} (2 entries "
                              f"expected)")
    return _Pool(ctx, op, "NCHW", x.shape, ctx.attr(op, "kernel_size"), grad=grad)


def _plane_index(ctx: Lowering, like: Value, dtype: DType) -> Value:
    """``h * W + w`` at every position of an NCHW ``like``: Paddle's mask values."""
    h, w = like.shape[2], like.shape[3]
    ih = ctx.op("iota", shape=[h, w], dimension=0, dtype=dtype)
    iw = ctx.op("iota", shape=[h, w], dimension=1, dtype=dtype)
    width = ctx.broadcast_to(ctx.b.dim_size(like, 3, dtype), [h, w])
    idx = ctx.op("add", ctx.op("mul", ih, width), iw)
    return ctx.op("broadcast_in_dim", idx, shape=list(like.shape), broadcast_dimensions=[2, 3])


@converter("pd_op.max_pool2d_with_index", dtypes=FLOAT_DTYPES)
def max_pool2d_with_index(ctx: Lowering, op: Any) -> list[Value]:
    """``(out, mask)``, NCHW: the window maximum (at least ``-FLT_MAX``) and the plane
    index ``h * W + w`` of its first occurrence (row-major), -1 when no element exceeds
    ``-FLT_MAX`` (Paddle's kernel keeps the first element strictly above the running
    maximum)."""
    x = ctx.input(op, 0)
    pool = _with_index_pool(ctx, op, x)
    idt = core_dtype(op.result(1).dtype)
    floor = ctx.scalar(_MAX_INIT, x.dtype)
    if pool.whole:
        best = _reduce_plane(ctx, x, "NCHW", "max")
        best = ctx.op("max", best, ctx.broadcast_to(floor, best.shape))
        bb = ctx.broadcast_to(best, x.shape)
        hit = ctx.op("and", ctx.op("compare", x, bb, direction="eq"),
                     ctx.op("compare", bb, ctx.broadcast_to(floor, x.shape), direction="gt"))
        n, c, h, w = x.shape
        flat = ctx.reshape(ctx.cast(hit, DType.I32), [n, c, h * w])
        pos = ctx.reshape(ctx.op("argmax", flat, axis=2, index_dtype=idt), best.shape)
        anyhit = ctx.reshape(ctx.op("reduce", hit, kind="or", axes=[2, 3]), best.shape)
        return [best, ctx.op("select", anyhit, pos, ctx.full(-1, idt, best.shape))]
    best = _max_pool(ctx, pool, x)
    axes = pool.axes()
    padded = pool.padded(ctx, x, float("-inf"))
    index = pool.padded(ctx, _plane_index(ctx, x, idt), -1)
    live = ctx.op("compare", best, ctx.broadcast_to(floor, best.shape), direction="gt")
    mask = ctx.full(-1, idt, best.shape)
    for t in reversed(pool.taps()):
        hit = ctx.op("and", live, ctx.op("compare", pool.tap(ctx, padded, t, axes), best,
                                         direction="eq"))
        mask = ctx.op("select", hit, pool.tap(ctx, index, t, axes), mask)
    return [best, mask]


@converter("pd_op.max_pool2d_with_index_grad", dtypes=FLOAT_DTYPES)
def max_pool2d_with_index_grad(ctx: Lowering, op: Any) -> Value:
    """Operands ``(x, mask, out_grad)``: each window's gradient goes to the input position
    its mask names (a tap whose plane index equals the mask), scattered back per tap."""
    x, mask, g = ctx.input(op, 0), ctx.input(op, 1), ctx.input(op, 2)
    pool = _with_index_pool(ctx, op, x, grad=g)
    mask = ctx.broadcast_to(mask, g.shape)
    index = _plane_index(ctx, x, mask.dtype)
    if pool.whole:
        n, c = g.shape[0], g.shape[1]
        mb = ctx.op("broadcast_in_dim", ctx.reshape(mask, [n, c]), shape=list(x.shape),
                    broadcast_dimensions=[0, 1])
        gb = ctx.op("broadcast_in_dim", ctx.reshape(g, [n, c]), shape=list(x.shape),
                    broadcast_dimensions=[0, 1])
        return ctx.op("select", ctx.op("compare", index, mb, direction="eq"), gb,
                      ctx.full(0, g.dtype, x.shape))
    index = pool.padded(ctx, index, -2)  # never a mask value
    zero = ctx.full(0, g.dtype, g.shape)
    total: Value | None = None
    for t in pool.taps():
        hit = ctx.op("compare", pool.tap(ctx, index, t, pool.axes()), mask, direction="eq")
        part = pool.scatter(ctx, ctx.op("select", hit, g, zero), t)
        total = part if total is None else ctx.op("add", total, part)
    assert total is not None
    return total
