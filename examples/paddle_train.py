"""Train a GPT-style Paddle model with and without DISC on batches whose sequence length
varies: one added line, ``model = disc_paddle.compile(model)``.

    python examples/paddle_train.py [--steps 20] [--quick]

Prints loss parity against plain Paddle (dynamic mode), the step-time ratio, DISC's
compile count and the coverage summary. Both runs start from the same weights and see the
same batches, so the losses agree to float32 rounding (the tolerance is printed and
checked; the exit status says whether it held). The models here are also what
benchmarks/paddle_models.py times and the disc-paddle tests train.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F


class Block(nn.Layer):
    """A pre-LN transformer block: causal self-attention, then a GELU MLP."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        b, s, h = x.shape
        qkv = self.qkv(self.ln1(x)).reshape([b, s, 3, self.heads, h // self.heads])
        q, k, v = qkv.transpose([2, 0, 3, 1, 4])
        att = paddle.matmul(q, k, transpose_y=True) * (h // self.heads) ** -0.5
        mask = paddle.triu(paddle.full([s, s], float("-inf")), 1)
        att = F.softmax(att + mask, axis=-1)
        y = paddle.matmul(att, v).transpose([0, 2, 1, 3]).reshape([b, s, h])
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Layer):
    """Token and position embeddings, ``layers`` blocks, a final LayerNorm and the LM head;
    ``forward(idx, targets)`` returns the mean next-token cross-entropy."""

    def __init__(self, vocab: int = 512, hidden: int = 256, heads: int = 4, layers: int = 2,
                 max_len: int = 512):
        super().__init__()
        self.vocab = vocab
        self.tok, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(max_len, hidden)
        self.blocks = nn.LayerList([Block(hidden, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, idx, targets):
        s = idx.shape[1]
        x = self.tok(idx) + self.pos(paddle.arange(s))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.reshape([-1, self.vocab]), targets.reshape([-1]))


class SmallCNN(nn.Layer):
    """conv-BN-ReLU-pool twice, global average pooling, a linear classifier."""

    def __init__(self, channels: int = 3, classes: int = 10, width: int = 16):
        super().__init__()
        self.conv1 = nn.Conv2D(channels, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2D(width)
        self.conv2 = nn.Conv2D(width, 2 * width, 3, padding=1)
        self.bn2 = nn.BatchNorm2D(2 * width)
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.avg_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def batches(vocab: int, lengths: list[int], batch: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for s in lengths:
        idx = rng.integers(0, vocab, (batch, s + 1))
        yield paddle.to_tensor(idx[:, :-1]), paddle.to_tensor(idx[:, 1:])


def train(model: nn.Layer, data, lr: float = 1e-3) -> tuple[list[float], list[float]]:
    opt = paddle.optimizer.AdamW(lr, parameters=model.parameters())
    losses, times = [], []
    for idx, tgt in data:
        start = time.perf_counter()
        loss = model(idx, tgt)
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(float(loss))
        times.append(time.perf_counter() - start)
    return losses, times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="a small model, 8 steps")
    args = p.parse_args(argv)
    import disc_paddle

    hidden, steps = (64, 8) if args.quick else (256, args.steps)
    lengths = [16 + 7 * i for i in range(steps)]
    paddle.seed(0)
    plain = GPT(hidden=hidden)
    compiled = GPT(hidden=hidden)
    compiled.set_state_dict(plain.state_dict())
    compiled = disc_paddle.compile(compiled)  # the one added line
    want, t_plain = train(plain, batches(plain.vocab, lengths, 4))
    got, t_disc = train(compiled, batches(plain.vocab, lengths, 4))
    worst = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(got, want))
    tol = 1e-4
    steady = slice(2, None)  # the first steps include tracing and compiling
    ratio = statistics.median(t_plain[steady]) / statistics.median(t_disc[steady])
    print(f"losses: paddle {want[0]:.4f} .. {want[-1]:.4f}, disc {got[0]:.4f} .. {got[-1]:.4f};"
          f" worst relative difference {worst:.2e} (tolerance {tol:g})")
    print(f"steady step: paddle {1e3 * statistics.median(t_plain[steady]):.1f} ms, disc "
          f"{1e3 * statistics.median(t_disc[steady]):.1f} ms: x{ratio:.2f}; "
          f"{len(set(lengths))} sequence lengths, {disc_paddle.compile_count()} DISC "
          f"compilations")
    from disc_core.report import summary_line

    print(summary_line(disc_paddle.report().summary()))
    return 0 if worst <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
