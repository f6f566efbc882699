"""Dropout whose random numbers come from the shape alone.

torch's decomposition of ``native_dropout`` draws its numbers with ``rand_like(input)``: in
the graph that op reads ``input``, so it depends on whatever computed ``input``. torch
runs it (DISC does not generate torch's random stream), and the cluster before every
dropout is cut off from the one after it: transformers' training forwards (dropout after
embeddings, attention and MLP) came apart into a cluster per dropout, and attention's
probabilities could not stay with their producers. Here the numbers come from
``rand(input.shape)``, whose operands are sizes only: torch draws them before the
cluster runs, and the mask and the scaling are computed inside it, next to ``input``'s
producer and its users.

The result is the same function of the same random stream as torch's decomposition (which
Inductor uses as well); neither reproduces eager's ``bernoulli_`` draws number for number.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._decomp import decomposition_table as torch_decompositions

aten = torch.ops.aten

__all__ = ["native_dropout"]


def native_dropout(input: torch.Tensor, p: float, train: bool | None) -> Any:
    """(output, keep mask) of ``aten.native_dropout``; the cases that draw nothing (eval,
    p = 0, p = 1) and non-float inputs (torch raises) are torch's own decomposition."""
    if not (train and isinstance(p, float) and 0.0 < p < 1.0
            and input.dtype.is_floating_point):
        return torch_decompositions[aten.native_dropout.default](input, p, train)
    keep = torch.rand(input.shape, dtype=input.dtype, device=input.device) > p
    return keep * input * float(1.0 / (1.0 - p)), keep
