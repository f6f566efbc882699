"""Exact decompositions of torch's CPU flash attention, forward and backward.

On CPU, ``scaled_dot_product_attention`` with 4-d inputs and no dropout dispatches to
``aten._scaled_dot_product_flash_attention_for_cpu``, which returns the output AND the
logsumexp of every score row; its derivative formula hands both to
``aten._scaled_dot_product_flash_attention_for_cpu_backward``. aot_autograd applies
decompositions below autograd, so a decomposition of the forward must reproduce every
output the backward consumes. torch's own decomposition (meant for export) returns the
attention probabilities in place of the logsumexp, and training through it gave
gradients off by 100-1000% (the second output is not what the backward reads).

These decompositions compute both outputs exactly (a fully masked row gives output 0
and logsumexp 0, as the kernel does) and the backward from them the way the kernel
does (recompute the probabilities from the logsumexp), so attention trains inside DISC
clusters. Cases they do not cover (dropout, grouped-query heads, a symbolic head size)
return ``NotImplemented``: the op then runs in torch, forward and backward alike.
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["default_scale", "flash_attention_backward", "flash_attention_forward",
           "fused_attention_reason"]

aten = torch.ops.aten

#: dtypes of DISC's fused attention ops
_FUSED_DTYPES = (torch.float32, torch.float64)


def default_scale(head_dim: int) -> float:
    """The scale SDPA applies when none is given: 1 / sqrt(head dim)."""
    return 1.0 / math.sqrt(head_dim)


def fused_attention_reason(query: Any, key: Any, value: Any, dropout_p: float,
                           attn_mask: Any, scale: float | None) -> str | None:
    """Why a flash-attention call is not one of DISC's fused ``attention`` ops (the
    torch converters in ``converters/attention.py``), or None when it is. Off entirely
    with ``DISC_FUSED_ATTENTION=0``."""
    from disc_core.options import CORE_OPTIONS

    if not CORE_OPTIONS.value("fused_attention"):
        return "fused attention turned off (DISC_FUSED_ATTENTION=0)"
    ts = (query, key, value)
    if not all(isinstance(t, torch.Tensor) for t in ts):
        return "query, key or value is not a tensor"
    if dropout_p != 0.0:
        return "dropout"
    if any(t.dtype not in _FUSED_DTYPES or t.dtype != query.dtype for t in ts):
        return f"dtype {query.dtype} (the fused kernels take float32 and float64)"
    if any(t.dim() != 4 for t in ts):
        return "query, key and value are not 4-d"
    if query.shape[1] != key.shape[1] or key.shape[1] != value.shape[1]:
        return "grouped-query heads"
    if attn_mask is not None:
        if not isinstance(attn_mask, torch.Tensor) or attn_mask.dim() > 4:
            return "attention mask of rank above 4"
        if attn_mask.dtype != torch.bool and attn_mask.dtype != query.dtype:
            return f"attention mask of dtype {attn_mask.dtype}"
    return None


def _covered(query: torch.Tensor, key: torch.Tensor, dropout_p: float) -> bool:
    return (dropout_p == 0.0 and query.dim() == 4 and key.dim() == 4
            and isinstance(query.shape[-1], int)
            and query.shape[1] == key.shape[1])  # grouped-query heads stay in torch


def _accumulator(t: torch.Tensor) -> torch.dtype:
    """The dtype the kernel accumulates in (and returns the logsumexp in)."""
    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


def _scores(query: torch.Tensor, key: torch.Tensor, is_causal: bool,
            attn_mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """scale * Q K^T, plus the additive mask, with -inf above the causal diagonal
    (top-left aligned, as the kernel aligns it when L != S)."""
    scores = torch.matmul(query, key.transpose(-2, -1)) * scale
    if is_causal:
        rows = torch.arange(query.shape[-2], device=query.device).unsqueeze(-1)
        cols = torch.arange(key.shape[-2], device=query.device).unsqueeze(0)
        scores = scores.masked_fill(cols > rows, float("-inf"))
    if attn_mask is not None:
        scores = scores + attn_mask.to(scores.dtype)
    return scores


def _scale(query: torch.Tensor, scale: float | None) -> float:
    return scale if scale is not None else default_scale(query.shape[-1])


def flash_attention_forward(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            dropout_p: float = 0.0, is_causal: bool = False, *,
                            attn_mask: torch.Tensor | None = None,
                            scale: float | None = None) -> Any:
    """(output, logsumexp) of ``_scaled_dot_product_flash_attention_for_cpu``; declined
    where DISC's fused attention op takes the call as it is."""
    if not _covered(query, key, dropout_p) or fused_attention_reason(
            query, key, value, dropout_p, attn_mask, scale) is None:
        return NotImplemented
    acc = _accumulator(query)
    q, k, v = query.to(acc), key.to(acc), value.to(acc)
    scores = _scores(q, k, is_causal, attn_mask, _scale(query, scale))
    row_max = scores.amax(-1, keepdim=True)
    # a row whose every score is -inf (fully masked): shift by 0 so exp gives zeros
    shift = torch.where(row_max == float("-inf"), torch.zeros_like(row_max), row_max)
    weights = torch.exp(scores - shift)
    total = weights.sum(-1, keepdim=True)
    empty = total == 0
    probs = weights / torch.where(empty, torch.ones_like(total), total)
    output = torch.matmul(probs, v).to(query.dtype)
    logsumexp = torch.where(empty, torch.zeros_like(total), torch.log(total) + shift)
    return output, logsumexp.squeeze(-1)


def flash_attention_backward(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                             value: torch.Tensor, out: torch.Tensor, logsumexp: torch.Tensor,
                             dropout_p: float, is_causal: bool, *,
                             attn_mask: torch.Tensor | None = None,
                             scale: float | None = None) -> Any:
    """(grad_query, grad_key, grad_value) of
    ``_scaled_dot_product_flash_attention_for_cpu_backward``: the probabilities come
    back from the saved logsumexp (masked scores give exp(-inf) = 0, and a fully masked
    row, whose logsumexp is 0, gives zeros), then the softmax and matmul gradients.
    Declined where DISC's fused ``attention_grad`` op takes the call."""
    if not _covered(query, key, dropout_p) or fused_attention_reason(
            query, key, value, dropout_p, attn_mask, scale) is None:
        return NotImplemented
    acc = _accumulator(query)
    q, k, v = query.to(acc), key.to(acc), value.to(acc)
    d_out, o = grad_out.to(acc), out.to(acc)
    s = _scale(query, scale)
    probs = torch.exp(_scores(q, k, is_causal, attn_mask, s) - logsumexp.unsqueeze(-1))
    grad_v = torch.matmul(probs.transpose(-2, -1), d_out)
    grad_probs = torch.matmul(d_out, v.transpose(-2, -1))
    row_dot = (d_out * o).sum(-1, keepdim=True)
    grad_scores = probs * (grad_probs - row_dot)
    grad_q = torch.matmul(grad_scores, k) * s
    grad_k = torch.matmul(grad_scores.transpose(-2, -1), q) * s
    return grad_q.to(query.dtype), grad_k.to(key.dtype), grad_v.to(value.dtype)
