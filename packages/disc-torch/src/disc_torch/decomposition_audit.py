"""Check a decomposition table against the real kernels, every output of every call.

aot_autograd applies decompositions below autograd: an op's derivative formula still
runs on whatever the op returned, so a decomposition that is right for the first output
and not for the others (torch's CPU flash attention returning attention probabilities as
its logsumexp) trains silently wrong. The audit runs a program under a dispatch mode
that, for every call of an op the table decomposes, also runs the decomposition on the
same arguments and compares each output with the kernel's: count, shape, dtype, values.

    with DecompositionAudit(decomposition_table()) as audit:
        loss = model(x).sum(); loss.backward()
    audit.mismatches  # [(op, what differs)]

disc-torch's tests run it over PyTorch's OpInfo samples, forward and backward
(``ci/opinfo_sweep.py --audit`` for all of them); run it after moving to a new torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["DecompositionAudit", "Mismatch", "compare_outputs"]

#: (rtol, atol) by dtype, rtol relative to the largest magnitude of the kernel's output:
#: a decomposition may sum in another order than the kernel (a float32 gradient that is
#: zero in exact arithmetic came out 2.4e-5 from the kernel and 0 from the decomposition,
#: a sum over a few hundred O(1) products); a wrong output is off by the output's own
#: scale. float64 is held to 1e-7, not tighter: torch's own hardsigmoid_backward kernel
#: multiplies float64 gradients by a float32 1/6 (1.2e-8 off; the decomposition is exact).
TOLERANCES = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2),
              torch.float32: (1e-4, 1e-4), torch.float64: (1e-7, 1e-10),
              torch.complex64: (1e-4, 1e-5), torch.complex128: (1e-7, 1e-10)}

#: ops whose outputs hold uninitialized memory: only their shapes and dtypes are compared
UNINITIALIZED = {"empty_like", "new_empty", "new_empty_strided", "empty", "empty_strided",
                 "empty_permuted"}


@dataclass(frozen=True)
class Mismatch:
    op: str
    detail: str


def compare_outputs(got: Any, want: Any, values: bool = True) -> str | None:
    """What differs between a decomposition's outputs and the kernel's, or None."""
    got_t = [t for t in tree_leaves(got) if isinstance(t, torch.Tensor)]
    want_t = [t for t in tree_leaves(want) if isinstance(t, torch.Tensor)]
    if len(got_t) != len(want_t):
        return f"{len(got_t)} tensor outputs, the kernel returns {len(want_t)}"
    for i, (g, w) in enumerate(zip(got_t, want_t)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return (f"output #{i} is {g.dtype} {tuple(g.shape)}, the kernel's is "
                    f"{w.dtype} {tuple(w.shape)}")
        if not values or not w.numel():
            continue
        if not (w.dtype.is_floating_point or w.dtype.is_complex):
            if not torch.equal(g, w):
                return f"output #{i} differs from the kernel's in {int((g != w).sum())} places"
            continue
        g, w = g.detach().to(torch.complex128 if w.dtype.is_complex else torch.float64), \
            w.detach().to(torch.complex128 if w.dtype.is_complex else torch.float64)
        if not torch.equal(g.isnan(), w.isnan()) or not torch.equal(g.isinf(), w.isinf()) \
                or not torch.equal(g[g.isinf()], w[w.isinf()]):
            return f"output #{i} has NaN or infinity where the kernel's does not"
        finite = w.isfinite()
        if not finite.any():
            continue
        rtol, atol = TOLERANCES.get(want_t[i].dtype, (0.0, 0.0))
        err = (g[finite] - w[finite]).abs().max().item()
        scale = w[finite].abs().max().item()
        if err > atol + rtol * scale:
            return (f"output #{i} differs from the kernel's by up to {err:.3g} "
                    f"(its largest magnitude is {scale:.3g})")
    return None


class DecompositionAudit(TorchDispatchMode):
    """A dispatch mode that cross-checks ``table`` on every call it decomposes.

    ``mismatches``: outputs that differ from the kernel's; ``checked``: op -> calls
    compared (a decomposition that declines with NotImplemented is not counted);
    ``errors``: decompositions that raised where the kernel did not (the trace then
    fails loudly and the graph runs eagerly: not wrong, but worth knowing)."""

    def __init__(self, table: Mapping[Any, Callable[..., Any]]):
        super().__init__()
        self.table = table
        self.mismatches: list[Mismatch] = []
        self.checked: dict[str, int] = {}
        self.errors: list[Mismatch] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        decomposition = self.table.get(func)
        if decomposition is None:
            return func(*args, **kwargs)
        seeded = torch.Tag.nondeterministic_seeded in func.tags
        before = torch.get_rng_state() if seeded else None
        out = func(*args, **kwargs)
        after = torch.get_rng_state() if seeded else None
        if seeded and not torch.equal(before, after):
            return out  # it drew random numbers (dropout > 0): no two runs agree
        try:
            mine = decomposition(*args, **kwargs)
        except Exception as exc:
            self.errors.append(Mismatch(str(func), f"{type(exc).__name__}: {exc}"[:300]))
            return out
        finally:
            if seeded:
                torch.set_rng_state(after)  # the program's random stream is untouched
        if mine is NotImplemented:
            return out
        self.checked[str(func)] = self.checked.get(str(func), 0) + 1
        initialized = func.overloadpacket.__name__ not in UNINITIALIZED
        detail = compare_outputs(mine, out, values=initialized)
        if detail is not None:
            self.mismatches.append(Mismatch(str(func), detail))
        return out
