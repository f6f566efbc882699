"""Normalizations, softmax, losses and reductions, and their gradients."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from disc_core.dtypes import DType
from disc_core.ir import Value

from ..lowering import ConversionError, Lowering, core_dtype
from ..versions import paddle_version
from .registry import ALL_DTYPES, FLOAT_DTYPES, NUMERIC_DTYPES, converter

# -- helpers ------------------------------------------------------------------------------


def _norm_axes(op: Any, axes: Sequence[Any], rank: int, reduce_all: bool = False
               ) -> list[int]:
    """Paddle's reduction axes: negative ones count from the end; none (or
    ``reduce_all``) means every axis."""
    if reduce_all or not axes:
        return list(range(rank))
    out = set()
    for a in axes:
        if not isinstance(a, int):
            raise ConversionError(f"{op.name()}: reduction axes {list(axes)} are not static")
        if not -max(rank, 1) <= a < max(rank, 1):
            raise ConversionError(f"{op.name()}: axis {a} out of range for rank {rank}")
        if rank:
            out.add(a % rank)
    return sorted(out)


def _axes(ctx: Lowering, op: Any, x: Value, index: int | None = 1) -> list[int]:
    """The axes of a reduction op: an IntArray operand (``index``) or the ``axis``
    attribute, and ``reduce_all`` when the op has it."""
    if index is not None and index < op.num_operands():
        axes = ctx.int_list(op, index, "axis", f"{op.name()} axes")
    else:
        axes = [int(a) for a in ctx.attr(op, "axis", [])]
    return _norm_axes(op, axes, x.rank, bool(ctx.attr(op, "reduce_all", False)))


def _kept_shape(x: Value, axes: Sequence[int]) -> list[Any]:
    return [1 if i in axes else d for i, d in enumerate(x.shape)]


def reduce(ctx: Lowering, x: Value, kind: str, axes: Sequence[int], keep: bool = False
           ) -> Value:
    """``reduce`` over ``axes``; ``keep`` leaves them as size-1 dims."""
    if not axes:
        return x
    out = ctx.op("reduce", x, kind=kind, axes=list(axes))
    return ctx.reshape(out, _kept_shape(x, axes)) if keep else out


def _spread(ctx: Lowering, g: Value, x: Value, axes: Sequence[int]) -> Value:
    """A reduction's output (gradient), with or without its kept dims, broadcast back
    over ``x``'s shape."""
    return ctx.broadcast_to(ctx.reshape(g, _kept_shape(x, axes)), list(x.shape))


def _count(ctx: Lowering, x: Value, axes: Sequence[int]) -> Value:
    """How many elements a reduction over ``axes`` combines, as a rank-0 ``x.dtype``."""
    return ctx.b.element_count(x, axes, x.dtype)


def _result_dtype(op: Any, index: int = 0) -> DType:
    return core_dtype(op.result(index).dtype)


def _numel(dims: Sequence[Any]) -> Any:
    n: Any = 1
    for d in dims:
        n = n * d
    return n


def _axis(op: Any, axis: int, rank: int) -> int:
    if not -max(rank, 1) <= axis < max(rank, 1):
        raise ConversionError(f"{op.name()}: axis {axis} out of range for rank {rank}")
    return axis % rank if rank else 0


# -- reductions ---------------------------------------------------------------------------

def _reduction(kind: str):
    def fn(ctx: Lowering, op: Any) -> Value:
        x = ctx.input(op, 0)
        out_dt = _result_dtype(op)
        if kind == "sum" and out_dt != x.dtype:
            x = ctx.cast(x, out_dt)  # sum's dtype attr (and int32/bool sums to int64)
        out = reduce(ctx, x, kind, _axes(ctx, op, x), bool(ctx.attr(op, "keepdim", False)))
        return ctx.cast(out, out_dt)

    return fn


converter("pd_op.sum", dtypes=ALL_DTYPES)(_reduction("sum"))
converter("pd_op.prod", dtypes=NUMERIC_DTYPES)(_reduction("prod"))
converter("pd_op.max", dtypes=NUMERIC_DTYPES)(_reduction("max"))
converter("pd_op.min", dtypes=NUMERIC_DTYPES)(_reduction("min"))


