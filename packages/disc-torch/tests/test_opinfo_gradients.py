"""A fast slice of the OpInfo sweep (ci/opinfo_sweep.py, tox env ``opinfo``): the ops
transformers and CNNs train with, forward and input gradients against eager, on one
compiled function per op (later samples are shapes it was not compiled for), alone and
with ops forced to stay in torch on both sides (clusters next to eager ops in the
forward and the backward graph)."""

from __future__ import annotations

import pytest
import torch
from helpers import ci_script, fallbacks

import disc_torch

#: differentiable ops DISC converts or decomposes that models are made of
OPS = ["nn.functional.linear", "matmul", "bmm", "addmm", "softmax", "log_softmax",
       "nn.functional.layer_norm", "nn.functional.rms_norm", "nn.functional.batch_norm",
       "nn.functional.gelu", "nn.functional.silu", "nn.functional.relu", "tanh", "sigmoid",
       "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
       "nn.functional.adaptive_avg_pool2d", "nn.functional.embedding",
       "nn.functional.cross_entropy", "nn.functional.mse_loss",
       "nn.functional.scaled_dot_product_attention", "mean", "var", "cat", "transpose",
       "reshape", "where", "cumsum", "gather", "index_select", "masked_fill", "expand",
       "split", "pow", "rsqrt", "exp"]


@pytest.mark.parametrize("isolate", [False, True], ids=["alone", "next_to_torch_ops"])
def test_opinfo_gradients_match_eager(isolate):
    sweep = ci_script("opinfo_sweep")
    ops = sweep.select(set(OPS), torch.float32, grad=True)
    assert {o.name for o in ops} == set(OPS), "an op left OpInfo: update the list"
    found = sweep.sweep(ops, torch.float32, grad=True, isolate=isolate, samples=2,
                        log=lambda line: None)
    assert not found["wrong"] and not found["disc_failure"], found
    def full_name(o):
        return o.name + (f".{o.variant_test_name}" if o.variant_test_name else "")

    passed = {tag.rsplit("[", 1)[0] for tag in found["pass"]}
    assert passed == {full_name(o) for o in ops}, found["skipped"]  # every op ran
    summary = disc_torch.report().summary()
    assert summary.compiled > 0, summary
    if isolate:
        assert {op for op, _, _ in fallbacks()} >= {"aten.neg.default"}
