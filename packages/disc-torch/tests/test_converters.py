"""Op-level parity: every converter against eager torch, through the whole backend.

Each case is compiled once (``min_cluster_size=1`` so a single op is a cluster) and called
on several shapes of one rank, including sizes 0 and 1, odd sizes and shapes never seen at
compile time; every call must match eager, the op under test must be compiled (not a
fallback), and DISC must compile once per dtype signature. Differentiable float cases also
compare gradients in float64.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch
import torch.nn.functional as F
from helpers import assert_same, built_artifacts, fallbacks

import disc_torch

SIZES = [(3, 5), (1, 7), (4, 1), (0, 3), (6, 33)]  # (rows, cols): edge, odd, unseen
F32 = torch.float32
F64 = torch.float64
I64 = torch.int64
I32 = torch.int32


@dataclass
class Case:
    name: str
    fn: Callable
    make: Callable  # (rows, cols, dtype, generator) -> tuple of inputs
    dtypes: tuple = (F32, F64)
    grad: bool = False  # compare gradients w.r.t. the float inputs (float64)
    # the backward compiles too: no fallback (min_cluster_size=1), one compile per cluster
    strict_backward: bool = False
    sizes: list = field(default_factory=lambda: SIZES)


def rand(r, c, dt, g, *, low=-3.0, high=3.0):
    if dt.is_floating_point:
        return torch.rand(r, c, generator=g, dtype=F64).mul(high - low).add(low).to(dt)
    if dt == torch.bool:
        return torch.rand(r, c, generator=g) > 0.5
    return torch.randint(-5, 6, (r, c), generator=g).to(dt)


def x1(r, c, dt, g):
    return (rand(r, c, dt, g),)


def x2(r, c, dt, g):
    return rand(r, c, dt, g), rand(r, c, dt, g)


def xrow(r, c, dt, g):  # broadcasting: [r, c] with [c]
    return rand(r, c, dt, g), rand(1, c, dt, g)[0]


def pos(r, c, dt, g):
    return (rand(r, c, dt, g, low=0.1, high=4.0),)


def unit(r, c, dt, g):
    return (rand(r, c, dt, g, low=-0.9, high=0.9),)


LAYOUT_SIZES = [(3, 5), (1, 7), (4, 1), (6, 33)]  # no 0: see test_dynamic for size 0


def rows3(r, c, dt, g):  # rank 3 for layout ops
    return (torch.rand(2, r, c, generator=g, dtype=F64).to(dt),)


def _assign_shifted(a):
    out = torch.zeros_like(a)
    out[..., 1:] = a[..., :-1] * 2
    out[..., 0] = 7
    return out + 0


def _assign_column(a):
    """A [.., 1] float64 source broadcast over the columns it is copied into."""
    out = a.clone()
    out[:, :, 1:] = a[:, :, :1].to(F64) * 1.5
    return out * 1


FLOAT_CASES = [
    Case("add", lambda a, b: a + b * 2, x2, (F32, F64, I64), grad=True),
    Case("add_alpha", lambda a, b: torch.add(a, b, alpha=3), x2, (F32, I64)),
    Case("sub_bcast", lambda a, b: a - b, xrow, (F32, F64, I64), grad=True),
    Case("mul_scalar", lambda a: a * 2.5 + 1, x1, (F32, F64, I64), grad=True),
    Case("div", lambda a, b: a / (b.abs() + 1), x2, (F32, F64), grad=True),
    Case("int_true_div", lambda a, b: a / (b.abs() + 1), x2, (I64,)),
    Case("div_floor", lambda a, b: torch.div(a, b.abs() + 1, rounding_mode="floor"), x2,
         (F32, F64)),
    Case("div_trunc", lambda a, b: torch.div(a, b.abs() + 1, rounding_mode="trunc"), x2,
         (F32, I64)),
    # integer floor division: divisors and dividends of both signs, exact and inexact
    Case("div_floor_signed", lambda a, b: torch.div(a, torch.where(b == 0, -3, b),
                                                    rounding_mode="floor") * 2, x2,
         (I64, I32, F32)),
    # a comparison with a size known at run time (a symbolic scalar operand)
    Case("compare_size", lambda a: (a * 4 < a.shape[0]).to(a.dtype) + (a > a.shape[1] - 5),
         x1, (F32, I64)),
    Case("remainder", lambda a, b: torch.remainder(a, b.abs() + 1), x2, (F32,)),
    Case("fmod", lambda a, b: torch.fmod(a, b.abs() + 1), x2, (F32,)),
    Case("neg_abs_sign", lambda a: -a.abs() + a.sign(), x1, (F32, I64), grad=False),
    Case("exp_log", lambda a: torch.exp(a) + torch.log(a), pos, grad=True),
    Case("log1p_expm1", lambda a: torch.log1p(a) + torch.expm1(a), pos, grad=True),
    Case("sqrt_rsqrt", lambda a: a.sqrt() * a.rsqrt() + a.reciprocal(), pos, grad=True),
    Case("trig", lambda a: a.sin() + a.cos() + a.tan() + torch.atan2(a, a + 1), unit,
         grad=True),
    Case("tanh_sigmoid", lambda a: a.tanh() + a.sigmoid(), x1, grad=True),
    Case("erf", lambda a: torch.erf(a), x1, grad=True),
    Case("rounding", lambda a: a.floor() + a.ceil() + a.round(), x1),
    Case("pow", lambda a: a ** 2 + a ** 3 + a.abs() ** 0.5 + (a.abs() + 1) ** 1.7, x1,
         grad=True),
    Case("pow_tensor", lambda a, b: (a.abs() + 0.5) ** b, x2, grad=True),
    Case("relu", F.relu, x1, (F32, F64, I64), grad=True),
    Case("gelu", F.gelu, x1, grad=True),
    Case("gelu_tanh", lambda a: F.gelu(a, approximate="tanh"), x1, grad=True),
    Case("silu", F.silu, x1, grad=True),
    Case("softplus", lambda a: F.softplus(a, beta=2.0, threshold=3.0), x1, grad=True),
    Case("leaky_relu", lambda a: F.leaky_relu(a, 0.2), x1, grad=True),
    Case("hardswish", F.hardswish, x1, grad=True),
    Case("hardtanh", lambda a: F.hardtanh(a, -0.5, 2.0), x1, grad=True),
    Case("elu", F.elu, x1, grad=True),
    Case("max_min", lambda a, b: torch.maximum(a, b) - torch.minimum(a, b), x2,
         (F32, I64), grad=True),
    Case("clamp", lambda a: a.clamp(-1, 2) + a.clamp(min=0.5), x1, (F32, I64), grad=True),
    Case("compare", lambda a, b: ((a < b) | (a >= 1)) & ~(a == b) ^ (a != 0.5), x2,
         (F32, I64)),
    Case("compare_scalar", lambda a: (a > 0).to(a.dtype) + (a <= 1).to(a.dtype), x1,
         (F32, I64)),
    Case("logical", lambda a, b: torch.logical_and(a > 0, b) | torch.logical_xor(a, b),
         lambda r, c, dt, g: (rand(r, c, dt, g), rand(r, c, torch.bool, g)), (F32,)),
    Case("where", lambda a, b: torch.where(a > b, a, b * 2), x2, (F32, I64), grad=True),
    Case("where_scalar", lambda a: torch.where(a > 0, a, 0.0), x1, grad=True),
    Case("masked_fill", lambda a: a.masked_fill(a < 0, float("-inf")).exp(), x1),
    Case("isfinite", lambda a: torch.isfinite(a / (a - a.round())).to(a.dtype), x1),
    Case("cast", lambda a: (a * 3).to(torch.int32).to(a.dtype) + a.to(F64).to(a.dtype), x1,
         grad=False),
    Case("bitwise", lambda a, b: (a & b) | (a ^ 3), x2, (I64,)),
    Case("symfloat_scalar", lambda a: a * (1.0 / (a.shape[0] * a.shape[1])), x1, grad=True,
         sizes=[(3, 5), (1, 7), (4, 1), (6, 33)]),
    Case("size_arithmetic", lambda a: a + (a.shape[1] // 2) - (a.shape[0] % 3)
         + -(-a.shape[1] // 4), x1, (F32, I64)),
]

REDUCTION_CASES = [
    Case("sum", lambda a: a.sum(-1) + a.sum(0, keepdim=True).sum(), x1, (F32, F64, I64),
         grad=True),
    Case("sum_all", lambda a: a.sum(), x1, (F32, I64), grad=True),
    Case("mean", lambda a: a.mean(-1, keepdim=True) * a, x1, grad=True),
    Case("var", lambda a: a.var(-1).sum() + a.var(0, correction=0).sum(), x1, grad=True,
         sizes=[(3, 5), (2, 7), (5, 2), (6, 33)]),
    Case("amax_amin", lambda a: a.amax(-1) - a.amin(0).sum(), x1, (F32, I64), grad=False,
         sizes=[(3, 5), (1, 7), (4, 1), (6, 33)]),
    Case("prod", lambda a: a.prod(-1), unit, grad=True),
    Case("argmax", lambda a: a.argmax(-1) + a.argmin(0).sum() + a.argmax(), x1, (F32, I64),
         sizes=[(3, 5), (1, 7), (4, 1), (6, 33)]),
    Case("max_dim", lambda a: a.max(-1).values + a.max(-1).indices.to(a.dtype), x1, (F32,),
         sizes=[(3, 5), (1, 7), (4, 1), (6, 33)]),
    Case("any_all", lambda a: (a > 0).any(-1).to(a.dtype) + (a > -2).all(0).sum(), x1,
         (F32,)),
    Case("softmax", lambda a: a.softmax(-1), x1, grad=True),
    Case("log_softmax", lambda a: F.log_softmax(a, 0), x1, grad=True),
    Case("logsumexp", lambda a: torch.logsumexp(a, -1), x1, grad=True),
    Case("layer_norm", lambda a: F.layer_norm(a, (a.shape[-1],)), x1, grad=True,
         sizes=[(3, 5), (1, 7), (4, 2), (6, 33)]),
    Case("rms_norm", lambda a: F.rms_norm(a, (a.shape[-1],), eps=1e-6), x1, grad=True),
    Case("cumsum", lambda a: torch.cumsum(a, -1), x1, (F32, F64, I32, I64), grad=True,
         strict_backward=True),
    # no size 0 here: with dtype= equal to the input's dtype (the float64 backward check),
    # torch's own fake-tensor tracing of an empty symbolic input fails (AssertionError in
    # symbolic_shapes) before DISC sees the graph, which then runs eagerly
    Case("cumsum_dim0_dtype", lambda a: torch.cumsum(a, 0, dtype=F64) + 1, x1, (F32, I32),
         grad=True, strict_backward=True, sizes=[(3, 5), (1, 7), (4, 1), (6, 33)]),
    Case("cumsum_middle", lambda a: a.cumsum(1) * 2, rows3, (F32, F64, I64), grad=True,
         strict_backward=True, sizes=[(3, 5), (1, 7), (4, 1), (6, 33)]),
    Case("cumsum_bool", lambda a: (a > 0).cumsum(-1), x1, (F32,)),
]

LAYOUT_CASES = [
    Case("view", lambda a: a.reshape(-1) * 2, rows3, grad=True),
    Case("permute", lambda a: a.permute(2, 0, 1) + 1, rows3, grad=True),
    Case("transpose", lambda a: a.transpose(1, 2) * a.transpose(1, 2), rows3, grad=True),
    Case("expand", lambda a: a[:, :1, :].expand(-1, a.shape[1], -1) + a, rows3, grad=True,
         sizes=[(3, 5), (1, 7), (4, 1), (6, 33)]),
    Case("slice", lambda a: a[:, 1:, ::2] * 3, rows3, grad=True),
    Case("slice_neg", lambda a: a[..., -2:] + 1, rows3, grad=True,
         sizes=[(3, 5), (1, 7), (4, 2), (6, 33)]),
    Case("select", lambda a: a[:, :, 0] * a[1] .sum(), rows3, grad=True,
         sizes=[(3, 5), (1, 7), (4, 1), (6, 33)]),
    # slice_scatter / select_scatter: written directly, and as autograd's gradient of a
    # slice (over zeros), which must compile too (strict_backward)
    Case("slice_scatter", lambda a: torch.slice_scatter(a, a[:, :, 1:3] * 2, 2, 1, 3) + 0,
         rows3, (F32, F64, I64), grad=True),
    Case("slice_scatter_rows", lambda a: torch.slice_scatter(a, a[:, -1:], 1, 0, 1) * 1,
         rows3, (F32, I64, torch.bool), grad=True),
    Case("slice_scatter_step", lambda a: torch.slice_scatter(a, a[:, :, ::2] * 3, 2, 0, None,
                                                             2) + 0, rows3, grad=True),
    Case("slice_scatter_step_offset",
         lambda a: torch.slice_scatter(a, a[:, :, 1::3] - 5, 2, 1, None, 3) + 0, rows3,
         (F32, I64), grad=True),
    Case("slice_scatter_neg", lambda a: torch.slice_scatter(a, a[..., -2:] + 1, -1, -2) * 1,
         rows3, grad=True, sizes=[(3, 5), (1, 7), (4, 2), (6, 33)]),
    Case("select_scatter", lambda a: torch.select_scatter(a, a[:, 0, :] * 2, 1, 0)
         + torch.select_scatter(a, a[:, :, -1] + 1, 2, -1), rows3, (F32, I64), grad=True),
    # in-place assignments into slices (T5 shifts its labels so): functionalized into
    # aten.copy (the value broadcast and cast to the slot's shape and dtype) and scatters
    Case("copy_into_slices", lambda a: _assign_shifted(a), rows3, (F32, F64, I64), grad=True),
    Case("copy_broadcast_cast", lambda a: _assign_column(a), rows3, (F32, I64)),
    Case("slice_grad", lambda a: a[:, 1:, ::2] * 3, rows3, grad=True, strict_backward=True),
    # rotary embeddings' rotate_half: the backward scatters both halves' gradients
    Case("rotate_half_grad", lambda a: torch.cat((-a[..., a.shape[-1] // 2:],
                                                  a[..., :a.shape[-1] // 2]), -1) * a,
         rows3, grad=True, strict_backward=True, sizes=[(3, 6), (1, 8), (4, 2), (6, 34)]),
    Case("select_grad", lambda a: a[:, 0] * a[:, -1], rows3, grad=True, strict_backward=True),
    Case("cat", lambda a: torch.cat([a, a * 2], dim=-1) + 0, rows3, grad=True),
    Case("stack", lambda a: torch.stack([a, -a], dim=1) * 1, rows3, grad=True),
    Case("split", lambda a: a.split([1, 1], dim=0)[1] * 2, rows3, grad=True),
    Case("chunk_unbind", lambda a: a.unbind(0)[0] + a.chunk(2, 0)[1][0], rows3, grad=True),
    Case("squeeze", lambda a: a.unsqueeze(1).squeeze(1) * a.unsqueeze(-1).flatten(-2), rows3,
         grad=True),
    Case("flip", lambda a: a.flip(-1) - a, rows3, grad=True),
    Case("pad", lambda a: F.pad(a, (1, 2, 0, 1), value=0.5) * 2, rows3, grad=True),
    # amounts computed from the sizes at run time (Swin's window padding) and crops
    Case("pad_to_multiple", lambda a: F.pad(a, (0, (4 - a.shape[-1] % 4) % 4,
                                                a.shape[-2] // 2, 1), value=-1.0) * 2,
         rows3, grad=True, strict_backward=True),
    # as_strided on a contiguous tensor: a window (slice + reshape), size-1 dims with any
    # stride (Swin's pooler), shifted rows and overlapping windows (gathers); writes over
    # such windows (a window's gradient: test_as_strided_gradient_compiles_whole)
    Case("as_strided_window", lambda a: torch.as_strided(
        a, (a.shape[1], a.shape[2]), (a.shape[2], 1), a.shape[1] * a.shape[2]) * 2,
         rows3, grad=True),
    Case("as_strided_unit_dims", lambda a: a.sum(-1, keepdim=True).unsqueeze(-1).as_strided(
        (2, a.shape[1], 1, 1), (a.shape[1], 1, 5, 7)) * 2, rows3, grad=True),
    Case("as_strided_scatter_window", lambda a: torch.as_strided_scatter(
        a, a[0] * 2 - 1, (a.shape[1], a.shape[2]), (a.shape[2], 1),
        a.shape[1] * a.shape[2]) + 0, rows3, (F32, F64, I64), grad=True,
         strict_backward=True),
    Case("as_strided_scatter_unit_dims", lambda a: torch.as_strided_scatter(
        a, a[:, :, :1].unsqueeze(-1) * 3, (2, a.shape[1], 1, 1), (a.shape[1], 1, 5, 7),
        0) * 1, rows3, (F32, torch.bool), grad=True),
    Case("as_strided_shifted", lambda a: torch.as_strided(
        a, (2, a.shape[1], a.shape[2] - 1), (a.shape[1] * a.shape[2], a.shape[2], 1), 1) * 2,
         rows3, grad=True),
    Case("as_strided_overlapping", lambda a: torch.as_strided(
        a, (2, a.shape[2] - 1, 2), (a.shape[1] * a.shape[2], 1, 1)) * 2, rows3, grad=True),
    Case("pad_negative_crops", lambda a: F.pad(a, (-1, 2, 1, -1)) * 2, rows3, grad=True,
         strict_backward=True),
    Case("arange_full", lambda a: a + torch.arange(a.shape[-1], dtype=a.dtype)
         + torch.full((a.shape[-1],), 2.0, dtype=a.dtype), x1, grad=True),
    Case("zeros_ones_like", lambda a: torch.ones_like(a) * 2 + torch.zeros_like(a) + a, x1),
    Case("tril_mask", lambda a: a.masked_fill(~torch.ones(a.shape[-1], a.shape[-1],
                                                           dtype=torch.bool).tril(), 0.0),
         lambda r, c, dt, g: (torch.rand(r, c, c, generator=g, dtype=F64).to(dt),)),
]


def _idx(r, c, g):
    return torch.randint(0, max(r, 1), (c,), generator=g)


INDEX_CASES = [
    Case("index_select", lambda a, i: a.index_select(0, i) * 2,
         lambda r, c, dt, g: (rand(r, c, dt, g), _idx(r, c, g)), (F32, I64), grad=True,
         sizes=[(3, 5), (1, 7), (4, 1), (6, 33)]),
    Case("embedding", lambda w, i: F.embedding(i, w) * 2,
         lambda r, c, dt, g: (rand(r, 4, dt, g), _idx(r, c, g).view(-1, 1)), (F32, F64),
         grad=True, sizes=[(3, 5), (1, 7), (4, 1), (6, 33)]),
    Case("index_tensor", lambda a, i: a[:, i] + 1,
         lambda r, c, dt, g: (rand(c, r, dt, g), _idx(r, c, g)), (F32,), grad=True,
         sizes=[(3, 5), (1, 7), (4, 1), (6, 33)]),
    Case("negative_index", lambda a, i: a[i - a.shape[0]] + 0,
         lambda r, c, dt, g: (rand(r, c, dt, g), _idx(r, c, g)), (F32,),
         sizes=[(3, 5), (1, 7), (6, 33)]),
    Case("gather", lambda a, i: torch.gather(a, 1, i) * 2,
         lambda r, c, dt, g: (rand(r, c, dt, g),
                              torch.randint(0, c, (r, 2), generator=g)), (F32, I64),
         grad=True, sizes=[(3, 5), (1, 7), (4, 1), (6, 33)]),
    Case("scatter_add", lambda a, i, s: a.scatter_add(1, i, s) + 0,
         lambda r, c, dt, g: (rand(r, c, dt, g), torch.randint(0, c, (r, 3), generator=g),
                              rand(r, 3, dt, g)), (F32, I64), grad=True,
         sizes=[(3, 5), (1, 7), (4, 1), (6, 33)]),
    Case("one_hot_scatter", lambda a, i: torch.zeros_like(a).scatter(1, i.unsqueeze(1), 1.0) + a,
         lambda r, c, dt, g: (rand(r, c, dt, g), torch.randint(0, c, (r,), generator=g)),
         (F32,), sizes=[(3, 5), (1, 7), (4, 1), (6, 33)]),
    # an index shorter than self (torch leaves the rows past its end): value and src forms
    Case("scatter_short_index", lambda a, i: a.scatter(1, i[: i.shape[0] // 2 + 1, None], -a * 2)
         + torch.zeros_like(a).scatter(1, i[: i.shape[0] // 2 + 1, None], 1.0),
         lambda r, c, dt, g: (rand(r, c, dt, g), torch.randint(0, c, (r,), generator=g)),
         (F32, F64), sizes=[(3, 5), (1, 7), (4, 1), (6, 33)]),
    Case("cross_entropy", lambda a, t: F.cross_entropy(a, t),
         lambda r, c, dt, g: (rand(r, c, dt, g), torch.randint(0, c, (r,), generator=g)),
         grad=True, sizes=[(3, 5), (1, 7), (4, 1), (6, 33)]),
    Case("nll_loss_sum", lambda a, t: F.nll_loss(F.log_softmax(a, -1), t, reduction="sum"),
         lambda r, c, dt, g: (rand(r, c, dt, g), torch.randint(0, c, (r,), generator=g)),
         grad=True, sizes=[(3, 5), (1, 7), (4, 1), (6, 33)]),
]

LINALG_CASES = [
    Case("mm", lambda a, b: a @ b.t() + 1, x2, grad=True),
    Case("linear", lambda a, w: F.linear(a, w, w[0]),
         lambda r, c, dt, g: (rand(r, c, dt, g), rand(c, c, dt, g)), grad=True),
    # strict: tracing their backward with a size-1 dim once failed in torch's fake-tensor
    # cache and the whole graph ran eagerly (disc_torch.trace_scope.tracing_config)
    Case("bmm", lambda a: torch.bmm(a, a.transpose(1, 2)) * 0.5, rows3, grad=True,
         strict_backward=True),
    Case("matmul4d", lambda a: (a.unsqueeze(0) @ a.transpose(1, 2).unsqueeze(0)).sum(0), rows3,
         grad=True, strict_backward=True),
    Case("mse", lambda a, b: F.mse_loss(a, b), x2, grad=True),
]


def _conv_inputs(r, c, dt, g):
    return (torch.rand(2, 3, r + 4, c + 4, generator=g, dtype=F64).to(dt),)


def _conv(dtype, **kw):
    """A conv module: parameters have static shapes under dynamo, as in real models."""
    torch.manual_seed(0)
    return torch.nn.Conv2d(3, 6, 3, **kw).to(dtype)


def conv_case(**kw):
    # forward only here; test_convolution_backward_parity checks the gradients
    mods = {dt: _conv(dt, **kw).requires_grad_(False) for dt in (F32, F64)}

    def fn(x):
        return mods[x.dtype](x) * 1
    return fn


NN_CASES = [
    Case("conv2d", conv_case(padding=1), _conv_inputs,
         sizes=[(3, 5), (1, 7), (6, 9)]),
    Case("conv2d_strided", conv_case(stride=2), _conv_inputs,
         sizes=[(3, 5), (1, 7), (6, 9)]),
    Case("conv2d_grouped", conv_case(groups=3, dilation=2, bias=False),
         _conv_inputs, sizes=[(3, 5), (1, 7), (6, 9)]),
    Case("batch_norm_eval", lambda x: F.batch_norm(x, torch.zeros(x.shape[1], dtype=x.dtype),
                                                   torch.ones(x.shape[1], dtype=x.dtype),
                                                   training=False) * 1,
         lambda r, c, dt, g: _conv_inputs(r, c, dt, g), sizes=[(3, 5), (1, 7), (6, 9)]),
    Case("batch_norm_train", lambda x: F.batch_norm(x, None, None, training=True) * 1,
         lambda r, c, dt, g: _conv_inputs(r, c, dt, g), grad=True,
         sizes=[(3, 5), (1, 7), (6, 9)]),
    Case("avg_pool", lambda x: F.avg_pool2d(x, 2) * 1,
         lambda r, c, dt, g: _conv_inputs(r, c, dt, g), sizes=[(3, 5), (1, 7), (6, 9)]),
    Case("avg_pool_grad", lambda x: F.avg_pool2d(x, 2) * 1,
         lambda r, c, dt, g: _conv_inputs(r, c, dt, g), grad=True, strict_backward=True,
         sizes=[(3, 5), (1, 7), (6, 9), (0, 0)]),
    Case("avg_pool_tiles", lambda x: F.avg_pool2d(x, (3, 2)) * 1,
         lambda r, c, dt, g: _conv_inputs(r, c, dt, g), grad=True, strict_backward=True,
         sizes=[(3, 5), (1, 7), (6, 9), (0, 0)]),
    Case("avg_pool3d_tiles", lambda x: F.avg_pool3d(x, 2, divisor_override=3) * 1,
         lambda r, c, dt, g: (torch.rand(2, 2, r + 2, c + 2, 5, generator=g,
                                         dtype=F64).to(dt),),
         grad=True, strict_backward=True, sizes=[(3, 5), (1, 7), (6, 2)]),
    Case("avg_pool_exclude_pad", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1,
                                                        count_include_pad=False) * 1,
         lambda r, c, dt, g: _conv_inputs(r, c, dt, g), grad=True, strict_backward=True,
         sizes=[(3, 5), (1, 7), (6, 9), (0, 2)]),
    Case("avg_pool_divisor", lambda x: F.avg_pool2d(x, (3, 2), stride=(1, 3), padding=(1, 0),
                                                    divisor_override=5) * 1,
         lambda r, c, dt, g: _conv_inputs(r, c, dt, g), grad=True, strict_backward=True,
         sizes=[(3, 5), (1, 7), (6, 9)]),
    Case("avg_pool3d", lambda x: F.avg_pool3d(x, 2, stride=(1, 2, 2), padding=1) * 1,
         lambda r, c, dt, g: (torch.rand(2, 2, r + 1, c + 2, 3, generator=g,
                                         dtype=F64).to(dt),),
         grad=True, strict_backward=True, sizes=[(3, 5), (1, 7), (6, 2)]),
    # windows that tile the input (floor mode leaves rows and columns no window covers)
    Case("max_pool_tiles", lambda x: F.max_pool2d(x, 2) * 1,
         lambda r, c, dt, g: _conv_inputs(r, c, dt, g), grad=True, strict_backward=True,
         sizes=[(3, 5), (1, 7), (6, 9), (0, 0)]),
    Case("max_pool_tiles_rect", lambda x: F.max_pool2d(x, (3, 2)) * 1,
         lambda r, c, dt, g: _conv_inputs(r, c, dt, g), grad=True, strict_backward=True,
         sizes=[(3, 5), (1, 7), (6, 9), (0, 2)]),
    Case("max_pool", lambda x: F.max_pool2d(x, 3, stride=2, padding=1) * 1,
         lambda r, c, dt, g: _conv_inputs(r, c, dt, g), grad=True,
         sizes=[(3, 5), (1, 7), (6, 9)]),
]

CASES = FLOAT_CASES + REDUCTION_CASES + LAYOUT_CASES + INDEX_CASES + LINALG_CASES + NN_CASES
for _c in LAYOUT_CASES:
    if _c.make is rows3:
        _c.sizes = [s for s in _c.sizes if s[0] and s[1]]

PARAMS = [pytest.param(c, dt, id=f"{c.name}-{str(dt).split('.')[-1]}")
          for c in CASES for dt in c.dtypes]


@pytest.mark.parametrize("case,dtype", PARAMS)
def test_forward_parity(case: Case, dtype: torch.dtype):
    g = torch.Generator().manual_seed(0)
    compiled = disc_torch.optimize(case.fn, min_cluster_size=1)
    for rows, cols in case.sizes:
        inputs = case.make(rows, cols, dtype, g)
        assert_same(compiled(*inputs), case.fn(*inputs))
    ops = [n for gr in disc_torch.report().graphs for n in gr.nodes]
    assert ops, "nothing was captured"
    assert not fallbacks(), f"{case.name}: ops fell back: {fallbacks()}"
    assert disc_torch.compile_count() == built_artifacts(), \
        "one DISC compile per cluster, not per shape"


GRAD_PARAMS = [pytest.param(c, id=c.name) for c in CASES if c.grad]


@pytest.mark.parametrize("case", GRAD_PARAMS)
def test_backward_parity(case: Case):
    g = torch.Generator().manual_seed(1)
    compiled = disc_torch.optimize(case.fn, **({"min_cluster_size": 1}
                                               if case.strict_backward else {}))
    for rows, cols in case.sizes:
        inputs = case.make(rows, cols, F64, g)
        leaves = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
        twins = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
        out = compiled(*leaves)
        want = case.fn(*twins)
        assert_same(out, want)
        seed = torch.rand(want.shape, generator=g, dtype=F64)
        out.backward(seed)
        want.backward(seed)
        for a, b in zip(leaves, twins):
            if b.grad is not None:
                assert_same(a.grad, b.grad)
    assert disc_torch.report().graphs, "nothing was captured"
    if case.strict_backward:
        graphs = disc_torch.report().graphs
        assert any(gr.name.startswith("backward") for gr in graphs), [gr.name for gr in graphs]
        assert not fallbacks(), f"{case.name}: ops fell back: {fallbacks()}"
        assert disc_torch.compile_count() == built_artifacts()


# -- convolution backward: grads of the input and of the module's parameters ----------------

CONV_GRAD_CASES = [  # (id, spatial dims, Conv kwargs)
    ("conv2d_same", 2, dict(kernel_size=3, padding=1)),
    ("conv2d_strided", 2, dict(kernel_size=3, stride=2, padding=1)),
    ("conv2d_dilated_grouped", 2, dict(kernel_size=3, stride=(2, 1), padding=(2, 0),
                                       dilation=2, groups=3, bias=False)),
    ("conv2d_depthwise_1x1_padded", 2, dict(kernel_size=1, stride=3, padding=1, groups=6)),
    ("conv1d", 1, dict(kernel_size=4, stride=3, padding=2)),
    ("conv3d", 3, dict(kernel_size=2, stride=(1, 2, 1), padding=(1, 0, 1), dilation=(1, 1, 2))),
]
# which of (input, weight, bias) need gradients: every output_mask torch asks for
GRAD_MASKS = [(True, True, True), (False, True, True), (True, False, False),
              (True, True, False), (False, False, True)]
CONV_SIZES = [(2, 9), (1, 8), (3, 13), (1, 1), (2, 6)]  # (batch, spatial): unseen, edge, odd


CONV_GRAD_PARAMS = [
    pytest.param(name, dims, kw, mask,
                 id=f"{name}-" + "".join("xwb"[i] if f else "_" for i, f in enumerate(mask)))
    for name, dims, kw in CONV_GRAD_CASES for mask in GRAD_MASKS
    if kw.get("bias", True) or mask[0] or mask[1]]  # something must need a gradient


@pytest.mark.parametrize("name,dims,kw,mask", CONV_GRAD_PARAMS)
def test_convolution_backward_parity(name, dims, kw, mask):
    """convolution_backward compiles (no fallback, one compile per cluster) for every
    output_mask, and its gradients match eager in float64 on shapes unseen at compile
    time, including a spatial size of 1."""
    cls = {1: torch.nn.Conv1d, 2: torch.nn.Conv2d, 3: torch.nn.Conv3d}[dims]
    torch.manual_seed(0)
    mod = cls(6, 6, **kw).to(F64)
    twin = cls(6, 6, **kw).to(F64)
    twin.load_state_dict(mod.state_dict())
    for m in (mod, twin):
        m.weight.requires_grad_(mask[1])
        if m.bias is not None:
            m.bias.requires_grad_(mask[2])
    compiled = disc_torch.optimize(mod, min_cluster_size=1)
    g = torch.Generator().manual_seed(2)
    pad = kw.get("padding", 0)
    for batch, size in CONV_SIZES:
        k = kw["kernel_size"]
        dil = kw.get("dilation", 1)
        spatial = [size + 2 * j for j in range(dims)]
        spatial = [max(s, (k - 1) * max(_tuple(dil, dims)) + 1 - 2 * min(_tuple(pad, dims)))
                   for s in spatial]  # the window must fit the padded input
        x = torch.rand(batch, 6, *spatial, generator=g, dtype=F64)
        a, b = x.clone().requires_grad_(mask[0]), x.clone().requires_grad_(mask[0])
        out, want = compiled(a), twin(b)
        assert_same(out, want)
        seed = torch.rand(want.shape, generator=g, dtype=F64)
        out.backward(seed)
        want.backward(seed)
        if mask[0]:
            assert_same(a.grad, b.grad)
        for p, q in zip(mod.parameters(), twin.parameters()):
            if q.requires_grad:
                assert_same(p.grad, q.grad)
                p.grad = q.grad = None
    assert not fallbacks(), f"{name}: ops fell back: {fallbacks()}"
    ops = {n.op for gr in disc_torch.report().graphs for n in gr.nodes}
    assert any("convolution_backward" in op for op in ops), ops
    assert disc_torch.compile_count() == built_artifacts()


def _tuple(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


def test_avg_pool_ceil_mode_falls_back_with_a_reason():
    """ceil_mode is not converted (forward nor backward): eager runs it, the report says
    why, and the results still match."""
    fn = lambda x: F.avg_pool2d(x, 2, ceil_mode=True) * 1  # noqa: E731
    compiled = disc_torch.optimize(fn, min_cluster_size=1)
    x = torch.rand(2, 3, 7, 9, dtype=F64, requires_grad=True)
    twin = x.detach().clone().requires_grad_(True)
    out, want = compiled(x), fn(twin)
    assert_same(out, want)
    out.sum().backward()
    want.sum().backward()
    assert_same(x.grad, twin.grad)
    refused = {(op, detail) for op, _, detail in fallbacks()}
    for op in ("aten.avg_pool2d.default", "aten.avg_pool2d_backward.default"):
        assert (op, f"{op}: ceil_mode=True") in refused, refused


def test_as_strided_scatter_of_a_strided_layout_falls_back_with_a_reason():
    """Only windows of contiguous elements are converted: elsewhere positions may repeat,
    and torch's write order decides. Eager runs it, the report says why, results match."""
    def fn(a):
        src = a[:, :, 1:] * 2
        return torch.as_strided_scatter(a, src, src.shape,
                                        (a.shape[1] * a.shape[2], a.shape[2], 1), 1) * 1

    compiled = disc_torch.optimize(fn, min_cluster_size=1)
    for rows, cols in ((3, 5), (2, 8)):
        x = torch.rand(2, rows, cols, dtype=F64)
        assert_same(compiled(x), fn(x))
    op = "aten.as_strided_scatter.default"
    refused = {(op, detail) for op, _, detail in fallbacks()}
    assert (op, f"{op}: as_strided_scatter of a layout other than a window of contiguous "
            "elements") in refused, refused