def _logical(kind: str):
    """any/all: non-bool inputs count as ``x != 0``, and Paddle gives their result in the
    input's dtype (0 or 1)."""
    def fn(ctx: Lowering, op: Any) -> Value:
        x = ctx.input(op, 0)
        if not x.dtype.is_bool:
            x = ctx.op("compare", x, ctx.full(0, x.dtype, x.shape), direction="ne")
        out = reduce(ctx, x, kind, _axes(ctx, op, x, None), bool(ctx.attr(op, "keepdim", False)))
        return ctx.cast(out, _result_dtype(op))

    return fn


converter("pd_op.any", dtypes=ALL_DTYPES)(_logical("or"))
converter("pd_op.all", dtypes=ALL_DTYPES)(_logical("and"))


@converter("pd_op.mean", dtypes=FLOAT_DTYPES)
def mean(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    axes = _axes(ctx, op, x)
    total = reduce(ctx, x, "sum", axes, bool(ctx.attr(op, "keepdim", False)))
    return ctx.op("div", total, ctx.broadcast_to(_count(ctx, x, axes), total.shape))


@converter("pd_op.sum_grad", dtypes=NUMERIC_DTYPES)
def sum_grad(ctx: Lowering, op: Any) -> Value:
    """Inputs (x, out_grad, axis): out_grad spread over x."""
    x, g = ctx.input(op, 0), ctx.input(op, 1)
    return ctx.cast(_spread(ctx, g, x, _axes(ctx, op, x, 2)), _result_dtype(op))


@converter("pd_op.mean_grad", dtypes=FLOAT_DTYPES)
def mean_grad(ctx: Lowering, op: Any) -> Value:
    """Inputs (x, out_grad, axis): out_grad / count, spread over x."""
    x, g = ctx.input(op, 0), ctx.input(op, 1)
    axes = _axes(ctx, op, x, 2)
    g = ctx.op("div", g, ctx.broadcast_to(_count(ctx, x, axes), g.shape))
    return _spread(ctx, g, x, axes)


def _extreme_grad(ctx: Lowering, op: Any) -> Value:
    """Inputs (x, out, out_grad, axis). The elements equal to the extreme get the
    gradient; ties follow the installed Paddle: from 3.1 on they split it evenly, Paddle
    3.0 gives the full gradient to every tied element."""
    x, out, g = ctx.input(op, 0), ctx.input(op, 1), ctx.input(op, 2)
    axes = _axes(ctx, op, x, 3)
    hit = ctx.cast(ctx.op("compare", x, _spread(ctx, out, x, axes), direction="eq"), x.dtype)
    full = ctx.op("mul", hit, _spread(ctx, g, x, axes))
    if paddle_version() < (3, 1):
        return full
    count = _spread(ctx, reduce(ctx, hit, "sum", axes), x, axes)
    return ctx.op("div", full, count)


converter("pd_op.max_grad", "pd_op.min_grad", dtypes=FLOAT_DTYPES)(_extreme_grad)


def _logsumexp_parts(ctx: Lowering, x: Value, axes: Sequence[int]) -> Value:
    """log(sum(exp(x))) over ``axes`` with their dims kept, shifted by the max so nothing
    overflows. As in Paddle's kernel the shift is not guarded: a slice whose max is
    infinite (all -inf, or any +inf) gives NaN."""
    m = reduce(ctx, x, "max", axes, True)
    e = ctx.op("exp", ctx.op("sub", x, ctx.broadcast_to(m, x.shape)))
    return ctx.op("add", ctx.op("log", reduce(ctx, e, "sum", axes, True)), m)


@converter("pd_op.logsumexp", dtypes=FLOAT_DTYPES)
def logsumexp(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    axes = _axes(ctx, op, x, None)
    out = _logsumexp_parts(ctx, x, axes)
    if not ctx.attr(op, "keepdim", False):
        out = ctx.reshape(out, [d for i, d in enumerate(x.shape) if i not in axes])
    return out


@converter("pd_op.logsumexp_grad", dtypes=FLOAT_DTYPES)
def logsumexp_grad(ctx: Lowering, op: Any) -> Value:
    """Inputs (x, out, out_grad): out_grad * exp(x - out)."""
    x, out, g = ctx.input(op, 0), ctx.input(op, 1), ctx.input(op, 2)
    axes = _axes(ctx, op, x, None)
    p = ctx.op("exp", ctx.op("sub", x, _spread(ctx, out, x, axes)))
    return ctx.op("mul", _spread(ctx, g, x, axes), p)


def _arg(kind: str):
    def fn(ctx: Lowering, op: Any) -> Value:
        x = ctx.input(op, 0)
        out_dt = _result_dtype(op)
        if out_dt not in (DType.I32, DType.I64):
            raise ConversionError(f"{op.name()} to {out_dt}", code="unsupported_dtype")
        keep = bool(ctx.attr(op, "keepdims", False))
        if ctx.attr(op, "flatten", False) or x.rank == 0:
            flat = ctx.reshape(x, [_numel(x.shape)])
            out = ctx.op(kind, flat, axis=0, index_dtype=out_dt)
            return ctx.reshape(out, [1] * x.rank) if keep else out
        axis = ctx.known_scalar(ctx.operand(op, 1), f"{op.name()} axis")
        if not isinstance(axis, int):
            axis = int(axis)
        axis = _axis(op, axis, x.rank)
        out = ctx.op(kind, x, axis=axis, index_dtype=out_dt)
        return ctx.reshape(out, _kept_shape(x, [axis])) if keep else out

    return fn


converter("pd_op.argmax", dtypes=NUMERIC_DTYPES)(_arg("argmax"))
converter("pd_op.argmin", dtypes=NUMERIC_DTYPES)(_arg("argmin"))


# -- softmax ------------------------------------------------------------------------------

#: Paddle's CPU softmax kernels clip ``x - max`` from below at -64 (``ValueClip``), so a
#: log-softmax is never below about -64 and a softmax never exactly 0
CLIP = -64.0


def _shifted(ctx: Lowering, x: Value, axis: int) -> Value:
    """max(x - max(x), -64) along ``axis``, as Paddle's kernels compute it."""
    m = reduce(ctx, x, "max", [axis], True)
    shifted = ctx.op("sub", x, ctx.broadcast_to(m, x.shape))
    return ctx.op("max", shifted, ctx.full(CLIP, x.dtype, x.shape))


def _softmax(ctx: Lowering, x: Value, axis: int) -> Value:
    e = ctx.op("exp", _shifted(ctx, x, axis))
    return ctx.op("div", e, ctx.broadcast_to(reduce(ctx, e, "sum", [axis], True), x.shape))


def _log_softmax(ctx: Lowering, x: Value, axis: int) -> Value:
    shifted = _shifted(ctx, x, axis)
    lse = ctx.op("log", reduce(ctx, ctx.op("exp", shifted), "sum", [axis], True))
    return ctx.op("sub", shifted, ctx.broadcast_to(lse, x.shape))


def _x_axis(ctx: Lowering, op: Any, x: Value) -> int:
    return _axis(op, int(ctx.attr(op, "axis", -1)), x.rank)


@converter("pd_op.softmax", dtypes=FLOAT_DTYPES)
def softmax(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    return _softmax(ctx, x, _x_axis(ctx, op, x)) if x.rank else ctx.full(1, x.dtype, [])


@converter("pd_op.log_softmax", dtypes=FLOAT_DTYPES)
def log_softmax(ctx: Lowering, op: Any) -> Value:
    x = ctx.input(op, 0)
    return _log_softmax(ctx, x, _x_axis(ctx, op, x)) if x.rank else ctx.full(0, x.dtype, [])


@converter("pd_op.softmax_grad", dtypes=FLOAT_DTYPES)
def softmax_grad(ctx: Lowering, op: Any) -> Value:
    """Inputs (out, out_grad): out * (g - sum(g * out))."""
    out, g = ctx.input(op, 0), ctx.input(op, 1)
    if not out.rank:
        return ctx.full(0, out.dtype, [])
    axis = _x_axis(ctx, op, out)
    s = reduce(ctx, ctx.op("mul", g, out), "sum", [axis], True)
    return ctx.op("mul", out, ctx.op("sub", g, ctx.broadcast_to(s, out.shape)))


@converter("pd_op.log_softmax_grad", dtypes=FLOAT_DTYPES)
def log_softmax_grad(ctx: Lowering, op: Any) -> Value:
    """Inputs (out, out_grad): g - exp(out) * sum(g)."""
    out, g = ctx.input(op, 0), ctx.input(op, 1)
    if not out.rank:
        return ctx.full(0, out.dtype, [])
    axis = _x_axis(ctx, op, out)
    s = ctx.broadcast_to(reduce(ctx, g, "sum", [axis], True), out.shape)
    return ctx.op("sub", g, ctx.op("mul", ctx.op("exp", out), s))


# -- layer norm ---------------------------------------------------------------------------

def _ln_axes(ctx: Lowering, op: Any, x: Value) -> list[int]:
    """The normalized dims: ``begin_norm_axis`` (Paddle takes 1 <= it < rank) onwards."""
    b = int(ctx.attr(op, "begin_norm_axis", 1))
    if not 0 < b < x.rank:
        raise ConversionError(f"{op.name()}: begin_norm_axis {b} for rank {x.rank}")
    return list(range(b, x.rank))


def _ln_param(ctx: Lowering, v: Value | None, x: Value, axes: list[int]) -> Value | None:
    """scale/bias: flat over the normalized dims, broadcast over x."""
    if v is None:
        return None
    shape = [x.shape[a] for a in axes]
    return ctx.broadcast_to(ctx.reshape(v, shape), list(x.shape))


@converter("pd_op.layer_norm", dtypes=FLOAT_DTYPES)
def layer_norm(ctx: Lowering, op: Any) -> list[Value]:
    """(out, mean, variance): mean and the biased variance over the dims from
    ``begin_norm_axis`` on, each of shape ``x.shape[:begin_norm_axis]``."""
    x = ctx.input(op, 0)
    axes = _ln_axes(ctx, op, x)
    eps = float(ctx.attr(op, "epsilon", 1e-5))
    n = ctx.broadcast_to(_count(ctx, x, axes), _kept_shape(x, axes))
    mean = ctx.op("div", reduce(ctx, x, "sum", axes, True), n)
    centered = ctx.op("sub", x, ctx.broadcast_to(mean, x.shape))
    var = ctx.op("div", reduce(ctx, ctx.op("mul", centered, centered), "sum", axes, True), n)
    rstd = ctx.op("rsqrt", ctx.op("add", var, ctx.full(eps, x.dtype, var.shape)))
    out = ctx.op("mul", centered, ctx.broadcast_to(rstd, x.shape))
    scale = _ln_param(ctx, ctx.optional(op, 1), x, axes)
    bias = _ln_param(ctx, ctx.optional(op, 2), x, axes)
    if scale is not None:
        out = ctx.op("mul", out, scale)
    if bias is not None:
        out = ctx.op("add", out, bias)
    lead = list(x.shape[:axes[0]])
    return [out, ctx.reshape(mean, lead), ctx.reshape(var, lead)]


@converter("pd_op.layer_norm_grad", dtypes=FLOAT_DTYPES)
def layer_norm_grad(ctx: Lowering, op: Any) -> list[Value | None]:
    """Inputs (x, scale, bias, mean, variance, out_grad); outputs (x_grad, scale_grad,
    bias_grad), any of them possibly unset. With xhat = (x - mean) * rstd and
    g = out_grad * scale: x_grad = rstd * (g - mean(g) - xhat * mean(g * xhat))."""
    x = ctx.input(op, 0)
    axes = _ln_axes(ctx, op, x)
    eps = float(ctx.attr(op, "epsilon", 1e-5))
    mean, var, dy = ctx.input(op, 3), ctx.input(op, 4), ctx.input(op, 5)
    kept = _kept_shape(x, axes)
    mean = ctx.broadcast_to(ctx.reshape(mean, kept), list(x.shape))
    var = ctx.reshape(var, kept)
    rstd = ctx.op("rsqrt", ctx.op("add", var, ctx.full(eps, x.dtype, var.shape)))
    rstd = ctx.broadcast_to(rstd, list(x.shape))
    xhat = ctx.op("mul", ctx.op("sub", x, mean), rstd)
    lead = [i for i in range(x.rank) if i not in axes]
    pshape = [_numel([x.shape[a] for a in axes])]
    outs: list[Value | None] = [None, None, None]
    if op.result(0).initialized():
        scale = _ln_param(ctx, ctx.optional(op, 1), x, axes)
        g = ctx.op("mul", dy, scale) if scale is not None else dy
        n = ctx.broadcast_to(_count(ctx, x, axes), kept)
        mg = ctx.op("div", reduce(ctx, g, "sum", axes, True), n)
        mgx = ctx.op("div", reduce(ctx, ctx.op("mul", g, xhat), "sum", axes, True), n)
        inner = ctx.op("sub", ctx.op("sub", g, ctx.broadcast_to(mg, x.shape)),
                       ctx.op("mul", xhat, ctx.broadcast_to(mgx, x.shape)))
        outs[0] = ctx.op("mul", rstd, inner)
    # without a scale (bias) there is no scale (bias) gradient: PIR may still type the
    # result (as a [0] tensor), but nothing reads it
    if op.result(1).initialized() and ctx.operand(op, 1) is not None:
        outs[1] = ctx.reshape(reduce(ctx, ctx.op("mul", dy, xhat), "sum", lead), pshape)
    if op.result(2).initialized() and ctx.operand(op, 2) is not None:
        outs[2] = ctx.reshape(reduce(ctx, dy, "sum", lead), pshape)
    return outs


# -- losses -------------------------------------------------------------------------------

class _Xent:
    """cross_entropy_with_softmax's attributes and its one-hot of hard labels."""

    def __init__(self, ctx: Lowering, op: Any, x: Value, label: Value):
        self.soft = bool(ctx.attr(op, "soft_label", False))
        self.use_softmax = bool(ctx.attr(op, "use_softmax", True))
        self.ignore = int(ctx.attr(op, "ignore_index", -100))
        if x.rank == 0:
            raise ConversionError(f"{op.name()} of a 0-D input")
        self.axis = _axis(op, int(ctx.attr(op, "axis", -1)), x.rank)
        if label.rank != x.rank:
            raise ConversionError(f"{op.name()}: a label of rank {label.rank} for an input "
                                  f"of rank {x.rank}")
        if self.soft and label.dtype != x.dtype:
            raise ConversionError(f"{op.name()}: soft labels of dtype {label.dtype}",
                                  code="unsupported_dtype")
        if not self.soft and not label.dtype.is_int:
            raise ConversionError(f"{op.name()}: hard labels of dtype {label.dtype}",
                                  code="unsupported_dtype")
        self.shape = list(x.shape)

    def align(self, ctx: Lowering, label: Value) -> Value:
        """``label`` on x's dims except the class axis. Paddle requires them equal; a
        language model's labels and logits come from two inputs, whose sizes DISC knows as
        unrelated symbols, and every mask and select built from the label must then follow
        x's dims (the native engine fuses nothing else): the broadcast maps the label's
        dims onto x's, checked at run time."""
        dims = [d if i != self.axis else label.shape[i] for i, d in enumerate(self.shape)]
        return ctx.broadcast_to(label, dims)

    def onehot(self, ctx: Lowering, label: Value) -> tuple[Value, Value]:
        """(label == class along the axis, label != ignore_index) over x's shape."""
        lab = ctx.broadcast_to(label, self.shape)
        iota = ctx.op("iota", shape=self.shape, dimension=self.axis, dtype=label.dtype)
        hit = ctx.op("compare", iota, lab, direction="eq")
        keep = ctx.op("compare", label, ctx.full(self.ignore, label.dtype, label.shape),
                      direction="ne")
        return hit, keep


@converter("pd_op.cross_entropy_with_softmax", dtypes=FLOAT_DTYPES)
def cross_entropy_with_softmax(ctx: Lowering, op: Any) -> list[Value]:
    """(softmax, loss). use_softmax=False takes the input as probabilities (the first
    output is the input). Hard labels equal to ignore_index get a zero loss."""
    x, label = ctx.input(op, 0), ctx.input(op, 1)
    xe = _Xent(ctx, op, x, label)
    label = xe.align(ctx, label)
    if xe.use_softmax:
        logp = _log_softmax(ctx, x, xe.axis)
        sm = ctx.op("exp", logp)
    else:
        logp, sm = ctx.op("log", x), x
    zero = ctx.full(0, x.dtype, x.shape)
    if xe.soft:
        terms = ctx.op("mul", ctx.broadcast_to(label, xe.shape), logp)
        return [sm, ctx.op("neg", reduce(ctx, terms, "sum", [xe.axis], True))]
    hit, keep = xe.onehot(ctx, label)
    picked = reduce(ctx, ctx.op("select", hit, logp, zero), "sum", [xe.axis], True)
    loss = ctx.op("select", keep, ctx.op("neg", picked), ctx.full(0, x.dtype, picked.shape))
    return [sm, loss]


@converter("pd_op.cross_entropy_with_softmax_grad", dtypes=NUMERIC_DTYPES)
def cross_entropy_with_softmax_grad(ctx: Lowering, op: Any) -> Value:
    """Inputs (label, softmax, loss_grad): (softmax - label) * loss_grad with softmax, or
    -label / input * loss_grad without; ignored hard-label rows get zeros."""
    label, sm, dl = ctx.input(op, 0), ctx.input(op, 1), ctx.input(op, 2)
    xe = _Xent(ctx, op, sm, label)
    label = xe.align(ctx, label)
    dl = ctx.broadcast_to(dl, xe.shape)
    zero = ctx.full(0, sm.dtype, xe.shape)
    if xe.soft:
        lab = ctx.broadcast_to(label, xe.shape)
        d = ctx.op("sub", sm, lab) if xe.use_softmax else ctx.op("neg", ctx.op("div", lab, sm))
        return ctx.op("mul", d, dl)
    hit, keep = xe.onehot(ctx, label)
    keep = ctx.broadcast_to(keep, xe.shape)
    if xe.use_softmax:
        d = ctx.op("sub", sm, ctx.cast(hit, sm.dtype))
    else:
        d = ctx.op("select", hit, ctx.op("neg", ctx.op("div", ctx.full(1, sm.dtype, xe.shape),
                                                         sm)), zero)
    return ctx.op("select", keep, ctx.op("mul", d, dl), zero)


# -- dropout ------------------------------------------------------------------------------

def _dropout_scale(ctx: Lowering, op: Any) -> float | None:
    """The inference-mode factor (None: identity); training dropout is random and refused."""
    if not ctx.attr(op, "is_test", False):
        raise ConversionError(f"{op.name()} in training mode draws random masks (stays "
                              "with Paddle)", code="unsupported_attribute")
    mode = str(ctx.attr(op, "mode", "downgrade_in_infer"))
    if mode == "upscale_in_train":
        return None
    if mode != "downgrade_in_infer":
        raise ConversionError(f"{op.name()}: mode {mode!r}")
    v = ctx.operand(op, 2) if op.num_operands() > 2 else None  # p, both ops' operand 2
    p = ctx.known_scalar(v, "dropout p") if v is not None else ctx.attr(op, "p")
    return 1.0 - float(p)


@converter("pd_op.dropout", dtypes=FLOAT_DTYPES)
def dropout(ctx: Lowering, op: Any) -> list[Value | None]:
    """(out, mask): in inference mode out is x (upscale_in_train) or x * (1 - p)
    (downgrade_in_infer); the mask is not written by Paddle then, nor here."""
    x = ctx.input(op, 0)
    k = _dropout_scale(ctx, op)
    out = x if k is None else ctx.op("mul", x, ctx.full(k, x.dtype, x.shape))
    return [out, None]


@converter("pd_op.dropout_grad", dtypes=ALL_DTYPES)
def dropout_grad(ctx: Lowering, op: Any) -> Value:
    """Inputs (mask, out_grad, p): inference mode ignores the mask."""
    g = ctx.input(op, 1)
    k = _dropout_scale(ctx, op)
    return g if k is None else ctx.op("mul", g, ctx.full(k, g.dtype, g.shape))
