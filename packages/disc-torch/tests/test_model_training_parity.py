"""Third-party models trained through ``torch.compile(backend="disc", dynamic=True)``.

Each test builds a small model from a config (no downloads), makes two copies with the same
weights, and trains one eagerly and one compiled with SGD in lockstep over batches whose
shapes change every step (odd sizes, sizes never seen before, padding masks for the text
models). At every step the losses and the gradient of every parameter must match eager's
(training_parity.py says how closely), and the number of DISC compilations must not grow
after the first step: one compile per rank signature, not per shape.
"""

from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from training_parity import train_in_lockstep

import disc_torch
from disc_core.report import ReasonCode


@pytest.fixture
def transformers():
    """The text models come from transformers (pinned in tox.ini's torch env); the ResNet
    test needs nothing beyond torch, so only the tests that ask for this are skipped
    where transformers is not installed."""
    return pytest.importorskip("transformers")


def _no_dropout(config):
    """Zero every dropout probability of a transformers config (names vary by model; None,
    as in BERT's classifier_dropout, means "use another field's value")."""
    for name, value in list(vars(config).items()):
        if ("dropout" in name or name.endswith("pdrop")) and \
                (value is None or isinstance(value, float | int) and not isinstance(value, bool)):
            setattr(config, name, 0.0)
    return config


def _assert_deterministic(model: nn.Module) -> None:
    for name, module in model.named_modules():
        p = getattr(module, "p", None) if isinstance(module, nn.modules.dropout._DropoutNd) \
            else None
        assert not p, f"{name} keeps dropout p={p}"


def _run(model: nn.Module, batches, loss_of, lr: float = 0.05):
    """Train ``model`` eagerly and a compiled deep copy in lockstep; check compile counts."""
    _assert_deterministic(model)
    model.train()
    twin = copy.deepcopy(model)
    compiled = torch.compile(twin, backend="disc", dynamic=True)
    counts = []

    def after_step(step: int) -> None:
        counts.append((disc_torch.compile_count(), len(disc_torch.report().graphs)))

    results = train_in_lockstep(model, twin, compiled, batches, loss_of, lr=lr,
                                after_step=after_step)
    # the first step traces and compiles the forward and backward graphs; every later step
    # has new sizes of the same ranks and must reuse them
    assert counts[0][0] > 0, "nothing was compiled"
    assert counts[0][1] == 2, disc_torch.report().graphs  # one forward, one backward
    assert all(c == counts[0] for c in counts), f"recompiled on new shapes: {counts}"
    for name, p in model.named_parameters():  # still in sync after the last update
        torch.testing.assert_close(dict(twin.named_parameters())[name], p,
                                   rtol=1e-4, atol=1e-6)
    graphs = disc_torch.report().graphs
    for g in graphs:  # DISC did run both graphs: the parity above is not eager vs eager
        assert any(n.status.value == "compiled" for n in g.nodes), g.name
        # a cluster whose build or run failed runs eagerly and would pass the parity checks
        failed = [(n.op, n.reason.value, n.detail) for n in g.nodes
                  if n.reason in (ReasonCode.COMPILE_ERROR, ReasonCode.RUNTIME_ERROR)]
        assert not failed, f"{g.name}: clusters fell back after a failure: {failed}"
    for r in results:  # measured errors, shown with -s
        print(f"{r.shape}: loss {r.loss_eager:.6f} / {r.loss_disc:.6f}, worst relative "
              f"gradient error {r.worst()[1]:.2e} ({r.worst()[0]})"
              + (f", under the floor: {r.floored}" if r.floored else ""))
    fallbacks = Counter((n.op, n.reason.value) for g in graphs for n in g.nodes
                        if n.status.value != "compiled" and n.reason is not None)
    print("eager fallbacks:", dict(fallbacks))
    return results


def _token_batches(shapes, vocab, seed, pad_id=0, labels="lm", num_labels=None):
    """(description, kwargs) per step: token ids, a right-padded attention mask (row i
    keeps a random length; row 0 is full) and labels."""
    g = torch.Generator().manual_seed(seed)
    for batch, seq in shapes:
        ids = torch.randint(1, vocab, (batch, seq), generator=g)
        lengths = torch.randint(1, seq + 1, (batch,), generator=g)
        lengths[0] = seq
        mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
        ids = ids.masked_fill(mask == 0, pad_id)
        kwargs = dict(input_ids=ids, attention_mask=mask)
        if labels == "lm":
            kwargs["labels"] = ids.masked_fill(mask == 0, -100)
        else:
            kwargs["labels"] = torch.randint(0, num_labels, (batch,), generator=g)
        yield f"batch {batch} x seq {seq}, lengths {lengths.tolist()}", kwargs


