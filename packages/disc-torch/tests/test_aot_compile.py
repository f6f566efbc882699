"""disc_torch.aot_compile: torch.export once, DISC once, calls without dynamo.

Every model is checked against its own eager result on shapes the export never saw (sizes
0, 1, odd and large among them), with one DISC compile for all of them; bad inputs get
errors that name what the program takes, and never disable a cluster."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from helpers import assert_same, built_artifacts, fallbacks

import disc_torch
from disc_torch import AotInputError, AotLoadError, aot_compile, aot_load


class Block(nn.Module):
    """Pre-LN transformer block, causal attention in plain ops (GEMMs, softmax, GELU)."""

    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        att = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Residual(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.ln = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.ln(x * y + x) * 2 + 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_compile_serves_every_size_and_matches_eager(dtype):
    model = Block().to(dtype).eval()
    compiled = aot_compile(model, (torch.randn(2, 9, 32, dtype=dtype),))
    # compiled ahead of time: no build is left for the first call to wait for
    assert compiled._graph.clusters and all(c._build is None for c in compiled._graph.clusters)
    compiles = disc_torch.compile_count()
    assert compiles == built_artifacts() >= 1
    with torch.no_grad():
        for b, t in [(2, 9), (1, 1), (3, 17), (1, 0), (0, 5), (2, 130)]:
            x = torch.randn(b, t, 32, dtype=dtype)
            assert_same(compiled(x), model(x))
    assert disc_torch.compile_count() == compiles  # no compile per shape
    assert fallbacks() == []  # the whole block ran in DISC's clusters
    graph = disc_torch.report().graphs[-1]
    assert graph.name.startswith("aot_") and all(c.engine == "native" for c in graph.clusters)


def test_broadcast_inputs_keyword_arguments_and_structured_outputs():
    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x, *, bias):
            h = self.lin(x) + bias  # bias [8] broadcasts over [B, T, 8]
            return {"sum": h.sum(-1), "pair": (h.relu(), torch.tanh(h))}

    model = Heads().eval()
    compiled = aot_compile(model, (torch.randn(2, 3, 8),), {"bias": torch.randn(8)})
    with torch.no_grad():
        for shape in [(2, 3, 8), (5, 1, 8), (1, 7, 8), (0, 4, 8)]:
            x, bias = torch.randn(shape), torch.randn(8)
            got, want = compiled(x, bias=bias), model(x, bias=bias)
            assert set(got) == {"sum", "pair"}
            assert_same(got["sum"], want["sum"])
            assert_same(got["pair"], want["pair"])


def test_buffers_the_program_mutates_are_written_back_as_eager_does():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
    model.train()
    reference = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
    reference.load_state_dict(model.state_dict())
    reference.train()
    compiled = aot_compile(model, (torch.randn(2, 3, 10, 10),))
    with torch.no_grad():
        for shape in [(2, 3, 10, 10), (3, 3, 7, 9), (1, 3, 12, 5)]:
            x = torch.randn(shape)
            assert_same(compiled(x), reference(x))
    bn, ref_bn = model[1], reference[1]
    assert_same(bn.running_mean, ref_bn.running_mean)
    assert_same(bn.running_var, ref_bn.running_var)
    assert bn.num_batches_tracked.item() == ref_bn.num_batches_tracked.item() == 3


def test_parameters_are_read_in_place():
    model = Residual().eval()
    compiled = aot_compile(model, (torch.randn(4, 16), torch.randn(4, 16)))
    x, y = torch.randn(5, 16), torch.randn(5, 16)
    with torch.no_grad():
        model.ln.weight.mul_(3).add_(0.5)  # as load_state_dict or an optimizer step would
        assert_same(compiled(x, y), model(x, y))


def test_clusters_run_next_to_ops_that_stay_in_torch():
    model = Residual().eval()
    compiled = aot_compile(model, (torch.randn(4, 16), torch.randn(4, 16)),
                           excluded_ops=["aten.var_mean"])
    with torch.no_grad():
        for n in (4, 1, 33):
            x, y = torch.randn(n, 16), torch.randn(n, 16)
            assert_same(compiled(x, y), model(x, y))
    ran_in_torch = [op for op, _reason, _detail in fallbacks() if op != "getitem"]
    assert ran_in_torch == ["aten.var_mean.correction"]
    assert len(disc_torch.report().graphs[-1].clusters) == 2  # before and after it


def test_bad_inputs_name_what_the_program_takes_and_leave_it_compiled():
    model = Residual().eval()
    compiled = aot_compile(model, (torch.randn(4, 16), torch.randn(4, 16)))
    x = torch.randn(4, 16)
    cases = [
        ((torch.randn(4, 17), x), r"input 0 \('x'\) must be a torch.float32 CPU tensor of "
                                  r"shape \[s\w+, 16\], got .* shape \[4, 17\]"),
        ((x.double(), x), r"input 0 \('x'\) must be a torch.float32 .*got a torch.float64"),
        ((x, x[None]), r"input 1 \('y'\) must be .* shape \[1, 4, 16\]"),
        ((x, torch.randn(5, 16)), r"input 1 \('y'\) has size 5 in dim 0 where input 0 "
                                  r"\('x'\) has 4: the compiled program ties both"),
        ((x,), r"1 inputs given, the compiled program takes 2: x, y"),
        ((x, 3.0), r"input 1 \('y'\) must be .*got a float"),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing falls back
        for args, message in cases:
            with pytest.raises(AotInputError, match=message):
                compiled(*args)
        with pytest.raises(AotInputError, match=r"requires grad: .* inference only"):
            compiled(x.requires_grad_(), torch.randn(4, 16))
        x = x.detach()
        with torch.no_grad():
            compiled(x.clone().requires_grad_(), x)  # no grad mode: nothing to lose
            assert_same(compiled(x, x), model(x, x))
    assert fallbacks() == []


def test_a_program_disc_cannot_partition_runs_eagerly_with_a_warning(monkeypatch):
    from disc_torch import partition

    def broken(*args, **kwargs):
        raise RuntimeError("injected")

    monkeypatch.setattr(partition, "partition_and_compile", broken)
    model = Residual().eval()
    with pytest.warns(UserWarning, match="aot_compile'd program runs eagerly.*injected"):
        compiled = aot_compile(model, (torch.randn(4, 16), torch.randn(4, 16)))
    x, y = torch.randn(3, 16), torch.randn(3, 16)
    with torch.no_grad():
        assert_same(compiled(x, y), model(x, y))
    reasons = {reason for _op, reason, _detail in fallbacks()}
    assert reasons == {"compile_error"}


def test_transformers_models_serve_every_length_from_one_compile():
    """Third-party models as a server calls them: GPT-2's logits and BERT's hidden states
    with a padding mask, at batches and lengths the export never saw."""
    transformers = pytest.importorskip("transformers")

    class GPT2Logits(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
                vocab_size=100, n_embd=32, n_layer=1, n_head=4, n_positions=128,
                use_cache=False))

        def forward(self, ids):
            return self.model(input_ids=ids).logits

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = transformers.BertModel(transformers.BertConfig(
                vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                intermediate_size=64, max_position_embeddings=128), add_pooling_layer=False)

        def forward(self, ids, mask):
            return self.model(input_ids=ids, attention_mask=mask).last_hidden_state

    def mask_of(b, t):
        mask = torch.ones(b, t, dtype=torch.long)
        mask[:, t - t // 3:] = 0  # padding at the end, as a padded batch has
        return mask

    gpt2, bert = GPT2Logits().eval(), Bert().eval()
    with pytest.warns(UserWarning, match=r"'ids' was exported with size 1 in dim 0, and "
                                         r"the program serves sizes \[1, 2\] there only"):
        aot_compile(gpt2, (torch.randint(0, 100, (1, 9)),))  # batch 1: bounded by torch
    served_gpt2 = aot_compile(gpt2, (torch.randint(0, 100, (2, 9)),))
    served_bert = aot_compile(bert, (torch.randint(0, 100, (2, 9)), mask_of(2, 9)))
    compiles = disc_torch.compile_count()
    with torch.no_grad():
        for b, t in [(1, 2), (1, 17), (3, 5), (2, 64)]:
            ids = torch.randint(0, 100, (b, t))
            assert_same(served_gpt2(ids), gpt2(ids))
            assert_same(served_bert(ids, mask_of(b, t)), bert(ids, mask_of(b, t)))
    assert disc_torch.compile_count() == compiles == built_artifacts() >= 2  # one per model
    assert [op for op, _r, _d in fallbacks() if op != "getitem"] == []
    # transformers' GPT-2 branches on a length of 1: export kept the branch it traced
    with pytest.raises(AotInputError, match=r"size 1 in dim 1, outside the range .*\[2, "):
        served_gpt2(torch.randint(0, 100, (1, 1)))


def test_a_saved_model_runs_in_a_new_process_without_export_or_compiling(tmp_path):
    """save writes the partitioned graph, signature and weights; aot_load in a new process
    runs it with torch.export made unusable and no DISC compile (the compile cache serves
    the native module): what a server's start costs."""
    model = Block().eval()
    served = aot_compile(model, (torch.randn(2, 9, 32),))
    path = tmp_path / "block.disc"
    served.save(path)
    xs = [torch.randn(b, t, 32) for b, t in [(1, 5), (3, 11), (2, 0)]]
    with torch.no_grad():
        want = [model(x) for x in xs]
    torch.save({"xs": xs, "want": want}, tmp_path / "io.pt")
    script = f"""
import torch, torch.export
def no_export(*args, **kwargs):
    raise AssertionError("aot_load must not export")
torch.export.export = no_export
import disc_torch
served = disc_torch.aot_load({str(path)!r})
io = torch.load({str(tmp_path / "io.pt")!r})
with torch.no_grad():
    for x, want in zip(io["xs"], io["want"]):
        torch.testing.assert_close(served(x), want, rtol=1e-4, atol=1e-5)
try:
    served(torch.randn(2, 5, 31))
except disc_torch.AotInputError as exc:
    print("refused:", exc)
print("compiles", disc_torch.compile_count())
print("engines", [c.engine.value for g in disc_torch.report().graphs for c in g.clusters])
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600, env={**os.environ,
                                            "DISC_CACHE_DIR": os.environ["DISC_CACHE_DIR"]})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "refused: input 0 ('x') must be a torch.float32 CPU tensor of shape [" in proc.stdout
    assert "compiles 0" in proc.stdout
    assert "engines ['native']" in proc.stdout


def test_a_loaded_model_runs_on_the_weights_it_is_given(tmp_path):
    model = Residual().eval()
    path = tmp_path / "residual.disc"
    aot_compile(model, (torch.randn(4, 16), torch.randn(4, 16))).save(path)
    x, y = torch.randn(6, 16), torch.randn(6, 16)
    with torch.no_grad():
        saved = model(x, y)
        model.ln.weight.add_(1.0)  # the live model moves on after the save
        assert_same(aot_load(path)(x, y), saved)  # the saved weights
        assert_same(aot_load(path, model)(x, y), model(x, y))  # the model's, in place
    with pytest.raises(AotLoadError, match=r"the model's ln.weight is a torch.float32 "
                                           r"tensor of shape \[8\], the saved program "
                                           r"takes torch.float32 of shape \[16\]"):
        aot_load(path, Residual(width=8))


def test_files_aot_load_cannot_run_are_refused_with_the_reason(tmp_path):
    path = tmp_path / "residual.disc"
    aot_compile(Residual().eval(), (torch.randn(4, 16), torch.randn(4, 16))).save(path)
    data = torch.load(path, weights_only=False)
    torch.save({**data, "torch": "1.0.0"}, tmp_path / "old.disc")
    with pytest.raises(AotLoadError, match=r"saved with torch 1.0.0, this process has "):
        aot_load(tmp_path / "old.disc")
    torch.save({"weights": torch.zeros(3)}, tmp_path / "other.disc")
    with pytest.raises(AotLoadError, match=r"not a saved DISC compiled model of format"):
        aot_load(tmp_path / "other.disc")
    (tmp_path / "garbage.disc").write_bytes(b"\x00not a pickle")
    with pytest.raises(AotLoadError, match=r"garbage.disc: not a saved DISC compiled model"):
        aot_load(tmp_path / "garbage.disc")
