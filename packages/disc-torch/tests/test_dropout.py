"""Dropout in training: the random numbers come from the shape, the rest compiles.

``disc_torch.dropout_decomposition`` draws dropout's numbers with ``rand(shape)``, which torch
runs before the cluster; the mask and the scaling compile next to their producers and
users, so a model's forward is not cut into a cluster per dropout. The same draws in eager
(``rand(shape) > p``, in program order) give the same outputs and gradients, which is how
these tests compare exactly against eager although the mask is random.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
from helpers import built_artifacts, fallbacks
from training_parity import gradient_errors

import disc_torch


class ShapeDrawnDropout(nn.Module):
    """Eager dropout that draws its numbers as DISC's decomposition does."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = torch.rand(x.shape, dtype=x.dtype) > self.p
        return keep * x * (1.0 / (1.0 - self.p))


class Block(nn.Module):
    """Linear, GELU, dropout, linear, dropout, residual, layer norm: a transformer MLP
    with dropouts as transformers places them."""

    def __init__(self, width: int = 24, p: float = 0.25):
        super().__init__()
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)
        self.drop_hidden = nn.Dropout(p)
        self.drop_out = nn.Dropout(p)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop_hidden(torch.nn.functional.gelu(self.up(x)))
        return self.norm(x + self.drop_out(self.down(h)))


def _eager_twin(model: nn.Module) -> nn.Module:
    twin = copy.deepcopy(model)
    for mod in list(twin.modules()):
        for child_name, child in list(mod.named_children()):
            if isinstance(child, nn.Dropout):
                setattr(mod, child_name, ShapeDrawnDropout(child.p))
    return twin


SHAPES = [(4, 7), (1, 5), (3, 1), (6, 33), (2, 64)]  # (batch, tokens): edge, odd, unseen


def test_training_with_dropout_matches_the_same_draws_in_eager_and_stays_one_cluster():
    torch.manual_seed(0)
    model = Block().train()
    twin = _eager_twin(model)
    compiled = disc_torch.optimize(model)
    for step, (b, t) in enumerate(SHAPES):
        x = torch.randn(b, t, 24)
        seed = 100 + step
        torch.manual_seed(seed)
        out = compiled(x)
        torch.manual_seed(seed)
        want = twin(x)
        torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
        weights = torch.randn(want.shape)
        (out * weights).sum().backward()
        (want * weights).sum().backward()
        gradient_errors(twin, model)  # every parameter, relative norm
        for p in [*model.parameters(), *twin.parameters()]:
            p.grad = None
    graphs = disc_torch.report().graphs
    forward = [g for g in graphs if g.name.startswith("forward")]
    assert forward and all(len(g.clusters) == 1 for g in forward), \
        [(g.name, len(g.clusters)) for g in graphs]
    eager_ops = {n.op for g in forward for n in g.nodes if n.status.value != "compiled"}
    assert eager_ops == {"aten.rand.default"}, eager_ops
    assert disc_torch.compile_count() == built_artifacts(), \
        "one DISC compile per cluster, not per shape"


def test_dropout_masks_are_random_and_scale_what_they_keep():
    """The compiled mask keeps about 1 - p of the elements, multiplies them by 1 / (1 - p)
    exactly, zeroes the rest, and its backward passes the gradient through the same mask."""
    p = 0.3
    fn = disc_torch.optimize(lambda x: torch.nn.functional.dropout(x * 1.0, p, True))
    x = (torch.rand(64, 257) + 0.5).requires_grad_(True)
    y = fn(x)
    kept = y != 0
    fraction = kept.double().mean().item()
    assert abs(fraction - (1 - p)) < 0.02, fraction  # 16448 draws: 7 sigma is 0.025
    torch.testing.assert_close(y[kept], x.detach()[kept] * (1 / (1 - p)), rtol=1e-6, atol=0)
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(x.grad, kept.to(x.dtype) * (1 / (1 - p)), rtol=1e-6, atol=0)
    assert not torch.equal(fn(x.detach()) != 0, kept), "two calls drew the same mask"


@pytest.mark.parametrize("p,train", [(0.0, True), (0.4, False), (1.0, True)])
def test_dropout_that_draws_nothing_compiles_whole(p, train):
    fn = disc_torch.optimize(lambda x: torch.nn.functional.dropout(x * 2.0, p, train) + 1)
    for shape in ((3, 5), (1, 7), (6, 33)):
        x = torch.randn(shape)
        want = torch.ones(shape) if p == 1.0 else x * 2.0 + 1
        torch.testing.assert_close(fn(x), want)
    assert not fallbacks("aten.rand"), fallbacks()


def test_eager_random_keeps_eagers_random_stream():
    """``eager_random``: dropout runs in torch and draws eager's numbers, so a compiled
    training step matches eager's nn.Dropout exactly (and the graph is cut there)."""
    torch.manual_seed(0)
    model = Block().train()
    twin = copy.deepcopy(model)  # real nn.Dropout
    compiled = disc_torch.optimize(model, eager_random=True)
    for step, (b, t) in enumerate(SHAPES[:3]):
        x = torch.randn(b, t, 24)
        torch.manual_seed(7 + step)
        out = compiled(x)
        torch.manual_seed(7 + step)
        want = twin(x)
        torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
        weights = torch.randn(want.shape)  # sum() alone: LayerNorm's gradient is ~0
        (out * weights).sum().backward()
        (want * weights).sum().backward()
        gradient_errors(twin, model)
        for p in [*model.parameters(), *twin.parameters()]:
            p.grad = None
    forward = [g for g in disc_torch.report().graphs if g.name.startswith("forward")]
    eager_ops = {n.op for g in forward for n in g.nodes if n.status.value != "compiled"}
    assert "aten.native_dropout.default" in eager_ops and "aten.rand.default" not in eager_ops
