"""DISC's decomposition table is exact for every output of every op it decomposes.

Decompositions apply below autograd, so an op's derivative formula consumes whatever the
decomposition returned in place of each output: one wrong secondary output (torch's CPU
flash attention decomposition returns the attention matrix as the logsumexp) trains
silently wrong. :class:`DecompositionAudit` compares every decomposed call with the
kernel; these tests run it over PyTorch's OpInfo samples, forward and backward, and over
the attention cases OpInfo does not reach (4-d, masks, causal).
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch._decomp import get_decompositions
from torch.utils._pytree import tree_leaves

from disc_torch.decomposition_audit import DecompositionAudit, compare_outputs
from disc_torch.decompositions import EXACT, INEXACT, decomposition_table

aten = torch.ops.aten
FLASH = aten._scaled_dot_product_flash_attention_for_cpu.default
FLASH_BACKWARD = aten._scaled_dot_product_flash_attention_for_cpu_backward.default

#: OpInfo names left out: random ops (no two runs agree) and ops whose samples are not
#: CPU tensors of the dtype
SKIP = ("rand", "normal", "uniform", "bernoulli", "dropout", "multinomial", "cauchy",
        "exponential", "geometric", "log_normal", "sparse", "_refs", "jiterator")


def _leaves(x) -> list[torch.Tensor]:
    return [t for t in tree_leaves(x) if isinstance(t, torch.Tensor)]


def _forward_and_backward(fn, *args, **kwargs) -> None:
    out = fn(*args, **kwargs)
    outs = [t for t in _leaves(out) if t.requires_grad]
    leaves = [t for t in _leaves((args, kwargs)) if t.requires_grad]
    if outs and leaves:
        loss = sum((t * torch.linspace(-1, 1, t.numel()).reshape(t.shape).to(t.dtype)).sum()
                   for t in outs)
        torch.autograd.grad(loss, leaves, allow_unused=True)


def _attention_cases(dtype: torch.dtype):
    """4-d SDPA calls that reach the CPU flash kernel: masks of every kind, causal with
    more and fewer keys than queries, a given scale, fully masked rows."""
    g = torch.Generator().manual_seed(0)

    def qkv(b, h, lq, lk, e):
        return [torch.randn(b, h, n, e, generator=g, dtype=dtype).requires_grad_()
                for n in (lq, lk, lk)]

    yield qkv(2, 3, 5, 5, 8), {}
    yield qkv(2, 3, 5, 7, 8), {"is_causal": True}
    yield qkv(1, 2, 9, 4, 16), {"is_causal": True}
    yield qkv(2, 2, 6, 6, 8), {"scale": 0.3}
    float_mask = torch.zeros(2, 1, 6, 6, dtype=dtype)
    float_mask[0, ..., 3:] = float("-inf")
    float_mask[1, :, 2, :] = float("-inf")  # a fully masked row
    yield qkv(2, 2, 6, 6, 8), {"attn_mask": float_mask}
    bool_mask = torch.rand(6, 6, generator=g) > 0.3
    bool_mask[:, 0] = True
    yield qkv(2, 2, 6, 6, 8), {"attn_mask": bool_mask}
    yield qkv(1, 1, 1, 1, 4), {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attention_decompositions_are_exact_for_both_outputs_and_the_backward(dtype,
                                                                             monkeypatch):
    # the decomposition is the path where the fused attention ops are off (or do not
    # cover a call); where they cover it, it declines and the converters take the op
    monkeypatch.setenv("DISC_FUSED_ATTENTION", "0")
    audit = DecompositionAudit(decomposition_table())
    for args, kwargs in _attention_cases(dtype):
        with audit:
            _forward_and_backward(F.scaled_dot_product_attention, *args, **kwargs)
    assert not audit.mismatches, audit.mismatches
    assert not audit.errors, audit.errors
    assert audit.checked.get(str(FLASH), 0) >= 6, audit.checked
    assert audit.checked.get(str(FLASH_BACKWARD), 0) >= 6, audit.checked


def test_the_audit_catches_torchs_flash_attention_decomposition():
    """torch's decomposition, which DISC no longer uses, fails the audit on its second
    output: the audit is what would have caught the wrong gradients."""
    audit = DecompositionAudit(get_decompositions([FLASH]))
    for args, kwargs in _attention_cases(torch.float32):
        with audit:
            _forward_and_backward(F.scaled_dot_product_attention, *args, **kwargs)
    assert audit.mismatches and all(m.detail.startswith("output #1")
                                    for m in audit.mismatches), audit.mismatches
    assert FLASH in INEXACT and decomposition_table()[FLASH] is EXACT[FLASH]


def test_compare_outputs_names_what_differs():
    a = torch.tensor([1.0, 2.0])
    assert compare_outputs((a, a), (a,)) == "2 tensor outputs, the kernel returns 1"
    assert "float64" in compare_outputs(a.double(), a)
    assert "NaN" in compare_outputs(torch.tensor([float("nan"), 2.0]), a)
    assert "differs" in compare_outputs(a + 1e-2, a)
    assert compare_outputs(a + 1e-6, a) is None
    assert "2 places" in compare_outputs(torch.tensor([1, 2]), torch.tensor([0, 0]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_decomposition_table_is_exact_on_opinfo_samples(dtype):
    """Every OpInfo op with CPU samples of the dtype, first 3 samples, forward and input
    gradients, under the audit: every op DISC decomposes along the way is compared with
    its kernel, every output."""
    from torch.testing._internal.common_methods_invocations import op_db

    audit = DecompositionAudit(decomposition_table())
    samples = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for info in op_db:
            if any(w in info.name for w in SKIP) or dtype not in info.supported_dtypes("cpu"):
                continue
            try:
                cases = list(info.sample_inputs("cpu", dtype,
                                                requires_grad=info.supports_autograd))[:3]
            except Exception:  # a sample generator that needs something this build lacks
                continue
            for s in cases:
                try:
                    with audit:
                        _forward_and_backward(info.op, s.input, *s.args, **s.kwargs)
                except Exception:  # an op rejecting its own sample: no kernel to compare
                    continue
                samples += 1
    assert not audit.mismatches, audit.mismatches
    # the sweep reaches most of what DISC decomposes in models (layer/batch norm and their
    # backward, softmax, GELU, losses, pooling backward...)
    assert samples > 1500 and len(audit.checked) > 150, (samples, len(audit.checked))
    for op in ("aten.native_layer_norm.default", "aten.native_layer_norm_backward.default",
               "aten._softmax.default", "aten.native_batch_norm.default",
               "aten._log_softmax_backward_data.default"):
        assert audit.checked.get(op), op
