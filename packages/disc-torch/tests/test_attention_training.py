"""Training through scaled_dot_product_attention: every parameter's gradient matches eager.

On CPU, 4-d SDPA without dropout runs torch's flash kernel, whose backward reads the
forward's logsumexp. A decomposition that got that second output wrong once gave
gradients 100-1000% off with matching losses (the first loss is computed before any
gradient), so these tests compare gradients of every parameter, on shapes unseen at
compile time, with padding and causal masks, next to ops forced to stay in torch.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from helpers import fallbacks

import disc_torch

aten = torch.ops.aten


def errors_against_float64(exact: nn.Module, model: nn.Module, tol: float) -> dict[str, float]:
    """Per parameter, ``model``'s gradient error against ``exact``'s (the same model and
    input in float64) over the error allowed, so 1 is the limit:
    ‖g − g₆₄‖ / (tol·‖g₆₄‖ + 16·ε·scale), with scale the largest gradient's norm and ε the
    dtype's. A gradient that is zero in exact arithmetic (a key bias: softmax ignores a
    constant added to every score of a row; every query weight at length 1) comes out of
    sums of terms as large as the others', so it is rounding noise of order ε·scale, for
    eager as for DISC: 16·ε·scale allows that noise, far below any wrong gradient.
    (training_parity.gradient_errors compares DISC with eager directly, with a floor tied
    to the global norm; here float64 is the referee, so eager is judged too.)"""
    grads = {n: p.grad.double() for n, p in exact.named_parameters()}
    scale = max(g.norm().item() for g in grads.values())
    eps = torch.finfo(next(model.parameters()).dtype).eps
    out = {}
    for name, p in model.named_parameters():
        want, got = grads[name], p.grad
        assert got is not None, f"{name} got no gradient"
        allowed = tol * want.norm().item() + 16 * eps * scale
        out[name] = (got.double() - want).norm().item() / allowed
    return out


class Attention(nn.Module):
    def __init__(self, d: int = 32, heads: int = 4, causal: bool = False):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.o = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, s, d = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.heads, d // self.heads).transpose(1, 2)

        o = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)),
                                           split(self.v(x)), attn_mask=mask,
                                           is_causal=self.causal)
        return self.o(o.transpose(1, 2).reshape(b, s, d))


def compiled_steps() -> set[str]:
    """The core ops of every step the compiled clusters ran (their profiles)."""
    return {op for g in disc_torch.report().graphs for c in g.clusters
            for step in (c.profile or []) for op in step.ops}


def _mask(kind: str, b: int, s: int, dtype: torch.dtype) -> torch.Tensor | None:
    if kind == "none":
        return None
    keep = torch.ones(b, 1, s, s, dtype=torch.bool)
    keep[0, ..., s // 2:] = False  # padding: the first sequence's second half
    if kind == "bool":
        return keep
    return torch.zeros(b, 1, s, s, dtype=dtype).masked_fill(~keep, -1e9)


def _compare(model_kind: dict, mask_kind: str, dtype: torch.dtype, lengths: list[int],
             **options) -> None:
    torch.manual_seed(0)
    eager = Attention(**model_kind).to(dtype)
    disc = Attention(**model_kind).to(dtype)
    disc.load_state_dict(eager.state_dict())
    exact = Attention(**model_kind).double()
    exact.load_state_dict(eager.state_dict())
    compiled = torch.compile(disc, backend="disc", dynamic=True, options=options)
    tol = 1e-4 if dtype == torch.float32 else 1e-9
    for s in lengths:
        x = torch.randn(2, s, 32, dtype=dtype)
        mask = _mask(mask_kind, 2, s, dtype)
        for m in (eager, disc, exact):
            m.zero_grad()
        want = eager(x, mask)
        got = compiled(x, mask)
        ref = exact(x.double(), None if mask is None else
                    mask if mask.dtype == torch.bool else mask.double())
        for out in (want, got, ref):
            (out * out).sum().backward()
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)
        # judged against float64, as eager is: eager's own float32 error passes the bound
        errors, eager_errors = (errors_against_float64(exact, m, tol) for m in (disc, eager))
        assert max(eager_errors.values()) <= 1, (s, eager_errors)
        assert max(errors.values()) <= 1, (s, errors)


@pytest.mark.parametrize("mask_kind", ["float", "bool", "none"])
def test_attention_gradients_match_eager_on_unseen_lengths(mask_kind):
    _compare({}, mask_kind, torch.float32, [5, 17, 1, 33], profile=True)
    # the whole attention, forward and backward, runs in DISC clusters, as the fused ops
    assert not fallbacks("aten._scaled_dot_product"), fallbacks()
    assert {"attention", "attention_grad"} <= compiled_steps(), compiled_steps()


def test_attention_gradients_match_eager_through_the_decomposition(monkeypatch):
    """With the fused ops off, DISC's exact decomposition compiles attention instead."""
    monkeypatch.setenv("DISC_FUSED_ATTENTION", "0")
    _compare({}, "float", torch.float32, [6, 19], profile=True)
    assert not fallbacks("aten._scaled_dot_product"), fallbacks()
    assert not {"attention", "attention_grad"} & compiled_steps()


