"""Which ATen ops aot_autograd decomposes before DISC sees the graph.

torch's own tables, not ours: the core-ATen table Inductor and export use, plus torch's
decompositions of the composite ops transformers and CNNs are made of (softmax, layer norm,
batch norm, GELU, embedding, losses and their backward passes). What remains are
elementwise ops, reductions, views, indexing and contractions, which the converter table
covers; an op left undecomposed and unconverted simply runs in torch.
"""

from __future__ import annotations

import functools

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

__all__ = ["decomposition_table"]

aten = torch.ops.aten

#: Composite ops whose torch decompositions turn them into ops the converters cover.
EXTRA = [
    aten._softmax, aten._log_softmax, aten._softmax_backward_data,
    aten._log_softmax_backward_data, aten.native_layer_norm, aten.native_layer_norm_backward,
    aten._fused_rms_norm, aten._fused_rms_norm_backward,
    aten.gelu_backward, aten.embedding, aten.embedding_dense_backward,
    aten.nll_loss_forward, aten.nll_loss_backward, aten.addmm, aten.native_batch_norm,
    aten._native_batch_norm_legit_functional, aten._native_batch_norm_legit,
    aten._native_batch_norm_legit_no_training, aten.native_batch_norm_backward,
    aten.silu, aten.silu_backward, aten.hardswish, aten.hardswish_backward, aten.softplus,
    aten.softplus_backward, aten.leaky_relu_backward, aten.sigmoid_backward,
    aten.tanh_backward, aten.threshold_backward, aten.elu, aten.elu_backward,
    aten.hardtanh_backward, aten.mse_loss, aten.mse_loss_backward,
    aten.max_pool2d_with_indices_backward, aten.t,
    aten.index_select, aten.repeat,
    aten.stack, aten.logsumexp, aten.clamp_min, aten.clamp_max, aten.select_backward,
    aten.slice_backward, aten.masked_fill, aten.baddbmm, aten.new_zeros, aten.zeros_like,
    aten.ones_like, aten.full_like,
]

#: Ops we keep whole although torch can decompose them: the converter handles them
#: directly and better (gelu stays one node so its erf/tanh form is exact).
KEEP = {aten.gelu.default, aten.index_select.default, aten.unbind.int, aten.split.Tensor,
        aten.flip.default,
        aten.split_with_sizes.default}


@functools.lru_cache(maxsize=1)
def decomposition_table() -> dict:
    table = dict(core_aten_decompositions())
    table.update(get_decompositions(EXTRA))
    for op in KEEP:
        table.pop(op, None)
    return table
