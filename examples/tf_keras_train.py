"""Train a Keras transformer-style text classifier with and without DISC, with model.fit on
batches whose sequence length varies.

    python examples/tf_keras_train.py [--steps 40] [--quick]

Prints loss parity against plain TensorFlow (graph mode, no XLA), the step-time ratio,
DISC's compile count and the coverage summary. Both runs start from the same weights and
see the same batches, so the losses agree to float32 rounding (the tolerance is printed and
checked; the exit status says whether it held).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import tensorflow as tf


def pre_ln_block(keras, x, d: int, heads: int):
    """x + self-attention(LN(x)), then + a GELU MLP of LN(.): self-attention written with
    Dense layers and matmuls, the raw TF ops Keras layers emit (benchmarks/tf_models.py times
    this block too)."""
    ops = keras.ops

    class Attention(keras.layers.Layer):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.qkv = keras.layers.Dense(3 * d)
            self.out = keras.layers.Dense(d)

        def call(self, x):
            b, t = ops.shape(x)[0], ops.shape(x)[1]
            qkv = ops.reshape(self.qkv(x), (b, t, 3, heads, d // heads))
            qkv = ops.transpose(qkv, (2, 0, 3, 1, 4))  # 3, b, h, t, dh
            q, k, v = qkv[0], qkv[1], qkv[2]
            scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) * (1.0 / (d // heads) ** 0.5)
            att = ops.matmul(ops.softmax(scores, axis=-1), v)
            att = ops.reshape(ops.transpose(att, (0, 2, 1, 3)), (b, t, d))
            return self.out(att)

    x = x + Attention()(keras.layers.LayerNormalization()(x))
    h = keras.layers.Dense(4 * d, activation="gelu")(keras.layers.LayerNormalization()(x))
    return x + keras.layers.Dense(d)(h)


def build_model(keras, vocab: int, d: int, heads: int, layers: int, classes: int, seed: int):
    """Token + position embedding, pre-LN blocks (see pre_ln_block), mean pooling and a
    linear classifier."""
    ops = keras.ops

    class Positions(keras.layers.Layer):
        def __init__(self, max_len: int, **kw):
            super().__init__(**kw)
            self.table = keras.layers.Embedding(max_len, d)

        def call(self, x):
            return x + self.table(ops.arange(ops.shape(x)[1]))

    keras.utils.set_random_seed(seed)
    inp = keras.Input((None,), dtype="int32")
    x = Positions(1024)(keras.layers.Embedding(vocab, d)(inp))
    for _ in range(layers):
        x = pre_ln_block(keras, x, d, heads)
    x = keras.layers.GlobalAveragePooling1D()(keras.layers.LayerNormalization()(x))
    model = keras.Model(inp, keras.layers.Dense(classes)(x))
    # jit_compile=False: the baseline is TensorFlow's graph mode (the benchmark compares XLA)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=False,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def dataset(steps: int, batch: int, vocab: int, classes: int, lengths: list[int], seed: int):
    def gen():
        rng = np.random.default_rng(seed)
        for i in range(steps):
            t = lengths[i % len(lengths)]
            yield (rng.integers(0, vocab, (batch, t)).astype("int32"),
                   rng.integers(0, classes, (batch,)).astype("int64"))

    return tf.data.Dataset.from_generator(gen, output_signature=(
        tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int64)))


def fit(keras, model, data) -> tuple[list[float], list[float]]:
    losses: list[float] = []
    times: list[float] = []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            times.append(time.perf_counter() - self.start)
            losses.append(float(logs["loss"]))

    model.fit(data, epochs=1, verbose=0, callbacks=[Clock()])
    return losses, times


def per_step(running_mean: list[float]) -> np.ndarray:
    """Keras logs the epoch's running mean loss; each step's own loss follows from it."""
    m = np.asarray(running_mean, dtype=np.float64)
    n = np.arange(1, len(m) + 1)
    return m * n - np.concatenate([[0.0], m[:-1] * n[:-1]])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--quick", action="store_true", help="a smaller model (CI smoke run)")
    p.add_argument("--tolerance", type=float, default=1e-3,
                   help="max relative loss difference accepted (float32 reassociation)")
    args = p.parse_args(argv)
    import keras

    import disc_tf
    from disc_core.report import summary_line

    d, layers, heads = (32, 1, 2) if args.quick else (128, 2, 4)
    vocab, classes, batch = 1000, 4, 8
    lengths = [8 + 7 * i for i in range(20)]
    steps = args.steps

    plain = build_model(keras, vocab, d, heads, layers, classes, seed=1)
    plain_losses, plain_times = fit(keras, plain, dataset(steps, batch, vocab, classes,
                                                          lengths, 2))
    before = disc_tf.compile_count()
    disc_tf.enable()
    try:
        model = build_model(keras, vocab, d, heads, layers, classes, seed=1)
        disc_losses, disc_times = fit(keras, model, dataset(steps, batch, vocab, classes,
                                                            lengths, 2))
    finally:
        disc_tf.disable()
    compiles = disc_tf.compile_count() - before

    a, b = per_step(plain_losses), per_step(disc_losses)
    worst = float(np.max(np.abs(a - b) / np.maximum(np.abs(a), 1e-6)))
    first = min(len(lengths), steps - 1)  # the first pass over the shapes includes compiles
    steady_p = statistics.median(plain_times[first:] or plain_times)
    steady_d = statistics.median(disc_times[first:] or disc_times)
    print(f"steps {steps}, {len(set(lengths[:steps]))} sequence lengths "
          f"{lengths[0]}..{lengths[min(steps, len(lengths)) - 1]}, batch {batch}, "
          f"model d={d} layers={layers} heads={heads}")
    print(f"loss  tf {a[0]:.4f} -> {a[-1]:.4f}   disc {b[0]:.4f} -> {b[-1]:.4f}   "
          f"max rel diff {worst:.2e} (tolerance {args.tolerance:g})")
    print(f"step time (median after the first pass)  tf {steady_p * 1e3:.1f} ms  "
          f"disc {steady_d * 1e3:.1f} ms  speedup {steady_p / steady_d:.2f}x")
    print(f"first pass incl. tracing/compilation  tf {sum(plain_times[:first]):.2f} s  "
          f"disc {sum(disc_times[:first]):.2f} s")
    print(f"DISC compilations: {compiles}")
    # Keras's train function, with the step (a nested tf.function) traced into it
    step_graphs = [g for g in disc_tf.report().graphs if g.name == "multi_step_on_iterator"]
    if step_graphs:
        g = step_graphs[-1]
        compiled = sum(n.status.value == "compiled" for n in g.nodes)
        print(f"train step: {compiled}/{len(g.nodes)} ops compiled in "
              f"{sum(1 for c in g.clusters if c.calls)} clusters")
    print(summary_line(disc_tf.report().summary()))
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
