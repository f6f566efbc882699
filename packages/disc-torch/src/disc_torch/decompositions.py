"""Which ATen ops aot_autograd decomposes before DISC sees the graph.

torch's own tables, not ours: the core-ATen table Inductor and export use, plus torch's
decompositions of the composite ops transformers and CNNs are made of (softmax, layer norm,
batch norm, GELU, embedding, losses and their backward passes). What remains are
elementwise ops, reductions, views, indexing and contractions, which the converter table
covers; an op left undecomposed and unconverted simply runs in torch.

Every decomposition must be exact for EVERY output of its op, not only the first: they
apply below autograd, where the op's derivative formula still consumes what the op
returned (a logsumexp, a saved mean). :mod:`disc_torch.decomposition_audit` checks that
against the kernels; where torch's own decomposition is not (``INEXACT``), DISC uses an
exact one of its own (``EXACT``) or none.
"""

from __future__ import annotations

import functools

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

from .attention_decomposition import flash_attention_backward, flash_attention_forward
from .dropout_decomposition import native_dropout

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


#: torch decompositions that are wrong for some output of their op (found by
#: disc_torch.decomposition_audit), with what is wrong: never used.
INEXACT = {
    # returns the attention probabilities where the op returns the logsumexp of each
    # score row, which its backward reads: gradients 100-1000% off
    aten._scaled_dot_product_flash_attention_for_cpu.default:
        "second output is the attention matrix, not the logsumexp",
}

#: DISC's own decompositions (they may decline a call with NotImplemented, which leaves
#: the op to torch): exact ones where torch's are not, and dropout with its random numbers
#: drawn from the shape alone (:mod:`disc_torch.dropout_decomposition`; random, so the
#: audit skips it like any call that draws).
EXACT = {
    aten._scaled_dot_product_flash_attention_for_cpu.default: flash_attention_forward,
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default:
        flash_attention_backward,
    aten.native_dropout.default: native_dropout,
}


@functools.lru_cache(maxsize=2)
def decomposition_table(eager_random: bool = False) -> dict:
    """The table aot_autograd traces with; ``eager_random``: dropout stays whole and runs
    in torch, drawing eager's random numbers (the ``eager_random`` option)."""
    table = dict(core_aten_decompositions())
    table.update(get_decompositions(EXTRA))
    for op in [*KEEP, *INEXACT]:
        table.pop(op, None)
    table.update(EXACT)
    if eager_random:
        table.pop(aten.native_dropout.default, None)
    return table