def test_as_strided_gradient_compiles_whole():
    """autograd writes an ``as_strided``'s gradient with ``as_strided_scatter`` over zeros
    and views it back: with no dim of size 1 the whole backward compiles (where a dim is 1
    torch's own backward formula squeezes it, and such a squeeze runs in torch)."""
    fn = lambda a: torch.as_strided(  # noqa: E731
        a, (a.shape[1], a.shape[2]), (a.shape[2], 1), a.shape[1] * a.shape[2]) * 2
    compiled = disc_torch.optimize(fn, min_cluster_size=1)
    g = torch.Generator().manual_seed(3)
    for rows, cols in ((3, 5), (2, 8), (5, 3)):
        x = torch.rand(2, rows, cols, generator=g, dtype=F64, requires_grad=True)
        twin = x.detach().clone().requires_grad_(True)
        out, want = compiled(x), fn(twin)
        assert_same(out, want)
        seed = torch.rand(want.shape, generator=g, dtype=F64)
        out.backward(seed)
        want.backward(seed)
        assert_same(x.grad, twin.grad)
    graphs = disc_torch.report().graphs
    assert [gr.name.split("_")[0] for gr in graphs] == ["forward", "backward"]
    assert not fallbacks(), fallbacks()
    assert "aten.as_strided_scatter.default" in {n.op for n in graphs[1].nodes}


