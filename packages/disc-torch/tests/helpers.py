"""Shared checks: run a function eagerly and through DISC, compare, inspect the report."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

import disc_torch

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-9, atol=1e-10)}


def assert_same(got: Any, want: Any, dtype: torch.dtype | None = None) -> None:
    if isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w, dtype)
        return
    if not isinstance(want, torch.Tensor):
        assert got == want
        return
    tol = TOL.get(want.dtype, dict(rtol=0, atol=0))
    torch.testing.assert_close(got, want, **tol, equal_nan=True)


def assert_gradients_match(got: Any, want: Any, rtol: float = 1e-4) -> None:
    """Each gradient matches eager's in relative norm, the project's criterion for
    gradients (training_parity.GRAD_RTOL): elementwise, a sum whose terms cancel keeps
    float32 rounding of the terms' size, so two summation orders can disagree at one
    element by far more than the elementwise tolerance while the gradient is right; a
    wrong gradient (a layout or indexing error) is off by O(1) of its norm."""
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, (i, g.shape, w.shape)
        diff = torch.linalg.vector_norm((g - w).double()).item()
        norm = torch.linalg.vector_norm(w.double()).item()
        assert diff <= rtol * norm, f"gradient #{i}: |got - want| / |want| = {diff / norm:.3g}"


def fallbacks(op_prefix: str | None = None) -> list[tuple[str, str, str]]:
    """(op type, reason, detail) of every fallback node in this process's report."""
    out = []
    for g in disc_torch.report().graphs:
        for n in g.nodes:
            if n.status.value != "compiled" and (op_prefix is None or n.op.startswith(op_prefix)):
                out.append((n.op, n.reason.value if n.reason else "", n.detail or ""))
    return out


def built_artifacts() -> int:
    """The distinct artifacts this process's clusters run (their compile-cache keys): what
    one compile per cluster, not per shape, comes to. Clusters that compute the same thing
    share one (a graph traced again after a guard failure often holds the same cluster)."""
    keys = {c.key for g in disc_torch.report().graphs for c in g.clusters}
    assert None not in keys, "a cluster without a built artifact"
    return len(keys)


CI_SCRIPTS = Path(__file__).resolve().parents[3] / "ci"


def ci_script(name: str) -> ModuleType:
    """A sweep script of ci/ as a module, imported once by its own name (the graph cache
    pickles what it defines by reference; converter_sweep imports opinfo_sweep)."""
    if str(CI_SCRIPTS) not in sys.path:
        sys.path.insert(0, str(CI_SCRIPTS))
    return importlib.import_module(name)