# (batch, sequence length) per step: every step a new shape, odd lengths included
TEXT_SHAPES = [(2, 7), (3, 12), (4, 5), (2, 17), (3, 10)]


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_bert_for_sequence_classification(transformers, attention):
    """transformers' default attention is torch's SDPA (one fused op with its own backward);
    "eager" spells the attention out in matmuls and a softmax. The other models run SDPA."""
    torch.manual_seed(0)
    config = _no_dropout(transformers.BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64, num_labels=3,
        attn_implementation=attention,
        # forward() fills in problem_type on its first call: a config change dynamo would
        # see as a guard failure and recompile for, once
        problem_type="single_label_classification"))
    model = transformers.BertForSequenceClassification(config)
    assert model.config._attn_implementation == attention
    _run(model, _token_batches(TEXT_SHAPES, 99, seed=1, labels="class", num_labels=3),
         lambda out: out.loss)


def test_gpt2_lm_head_model(transformers):
    torch.manual_seed(0)
    config = _no_dropout(transformers.GPT2Config(
        vocab_size=101, n_positions=64, n_embd=32, n_layer=2, n_head=4))
    model = transformers.GPT2LMHeadModel(config)
    assert model.config._attn_implementation == "sdpa"
    # transformers derives the loss from the class name, finds none for "GPT2LMHeadModel"
    # and logs a warning on every call: a logger call dynamo cannot trace, so the loss
    # would run in a second graph (a graph break). Name the loss it falls back to anyway.
    model.loss_type = "ForCausalLM"
    _run(model, _token_batches(TEXT_SHAPES, 101, seed=2), lambda out: out.loss)


def test_gpt2_trains_through_optimize_with_its_default_loss(transformers):
    """The one-line way in, as a user writes it: ``disc_torch.optimize`` (graph package on)
    and the loss transformers picks by itself. Its ``loss_function`` property logs a
    warning dynamo cannot trace, so dynamo compiles the getter as a frame of its own,
    which its package cannot name: that used to raise PackageError out of the first
    training step."""
    torch.manual_seed(0)
    config = _no_dropout(transformers.GPT2Config(
        vocab_size=101, n_positions=64, n_embd=32, n_layer=2, n_head=4))
    model = transformers.GPT2LMHeadModel(config)
    model.train()
    twin = copy.deepcopy(model)
    compiled = disc_torch.optimize(twin)
    results = train_in_lockstep(model, twin, compiled,
                                _token_batches(TEXT_SHAPES[:3], 101, seed=2),
                                lambda out: out.loss)
    assert len(results) == 3
    graphs = disc_torch.report().graphs
    assert any(n.status.value == "compiled" for g in graphs for n in g.nodes), graphs