def test_squeeze_of_a_dim_known_only_at_run_time_follows_each_call():
    """Traced with 0 and 1 like other sizes, a squeeze cannot know whether a symbolic dim
    is 1: such squeezes run in torch (the rank of the result follows each call, as in
    eager), while squeezing a static 1 is compiled. Found by the OpInfo sweep: the result
    kept every size-1 dim."""
    fns = {
        "all": lambda t: torch.squeeze_copy(t) * 2 + 1,
        "one_dim": lambda t: t.squeeze(1).exp() + 0,
        "dims": lambda t: t.squeeze((1, 3)) - 1,
        "static": lambda t: (t.unsqueeze(-1) * 2).squeeze(-1).sum(0),
    }
    for name, fn in fns.items():
        compiled = disc_torch.optimize(fn, min_cluster_size=1)
        for shape in ((5, 1, 5, 1), (4, 3, 2, 6), (1, 1, 1, 1), (0, 1, 2, 1), (2, 1, 3, 1)):
            x = torch.randn(shape, dtype=F64)
            got, want = compiled(x), fn(x)
            assert got.shape == want.shape, (name, shape, got.shape, want.shape)
            assert_same(got, want)
    refused = {(op, detail) for op, _, detail in fallbacks("aten.squeeze")}
    assert any("known only at run time" in d for _, d in refused), refused
    static = [n for g in disc_torch.report().graphs for n in g.nodes
              if n.op.startswith("aten.squeeze") and n.status.value == "compiled"]
    assert static, "squeezing a static size-1 dim should compile"