def test_causal_attention_gradients_match_eager():
    _compare({"causal": True}, "none", torch.float32, [6, 11, 2, 150], profile=True)
    assert {"attention", "attention_grad"} <= compiled_steps(), compiled_steps()


def _steps(*ops: str) -> list[list[Any]]:
    """Per profiled cluster (forward, backward): its steps that run any of ``ops``."""
    return [[step for step in c.profile if set(ops) & set(step.ops)]
            for g in disc_torch.report().graphs for c in g.clusters if c.profile]


def _rank(shape: str | None) -> int:
    """The rank of a step's (first) shape, as the profile writes it: ``"[s0, 4, s1, 8]"``."""
    return 0 if not shape else shape.split(" x ")[0].count(",") + 1


def test_head_permutes_cost_no_pass_over_memory(monkeypatch):
    """Q, K, V cross to the backward as their [B, S, H, D] views and the output as the
    [B, S, H, D] permute the output projection reads (saved_views), and the fused ops
    read and write heads through strides (seq_major): neither graph runs a transpose
    over head tensors, and every gradient still matches eager."""
    import disc_torch.backend as backend

    moved = []
    original = backend.save_permute_bases
    monkeypatch.setattr(backend, "save_permute_bases",
                        lambda fw, bw: moved.append(original(fw, bw)) or moved[-1])
    _compare({"causal": True}, "none", torch.float32, [6, 11, 2, 150], profile=True)
    assert moved and moved[0] == 4, moved  # Q, K, V and the output
    fused = _steps("attention", "attention_grad")
    assert [len(f) for f in fused] == [1, 1], fused  # forward, backward
    for f in fused:  # Q, K, V read sequence-major: [B, S, 4 heads, 8]
        assert re.fullmatch(r"\[\w+, \w+, 4, 8\] x \[\w+, \w+, 4, 8\]", f[0].shape), f[0]
    moves = [[t for t in steps if t.kind == "kernel" and _rank(t.shape) == 4]
             for steps in _steps("transpose")]
    assert moves == [[], []], moves  # forward, backward


def test_attention_gradients_in_float64_are_exact():
    _compare({}, "float", torch.float64, [4, 9])


@pytest.mark.parametrize("excluded", [["aten.exp"], ["aten.bmm"], ["aten.amax", "aten.mm"]])
def test_attention_gradients_with_ops_in_the_middle_left_to_torch(excluded, monkeypatch):
    """Clusters on both sides of ops forced to run in torch, forward and backward: what
    crosses the boundary (saved tensors, layouts, the order of outputs) must not change
    a gradient. (The decomposition's ops: with the fused ops there is no middle.)"""
    monkeypatch.setenv("DISC_FUSED_ATTENTION", "0")
    _compare({}, "float", torch.float32, [5, 12, 3], excluded_ops=excluded,
             min_cluster_size=1)
    assert {op for op, _, _ in fallbacks()} >= {f"{e}.default" for e in excluded}


def test_fused_attention_left_to_torch_trains_in_step():
    """The fused op's ATen node excluded: torch's flash kernel runs it, forward and
    backward, between clusters."""
    _compare({}, "float", torch.float32, [5, 9],
             excluded_ops=["aten._scaled_dot_product_flash_attention_for_cpu"],
             min_cluster_size=1)
    assert fallbacks("aten._scaled_dot_product_flash_attention_for_cpu.default")


