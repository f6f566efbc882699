"""Train an eager model and a DISC-compiled copy in lockstep and compare every gradient.

Used by test_model_training_parity.py. Both copies start from the same weights; at every
step both run the same batch, their losses and the gradient of every parameter are
compared, then both optimizers step, so an error in one step also shows in the next ones
(the parameters would drift apart).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

#: a parameter's gradient may differ from eager's by this fraction of its norm
#: (float32, different summation orders and fusions)
GRAD_RTOL = 1e-4

#: Absolute floor, as a fraction of the norm of the whole model's gradient (all parameters).
#: Some gradients are mathematically zero: a BERT key projection's bias adds the same
#: value to every score of a softmax row, which the softmax cancels, so d loss / d bias is
#: exactly 0 and eager returns float32 rounding residue. Two summation orders leave two
#: different residues, so their relative difference is O(1) and means nothing. Rounding
#: residue scales with the magnitudes summed, i.e. with the model's gradients, so the floor
#: is tied to the global gradient norm. Measured in these tests: the residues differ by at
#: most 1.2e-12 of the global norm, while the smallest gradient that is not zero is 2e-6 of
#: it (BERT's query bias); 1e-9 sits 1000x above the residue and still holds that smallest
#: gradient to 5e-4 of its own norm, so a wrong gradient cannot hide under the floor.
GRAD_ATOL_OF_GLOBAL = 1e-9

#: losses (and running statistics) agree like any float32 result in these tests
LOSS_TOL = dict(rtol=1e-4, atol=1e-5)


@dataclass
class StepResult:
    shape: str
    loss_eager: float
    loss_disc: float
    #: parameter name -> ||g_disc - g_eager|| / ||g_eager||
    rel_errors: dict[str, float] = field(default_factory=dict)
    #: parameters whose error was judged against the absolute floor, not GRAD_RTOL
    floored: list[str] = field(default_factory=list)
    #: norm of the whole eager gradient, and the absolute floor derived from it
    global_norm: float = 0.0
    floor: float = 0.0
    #: parameter name -> ||g_eager||
    norms: dict[str, float] = field(default_factory=dict)

    def worst(self, skip_floored: bool = True) -> tuple[str, float]:
        items = [(n, e) for n, e in self.rel_errors.items()
                 if not (skip_floored and n in self.floored)]
        return max(items, key=lambda item: item[1]) if items else ("", 0.0)


def gradient_errors(eager: torch.nn.Module, disc: torch.nn.Module) -> StepResult:
    """Compare the gradients of two copies of one model; fill a StepResult's error fields."""
    result = StepResult("", 0.0, 0.0)
    named_e, named_d = dict(eager.named_parameters()), dict(disc.named_parameters())
    assert named_e.keys() == named_d.keys()
    missing = [n for n, p in named_e.items() if p.requires_grad and p.grad is None]
    # a parameter eager leaves without a gradient (unused) must stay without one
    for n, p in named_e.items():
        assert (p.grad is None) == (named_d[n].grad is None), f"{n}: grad presence differs"
    grads = {n: p.grad for n, p in named_e.items() if p.grad is not None}
    assert grads, f"no gradients at all (missing: {missing})"
    global_norm = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g.double()) for g in grads.values()])).item()
    floor = GRAD_ATOL_OF_GLOBAL * global_norm
    result.global_norm, result.floor = global_norm, floor
    failures = []
    for n, g_e in grads.items():
        g_d = named_d[n].grad
        assert g_d.shape == g_e.shape and g_d.dtype == g_e.dtype, n
        diff = torch.linalg.vector_norm((g_d - g_e).double()).item()
        norm = torch.linalg.vector_norm(g_e.double()).item()
        result.norms[n] = norm
        result.rel_errors[n] = diff / norm if norm > 0 else (0.0 if diff == 0 else float("inf"))
        if diff <= GRAD_RTOL * norm:
            continue
        if diff <= floor:
            result.floored.append(n)
            continue
        failures.append(f"{n}: |g_disc - g_eager| / |g_eager| = {diff / max(norm, 1e-300):.3g}"
                        f" (|g_eager| = {norm:.3g}, floor {floor:.3g})")
    assert not failures, "gradients differ from eager:\n  " + "\n  ".join(failures)
    return result


def train_in_lockstep(eager: torch.nn.Module, disc: torch.nn.Module,
                      compiled: Callable[..., Any], batches: Iterable[tuple[str, dict]],
                      loss_of: Callable[[Any], torch.Tensor], lr: float = 0.05,
                      after_step: Callable[[int], None] | None = None) -> list[StepResult]:
    """SGD steps on both copies, one batch each; asserts losses, gradients and buffers match.

    ``batches`` yields (description, keyword arguments of the model); ``loss_of`` maps a
    model output to the scalar loss. ``compiled`` is the compiled callable of ``disc``.
    """
    opt_e = torch.optim.SGD(eager.parameters(), lr=lr)
    opt_d = torch.optim.SGD(disc.parameters(), lr=lr)
    results = []
    for step, (shape, kwargs) in enumerate(batches):
        loss_e = loss_of(eager(**kwargs))
        loss_d = loss_of(compiled(**kwargs))
        loss_e.backward()
        loss_d.backward()
        torch.testing.assert_close(loss_d, loss_e, **LOSS_TOL,
                                   msg=lambda m, s=step, sh=shape: f"step {s} {sh}: loss: {m}")
        try:
            result = gradient_errors(eager, disc)
        except AssertionError as exc:
            raise AssertionError(f"step {step} ({shape}): {exc}") from None
        result.shape, result.loss_eager, result.loss_disc = shape, loss_e.item(), loss_d.item()
        results.append(result)
        # buffers the forward updates (batch norm's running statistics)
        for (n, b_e), b_d in zip(eager.named_buffers(), disc.buffers()):
            if b_e.is_floating_point():
                torch.testing.assert_close(b_d, b_e, **LOSS_TOL,
                                           msg=lambda m, s=step, n=n: f"step {s}: {n}: {m}")
            else:
                assert torch.equal(b_d, b_e), f"step {step}: buffer {n} differs"
        opt_e.step()
        opt_d.step()
        opt_e.zero_grad(set_to_none=True)
        opt_d.zero_grad(set_to_none=True)
        if after_step is not None:
            after_step(step)
    return results