@pytest.mark.parametrize("dims", [2, 3])
def test_max_pool_indices_follow_torch_on_ties_and_nans(dims):
    """The first maximum of a window wins, and a NaN wins over everything (the last NaN
    of the window when there are several), as torch's CPU kernel picks them: values drawn
    from {0, 1, 2} make ties in most windows, and some windows hold one or more NaNs.
    Padding, a stride smaller than the kernel, and dilation make windows overlap."""
    pool = F.max_pool2d if dims == 2 else F.max_pool3d
    kw = dict(kernel_size=3, stride=2, padding=1) if dims == 2 else dict(
        kernel_size=2, stride=1, padding=1, dilation=2)
    fn = lambda x: pool(x, return_indices=True, **kw)  # noqa: E731
    compiled = disc_torch.optimize(fn, min_cluster_size=1)
    g = torch.Generator().manual_seed(3)
    sizes = [(2, 3, 7, 9), (1, 2, 6, 5), (2, 1, 9, 4)] if dims == 2 else [
        (1, 2, 5, 6, 4), (2, 1, 3, 4, 5)]
    for dtype in (F32, F64):
        for shape in sizes:
            x = torch.randint(0, 3, shape, generator=g).to(dtype)
            x[torch.rand(shape, generator=g) < 0.08] = float("nan")
            (got, got_idx), (want, want_idx) = compiled(x), fn(x)
            torch.testing.assert_close(got, want, equal_nan=True)
            assert torch.equal(got_idx, want_idx), (shape, dtype, got_idx, want_idx)
    assert not fallbacks("aten.max_pool"), fallbacks("aten.max_pool")