def test_attention_with_dropout_runs_in_torch_and_trains_in_step():
    """With ``eager_random``, dropout is not decomposed: attention's dropout draws eager's
    random numbers in torch, so outputs and gradients agree with eager exactly."""
    torch.manual_seed(0)

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)

    compiled = torch.compile(fn, backend="disc", dynamic=True,
                             options={"eager_random": True})
    for s in (5, 8):
        inputs = [torch.randn(2, 2, s, 8, requires_grad=True) for _ in range(3)]
        torch.manual_seed(1)
        want = fn(*inputs)
        want_grads = torch.autograd.grad(want.sum(), inputs)
        torch.manual_seed(1)
        got = compiled(*inputs)
        got_grads = torch.autograd.grad(got.sum(), inputs)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(got_grads, want_grads)


class CausalBlock(nn.Module):
    """GPT-style causal self-attention written out in plain ops (examples/
    torch_transformer_train.py's spelling, or variants of it)."""

    def __init__(self, d: int = 32, heads: int = 4, spelling: str = "masked_fill"):
        super().__init__()
        self.heads, self.spelling = heads, spelling
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2)
                   for z in self.qkv(x).split(d, dim=-1))
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        if self.spelling == "masked_fill":
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
            att = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1) @ v
        elif self.spelling == "where":
            scores = torch.matmul(q, k.transpose(2, 3)) / 3.0
            att = F.softmax(torch.where(causal, scores, float("-inf")), dim=-1) @ v
        else:  # a finite fill: not provably the same as SDPA, left unfused
            scores = (q @ k.transpose(-2, -1)) * 0.3
            att = scores.masked_fill(~causal, -1e9).softmax(dim=-1) @ v
        return self.proj(att.transpose(1, 2).reshape(b, t, d))


def _train_block(spelling: str, lengths: list[int]) -> None:
    torch.manual_seed(0)
    eager, disc = CausalBlock(spelling=spelling), CausalBlock(spelling=spelling)
    disc.load_state_dict(eager.state_dict())
    exact = CausalBlock(spelling=spelling).double()
    exact.load_state_dict(eager.state_dict())
    compiled = torch.compile(disc, backend="disc", dynamic=True, options={"profile": True})
    counts = []
    for s in lengths:
        x = torch.randn(2, s, 32)
        for m in (eager, disc, exact):
            m.zero_grad()
        want, got, ref = eager(x), compiled(x), exact(x.double())
        for out in (want, got, ref):
            (out * out).sum().backward()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        errors, eager_errors = (errors_against_float64(exact, m, 1e-4) for m in (disc, eager))
        assert max(eager_errors.values()) <= 1, (s, eager_errors)
        assert max(errors.values()) <= 1, (s, errors)
        counts.append(disc_torch.compile_count())
    return counts


@pytest.mark.parametrize("spelling", ["masked_fill", "where"])
def test_hand_written_causal_attention_trains_through_the_fused_ops(spelling):
    """Rewritten to SDPA before autograd: forward and backward run the fused kernels, and
    every parameter's gradient matches eager on lengths never seen before (one across a
    64-row block, one across a 128-key block)."""
    counts = _train_block(spelling, [5, 17, 70, 130, 1])
    assert {"attention", "attention_grad"} <= compiled_steps(), compiled_steps()
    # one compilation per graph serves every length (1 may specialize in dynamo)
    assert counts[0] == counts[3], counts
    assert not fallbacks(), fallbacks()


def _rewrites(spelling: str) -> int:
    """How many attentions rewrite_causal_attention finds in the block's dynamo graph."""
    from disc_torch.attention_rewrite import rewrite_causal_attention

    found = []

    def capture(gm, example_inputs):
        found.append(rewrite_causal_attention(gm))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(CausalBlock(spelling=spelling), backend=capture, dynamic=True)(
        torch.randn(2, 7, 32))
    return sum(found)


@pytest.mark.parametrize("spelling, fused", [("masked_fill", 1), ("where", 1),
                                             ("finite", 0)])
def test_causal_attention_rewrite_matches_only_what_is_provably_sdpa(spelling, fused):
    assert _rewrites(spelling) == fused


def test_causal_attention_rewrite_turned_off(monkeypatch):
    monkeypatch.setenv("DISC_FUSED_ATTENTION", "0")
    assert _rewrites("masked_fill") == 0


def test_hand_written_attention_with_a_finite_fill_trains_unfused():
    """masked_fill(-1e9) replaces scores where SDPA would add to them: not rewritten,
    and still trains like eager."""
    _train_block("finite", [6, 19])
    assert not fallbacks(), fallbacks()
