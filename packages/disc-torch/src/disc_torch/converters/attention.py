"""CPU flash attention, forward and backward, as DISC's fused attention ops.

``aten._scaled_dot_product_flash_attention_for_cpu`` (what 4-d
``scaled_dot_product_attention`` without dropout runs on CPU) becomes one core
``attention`` op and its backward one ``attention_grad``: blocked kernels that never
materialize the [B, H, Sq, Sk] scores (disc_core ``ops/attention.py``). The same
conventions as torch's kernel (a fully masked row gives output 0 and logsumexp 0; causal
is top-left aligned), so the saved logsumexp crosses between the two like torch's.

What the fused ops do not cover (``fused_attention_covers``: dropout, grouped-query heads,
f16/bf16) keeps DISC's exact decomposition
(``attention_decomposition.py``), chosen where aot_autograd decomposes, so the converter
only ever sees covered nodes.
"""

from __future__ import annotations

import torch

from disc_core.dtypes import DType

from ..attention_decomposition import fused_attention_reason
from .registry import FLOAT_DTYPES, converter

aten = torch.ops.aten

_FWD = aten._scaled_dot_product_flash_attention_for_cpu.default
_BWD = aten._scaled_dot_product_flash_attention_for_cpu_backward.default


def _meta(arg):
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None


def _check(node) -> str | None:
    grad = node.target is _BWD
    q, k, v = (_meta(a) for a in (node.args[1:4] if grad else node.args[:3]))
    dropout = node.args[6] if grad else (node.args[3] if len(node.args) > 3 else 0.0)
    mask = _meta(node.kwargs.get("attn_mask"))
    return fused_attention_reason(q, k, v, dropout, mask, node.kwargs.get("scale"))


def _mask(ctx, node, q):
    """The additive mask as the query's dtype and rank (leading 1s), or None."""
    arg = node.kwargs.get("attn_mask")
    if arg is None:
        return None
    m = ctx.value(arg)
    if m.dtype is DType.BOOL:  # True keeps a score, False masks it
        zero = ctx.full(0.0, q.dtype, m.shape)
        ninf = ctx.full(float("-inf"), q.dtype, m.shape)
        m = ctx.op("select", m, zero, ninf)
    else:
        m = ctx.cast(m, q.dtype)
    if m.rank < q.rank:
        m = ctx.reshape(m, [1] * (q.rank - m.rank) + list(m.shape))
    return m


def _attrs(node, causal: bool) -> dict:
    """The op's attributes; no scale: SDPA's default, 1/sqrt(head dim), which the op
    evaluates at run time (the head dim may be symbolic)."""
    s = node.kwargs.get("scale")
    return {"causal": causal} | ({"rsqrt_head_dim": True} if s is None else {"scale": float(s)})


@converter(_FWD, dtypes=FLOAT_DTYPES | {torch.bool}, check=_check)
def flash_attention(ctx, node):
    q, k, v = (ctx.value(a) for a in node.args[:3])
    causal = bool(node.args[4]) if len(node.args) > 4 else False
    mask = _mask(ctx, node, q)
    extra = [] if mask is None else [mask]
    out, lse = ctx.op("attention", q, k, v, *extra, **_attrs(node, causal))
    return out, lse


@converter(_BWD, dtypes=FLOAT_DTYPES | {torch.bool}, check=_check)
def flash_attention_backward(ctx, node):
    d_out, q, k, v, out, lse = (ctx.value(a) for a in node.args[:6])
    causal = bool(node.args[7])
    mask = _mask(ctx, node, q)
    extra = [] if mask is None else [mask]
    return ctx.op("attention_grad", q, k, v, out, d_out, lse, *extra, **_attrs(node, causal))
