"""Contractions: mm, bmm, addmm, and convolution (forward and backward; N-d, strided,
padded, dilated, grouped).

These are the compute-bound ops the native engine hands to BLAS (dot_general) or lowers to
im2col GEMMs (convolution); see docs/architecture.md. The convolution gradients are core
convolutions themselves (GraphBuilder.conv_input_grad / conv_filter_grad), shared with the
other bridges.
"""

from __future__ import annotations

import torch

from ..context import ConversionError
from .registry import FLOAT_DTYPES, converter

aten = torch.ops.aten


@converter(aten.mm.default, dtypes=FLOAT_DTYPES)
def mm(ctx, node):
    a, b = (ctx.value(x) for x in node.args[:2])
    return ctx.op("dot_general", a, b, lhs_batch=[], rhs_batch=[], lhs_contract=[1],
                  rhs_contract=[0])


@converter(aten.bmm.default, dtypes=FLOAT_DTYPES)
def bmm(ctx, node):
    a, b = (ctx.value(x) for x in node.args[:2])
    return ctx.op("dot_general", a, b, lhs_batch=[0], rhs_batch=[0], lhs_contract=[2],
                  rhs_contract=[1])


def _scalars(node):
    for k in ("beta", "alpha"):
        if not isinstance(node.kwargs.get(k, 1), (int, float)):
            return f"{k} computed at run time"
    return None


@converter(aten.addmm.default, dtypes=FLOAT_DTYPES, check=_scalars)
def addmm(ctx, node):
    bias, a, b = node.args[:3]
    dt, shape = ctx.dtype(node), ctx.shape(node)
    prod = ctx.op("dot_general", ctx.value(a), ctx.value(b), lhs_batch=[], rhs_batch=[],
                  lhs_contract=[1], rhs_contract=[0])
    alpha, beta = node.kwargs.get("alpha", 1), node.kwargs.get("beta", 1)
    if alpha != 1:
        prod = ctx.op("mul", prod, ctx.full(alpha, dt, shape))
    if beta == 0:
        return prod
    c = ctx.operand(bias, dt, shape)
    if beta != 1:
        c = ctx.op("mul", c, ctx.full(beta, dt, shape))
    return ctx.op("add", prod, c)


_SPATIAL = "DHW"


def _conv_check(node):
    transposed = node.args[6]
    if transposed:
        return "transposed convolution (needs lhs dilation, not native yet)"
    for name, arg in (("stride", node.args[3]), ("padding", node.args[4]),
                      ("dilation", node.args[5])):
        if not all(isinstance(v, int) for v in arg):
            return f"{name} computed at run time"
    w = node.args[1].meta.get("val") if isinstance(node.args[1], torch.fx.Node) else None
    if w is not None and not all(isinstance(d, int) for d in w.shape[2:]):
        return "kernel with a symbolic size"
    return None


@converter(aten.convolution.default, dtypes=FLOAT_DTYPES, check=_conv_check)
def convolution(ctx, node):
    x, w, bias, stride, padding, dilation, _transposed, _out_pad, groups = node.args[:9]
    lhs, rhs = ctx.value(x), ctx.value(w)
    n = lhs.rank - 2
    if not 1 <= n <= 3:
        raise ConversionError(f"convolution with {n} spatial dims")
    sp = _SPATIAL[3 - n:]
    expand = (lambda v: list(v) * n if len(v) == 1 else list(v))  # noqa: E731
    out = ctx.op("convolution", lhs, rhs, window_strides=expand(stride),
                 padding=[(p, p) for p in expand(padding)], lhs_dilation=[1] * n,
                 rhs_dilation=expand(dilation), feature_group_count=groups,
                 batch_group_count=1, input_layout="NC" + sp, kernel_layout="OI" + sp,
                 output_layout="NC" + sp)
    if bias is not None:
        b = ctx.value(bias)
        out = ctx.op("add", out, ctx.op("broadcast_in_dim", b, shape=list(out.shape),
                                        broadcast_dimensions=[1]))
    return out


def _conv_backward_check(node):
    transposed = node.args[7]
    if transposed:
        return "transposed convolution"
    for name, arg in (("stride", node.args[4]), ("padding", node.args[5]),
                      ("dilation", node.args[6])):
        if not all(isinstance(v, int) for v in arg):
            return f"{name} computed at run time"
    w = node.args[2].meta.get("val") if isinstance(node.args[2], torch.fx.Node) else None
    if w is not None and not all(isinstance(d, int) for d in w.shape):
        return "kernel with a symbolic size"
    if w is not None and not 1 <= w.dim() - 2 <= 3:
        return f"convolution with {w.dim() - 2} spatial dims"
    return None


@converter(aten.convolution_backward.default, dtypes=FLOAT_DTYPES, check=_conv_backward_check)
def convolution_backward(ctx, node):
    """(grad_input, grad_weight, grad_bias), each only where ``output_mask`` asks for it
    (torch returns None for the others)."""
    dy_n, x_n, w_n, _bias_sizes, stride, padding, dilation, _tr, _out_pad, groups, mask = \
        node.args[:11]
    dy, w = ctx.value(dy_n), ctx.value(w_n)
    n = dy.rank - 2
    sp = _SPATIAL[3 - n:]
    expand = (lambda v: list(v) * n if len(v) == 1 else list(v))  # noqa: E731
    kw = dict(window_strides=expand(stride), padding=[(p, p) for p in expand(padding)],
              rhs_dilation=expand(dilation), feature_group_count=groups,
              input_layout="NC" + sp, kernel_layout="OI" + sp, output_layout="NC" + sp)
    dx = dw = db = None
    if mask[0]:
        dx = ctx.b.conv_input_grad(dy, w, ctx.shape(x_n), **kw)
    if mask[1]:
        dw = ctx.b.conv_filter_grad(ctx.value(x_n), dy, w.shape, **kw)
    if mask[2]:
        db = ctx.op("reduce", dy, kind="sum", axes=[0, *range(2, dy.rank)])
    return dx, dw, db