def test_llama_for_causal_lm(transformers):
    torch.manual_seed(0)
    config = _no_dropout(transformers.LlamaConfig(
        vocab_size=103, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    model = transformers.LlamaForCausalLM(config)
    assert model.config._attn_implementation == "sdpa"
    _run(model, _token_batches(TEXT_SHAPES, 103, seed=3), lambda out: out.loss)


def _t5_batches(seed):
    """Encoder and decoder lengths change independently; both are padded."""
    for step, ((batch, src), tgt) in enumerate(zip(TEXT_SHAPES, (5, 9, 3, 6, 11))):
        (desc, enc), = _token_batches([(batch, src)], 97, seed=100 * seed + step)
        (_, dec), = _token_batches([(batch, tgt)], 97, seed=100 * seed + 50 + step)
        yield (f"{desc}; target seq {tgt}",
               dict(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                    labels=dec["labels"]))


def test_t5_for_conditional_generation(transformers):
    torch.manual_seed(0)
    config = _no_dropout(transformers.T5Config(
        vocab_size=97, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
        num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=16,
        decoder_start_token_id=0, pad_token_id=0))
    model = transformers.T5ForConditionalGeneration(config)
    assert model.config._attn_implementation == "sdpa"
    _run(model, _t5_batches(seed=4), lambda out: out.loss)


def test_swin_inference_compiles_its_padding_and_pooler(transformers):
    """Swin pads each feature map up to a multiple of its window by amounts computed from
    the image size (``(w - W % w) % w``) and its pooler reads an ``as_strided`` view: both
    ran in torch and split the graph in four. Every size below needs padding at both
    stages, has an even number of patches and at least a window's worth at the last stage,
    and the images are wider than high (a size that does not takes the other branch of
    one of the model's own ``if`` statements or ``min`` calls: a second graph; so does a
    batch of 1, in torch's adaptive pooling). Inference only: torch's own tracing of
    Swin's training step with symbolic padding takes minutes here."""
    torch.manual_seed(0)
    config = _no_dropout(transformers.SwinConfig(
        image_size=64, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
        window_size=4, num_labels=5, drop_path_rate=0.0))
    model = transformers.SwinForImageClassification(config).eval()
    compiled = disc_torch.optimize(model, cache_graphs=False)
    g = torch.Generator().manual_seed(7)
    counts = []
    for b, h, w in [(2, 40, 56), (3, 56, 72), (2, 40, 88)]:
        x = torch.randn(b, 3, h, w, generator=g)
        with torch.no_grad():
            torch.testing.assert_close(compiled(pixel_values=x).logits,
                                       model(pixel_values=x).logits, rtol=1e-4, atol=1e-5)
        counts.append(disc_torch.compile_count())
    assert counts[0] > 0 and all(c == counts[0] for c in counts), counts
    (graph,) = disc_torch.report().graphs
    assert len(graph.clusters) == 1, graph.clusters
    assert not [(n.op, n.detail) for n in graph.nodes if n.status.value != "compiled"]
    assert {"aten.constant_pad_nd.default", "aten.as_strided.default"} <= {
        n.op for n in graph.nodes}


class BasicBlock(nn.Module):
    """torchvision's ResNet basic block: conv-bn-relu, conv-bn, shortcut, relu."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.shortcut is None else self.shortcut(x)))


class TinyResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU())
        self.layers = nn.Sequential(BasicBlock(8, 8, 1), BasicBlock(8, 16, 2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


def test_resnet_with_batch_norm():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(5)

    def batches():
        # (batch, height, width): odd sizes, a stride-2 block rounding up, a square image
        # last. The first image is not square: dynamo's duck sizing gives input dims of
        # equal size one symbol on the first trace and recompiles once they differ.
        for b, h, w in [(2, 16, 12), (3, 13, 11), (4, 9, 20), (2, 21, 15), (3, 14, 14)]:
            yield (f"batch {b} x {h}x{w}",
                   dict(x=torch.randn(b, 3, h, w, generator=g),
                        y=torch.randint(0, 10, (b,), generator=g)))

    class WithLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = TinyResNet()

        def forward(self, x, y):
            return F.cross_entropy(self.net(x), y)

    _run(WithLoss(), batches(), lambda loss: loss)


class StridedResNet(nn.Module):
    """torchvision's ResNet stem (7x7 stride-2 convolution, 3x3 stride-2 max pooling) and
    two stride-2 stages: every stage's size is a rounding of the last one's."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.layers = nn.Sequential(BasicBlock(8, 16, 2), BasicBlock(16, 16, 2))
        self.fc = nn.Linear(16, classes)

    def forward(self, x, y):
        return F.cross_entropy(self.fc(self.layers(self.stem(x)).mean((2, 3))), y)


def test_resnet_stem_and_strided_stages_compile_every_convolution():
    """The sizes after a chain of strided layers, ``((H + 3) // 4 + 1) // 2`` as the
    converters compose them, are ``(H + 7) // 8`` in torch's own shape rules: the two must
    be recognized as one, or every convolution after the stem falls back (a transformers
    ResNet ran 24 of its convolutions in torch so)."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(6)

    def batches():
        for b, h, w in [(2, 40, 36), (3, 33, 47), (2, 64, 29), (3, 50, 50)]:
            yield (f"batch {b} x {h}x{w}",
                   dict(x=torch.randn(b, 3, h, w, generator=g),
                        y=torch.randint(0, 10, (b,), generator=g)))

    _run(StridedResNet(), batches(), lambda loss: loss)
    fallen = [(n.op, n.detail) for gr in disc_torch.report().graphs for n in gr.nodes
              if n.status.value != "compiled" and "convolution" in n.op]
    assert not fallen, fallen
