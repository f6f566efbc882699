"""saved_views: saved tensors cross the forward/backward boundary in another order (a
saved permute as its base, a saved tensor the forward permutes as that permute) and the
backward permutes them back: gradients must not change, on shapes unseen at compile
time, with DISC clusters or torch on either side of the boundary."""

from __future__ import annotations

import pytest
import torch

import disc_torch  # noqa: F401  (registers the "disc" backend)


def permute_saved(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """sin's backward reads its input, a permute: saved as the base."""
    t = (x @ w).transpose(0, 1)
    return (torch.sin(t) * 2.0).sum()


def saved_and_permuted(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """h is saved (h * h reads it) and permuted for the forward's own use (the matmul):
    it crosses as the permute."""
    h = torch.tanh(x @ w)
    p = h.permute(1, 0)
    return (h * h).sum() + (p @ x).sum()


def saved_and_permuted_through_a_view(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """As above, the forward's permute taken of a view of h to its own sizes (how
    transformers' attention output reaches its ``transpose(1, 2)``)."""
    h = torch.tanh(x @ w)
    p = h.reshape(x.shape[0], -1).permute(1, 0)
    return (h * h).sum() + (p @ x).sum()


# rewrites: every saved tensor that crosses in another order (the matmuls' saved
# transposes of x and w count too); the view changes nothing
@pytest.mark.parametrize("fn, rewrites", [(permute_saved, 3), (saved_and_permuted, 2),
                                          (saved_and_permuted_through_a_view, 2)])
@pytest.mark.parametrize("options", [{}, {"excluded_ops": ["aten.sin", "aten.tanh"],
                                          "min_cluster_size": 1}])
def test_gradients_match_eager(fn, rewrites, options, monkeypatch):
    import disc_torch.backend as backend

    moved = []
    original = backend.save_permute_bases
    monkeypatch.setattr(backend, "save_permute_bases",
                        lambda fw, bw: moved.append(original(fw, bw)) or moved[-1])
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="disc", dynamic=True, options=options)
    for n, m in [(5, 3), (17, 8), (2, 1), (33, 12)]:
        x = torch.randn(n, m, dtype=torch.float64, requires_grad=True)
        w = torch.randn(m, n, dtype=torch.float64, requires_grad=True)
        want = torch.autograd.grad(fn(x, w), (x, w))
        got = torch.autograd.grad(compiled(x, w), (x, w))
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert moved and moved[0] == rewrites, moved


def test_a_returned_tensor_is_never_replaced():
    """h is returned to the user, saved (tanh's backward reads it) and permuted by the
    forward: only its saved copy may cross as the permute, the user gets h itself."""

    def fn(x, w):
        h = torch.tanh(x @ w)
        return h, (h.permute(1, 0) @ x).sum()

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="disc", dynamic=True)
    for n, m in [(5, 3), (17, 8), (33, 12)]:
        x = torch.randn(n, m, dtype=torch.float64, requires_grad=True)
        w = torch.randn(m, n, dtype=torch.float64, requires_grad=True)
        g = torch.randn(n, n, dtype=torch.float64)
        want_h, want_s = fn(x, w)
        got_h, got_s = compiled(x, w)
        torch.testing.assert_close(got_h, want_h, rtol=1e-10, atol=1e-10)
        want = torch.autograd.grad((want_h * g).sum() + want_s, (x, w))
        got = torch.autograd.grad((got_h * g).sum() + got_s, (x, w))
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
