"""The processes of test_tf_distribute.py: Keras ``fit`` under tf.distribute, with and
without DISC, on one small regression problem.

``python tf_jobs.py mirrored OUT.json``: one process, two logical CPUs, MirroredStrategy
(Keras ``fit``, the same training as a custom loop, then a convolution / batch norm / Adam
model).
``python tf_jobs.py worker OUT.json``: one worker of a MultiWorkerMirroredStrategy job
(``TF_CONFIG`` names the cluster and this task); a third training there has DISC's
compiler fail on worker 1 only.

Each trains the same model from the same initial weights, first in plain TensorFlow, then
under ``disc_tf.enable()``, and writes the initial weights, each run's per-epoch losses
and final weights, DISC's compile count, how many times it built the DiscLaunch op
library, and the DISC fallback warnings to OUT.json. The
test compares them with a float64 NumPy run of the same training on the whole global
batch and with each other. DISC's coverage report goes where ``DISC_REPORT`` says.

Global batches of 16 over 72 samples: four full batches and one of 8, so each replica
also gets a smaller batch than the one its step was first called with.
"""

from __future__ import annotations

import json
import sys
import warnings

import numpy as np

SAMPLES, FEATURES, HIDDEN = 72, 8, 16
CONV_SAMPLES = 40
GLOBAL_BATCH = 16
EPOCHS = 2
LEARNING_RATE = 0.05


def problem() -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Inputs, targets and initial weights ([kernel1, bias1, kernel2, bias2], Keras's
    order), the same in every process."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((SAMPLES, FEATURES)).astype(np.float32)
    y = (np.sin(x @ rng.standard_normal((FEATURES, 1))) +
         0.1 * rng.standard_normal((SAMPLES, 1))).astype(np.float32)
    weights = [rng.standard_normal((FEATURES, HIDDEN)) / np.sqrt(FEATURES),
               0.1 * rng.standard_normal(HIDDEN),
               rng.standard_normal((HIDDEN, 1)) / np.sqrt(HIDDEN),
               0.1 * rng.standard_normal(1)]
    return x, y, [w.astype(np.float32) for w in weights]


def _model(keras, weights):
    model = keras.Sequential([keras.Input((FEATURES,)),
                              keras.layers.Dense(HIDDEN, activation="tanh"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(LEARNING_RATE), loss="mse")
    model.set_weights(weights)
    return model


def _train(tf, keras, strategy, data, weights, prepare=None) -> dict:
    with strategy.scope():
        model = _model(keras, weights)
    if prepare is not None:
        prepare(model)
    history = model.fit(data, epochs=EPOCHS, verbose=0)
    return {"losses": [float(v) for v in history.history["loss"]],
            "weights": [w.tolist() for w in model.get_weights()]}


def _with_disc(run) -> dict:
    """``run()`` under disc_tf.enable(), with the DISC fallback warnings it raised."""
    import disc_tf
    import disc_tf.custom_op

    before = disc_tf.compile_count()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        disc_tf.enable()
        try:
            out = run()
        finally:
            disc_tf.disable()
    out["compiles"] = disc_tf.compile_count() - before
    out["op_library_builds"] = disc_tf.custom_op.build_count()
    out["fallback_warnings"] = [str(w.message) for w in caught
                                if issubclass(w.category, disc_tf.DiscFallbackWarning)]
    return out


def _custom_loop(tf, strategy, data, weights) -> dict:
    """The same training as a custom loop: ``strategy.run`` of a step that takes its own
    gradients and all-reduces them (``ReplicaContext.all_reduce``), in a tf.function
    called once per batch with the epoch's iterator (a new one each epoch)."""
    with strategy.scope():
        w1, b1, w2, b2 = (tf.Variable(w) for w in weights)
    variables = [w1, b1, w2, b2]
    dist = strategy.experimental_distribute_dataset(data)

    @tf.function
    def train_step(iterator):
        def step(x, y):
            ctx = tf.distribute.get_replica_context()
            global_n = ctx.all_reduce("sum", tf.cast(tf.shape(x)[0], tf.float32))
            with tf.GradientTape() as tape:
                h = tf.tanh(tf.matmul(x, w1) + b1)
                loss = tf.reduce_sum(tf.square(tf.matmul(h, w2) + b2 - y)) / global_n
            grads = ctx.all_reduce("sum", tape.gradient(loss, variables))
            for v, g in zip(variables, grads):
                v.assign_sub(LEARNING_RATE * g)
            return loss * global_n, global_n

        total, n = strategy.run(step, args=next(iterator))
        return (strategy.reduce("SUM", total, axis=None),
                strategy.reduce("MEAN", n, axis=None))

    losses = []
    steps = -(-SAMPLES // GLOBAL_BATCH)
    for _epoch in range(EPOCHS):
        iterator = iter(dist)
        sums = [train_step(iterator) for _ in range(steps)]
        losses.append(float(sum(float(t) for t, _ in sums) / sum(float(n) for _, n in sums)))
    return {"losses": losses, "weights": [v.numpy().tolist() for v in variables]}


def _conv_batchnorm_adam(tf, keras, strategy) -> dict:
    """A second model under MirroredStrategy: convolution, batch norm (its moving
    statistics are per-replica assignments TensorFlow aggregates), Adam, a sparse
    cross-entropy and an accuracy metric. Compared with plain TensorFlow only: the
    convolution has no bias, whose gradient ahead of a batch norm is zero in exact
    arithmetic and which Adam's normalization would turn from round-off into steps."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((CONV_SAMPLES, 8, 8, 3)).astype(np.float32)
    y = rng.integers(0, 4, CONV_SAMPLES).astype(np.int32)
    with strategy.scope():
        keras.utils.set_random_seed(1)
        model = keras.Sequential([
            keras.Input((8, 8, 3)), keras.layers.Conv2D(6, 3, padding="same", use_bias=False),
            keras.layers.BatchNormalization(), keras.layers.ReLU(),
            keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(4)])
        model.compile(optimizer=keras.optimizers.Adam(1e-2),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    history = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=EPOCHS, shuffle=False,
                        verbose=0)
    return {"losses": [float(v) for v in history.history["loss"]],
            "weights": [w.tolist() for w in model.get_weights()]}


def mirrored(out_path: str) -> None:
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras

    x, y, weights = problem()
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    result = {"replicas": strategy.num_replicas_in_sync, "initial": [w.tolist() for w in weights],
              "plain": _train(tf, keras, strategy, data, weights),
              "disc": _with_disc(lambda: _train(tf, keras, strategy, data, weights)),
              "loop_plain": _custom_loop(tf, strategy, data, weights),
              "loop_disc": _with_disc(lambda: _custom_loop(tf, strategy, data, weights)),
              "conv_plain": _conv_batchnorm_adam(tf, keras, strategy),
              "conv_disc": _with_disc(lambda: _conv_batchnorm_adam(tf, keras, strategy))}
    with open(out_path, "w") as f:
        json.dump(result, f)


def _keras_multi_worker_fixes(tf, model) -> None:
    """Two Keras 3 bugs stop ``fit`` under MultiWorkerMirroredStrategy with or without
    DISC (tensorflow/tensorflow#72388; Keras 3.15.1 here):

    * ``_maybe_symbolic_build`` reduces the first (x, y) batch with ``strategy.reduce``,
      which this strategy cannot do for a tuple. The model is built here from one sample
      instead, which is what that build needs.
    * the train step reduces its scalar metrics with ``strategy.reduce("MEAN", v,
      axis=0)``: "Invalid reduction dimension 0 for input with 0 dimensions". They are
      reduced over replicas (``axis=None``) instead.
    """
    from keras.src.backend.tensorflow import trainer

    x, y, _ = problem()
    with model.distribute_strategy.scope():
        model._symbolic_build(data_batch=(x[:1], y[:1]))
    model._maybe_symbolic_build = lambda *args, **kwargs: None
    if getattr(trainer.reduce_per_replica, "_scalar_mean", False):
        return
    original = trainer.reduce_per_replica

    def reduce_per_replica(values, strategy, reduction):
        if reduction in ("auto", "mean") and \
                trainer._collective_all_reduce_multi_worker(strategy):
            return tf.nest.map_structure(
                lambda v: strategy.reduce("MEAN", v, axis=None), values)
        return original(values, strategy, reduction)

    reduce_per_replica._scalar_mean = True
    trainer.reduce_per_replica = reduce_per_replica


def _refuse_compiles() -> None:
    """Make every DISC compilation in this process fail from now on (a rank whose
    compiler breaks: its clusters must fall back to TensorFlow without breaking the job)."""
    import disc_tf.api
    import disc_tf.partition

    def refuse(*args, **kwargs):
        raise RuntimeError("injected compile failure (test)")

    disc_tf.api.compile_cluster = refuse
    disc_tf.partition.compile_cluster = refuse


def worker(out_path: str) -> None:
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    import keras

    x, y, weights = problem()
    options = tf.data.Options()
    # each worker takes its half of every global batch (the single-process batches)
    options.experimental_distribute.auto_shard_policy = \
        tf.data.experimental.AutoShardPolicy.DATA
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).with_options(options)

    def prepare(model):
        _keras_multi_worker_fixes(tf, model)

    result = {"task": strategy.cluster_resolver.task_id,
              "replicas": strategy.num_replicas_in_sync,
              "initial": [w.tolist() for w in weights],
              "plain": _train(tf, keras, strategy, data, weights, prepare),
              "disc": _with_disc(lambda: _train(tf, keras, strategy, data, weights, prepare))}
    # then again with DISC failing to compile on worker 1 only: it runs its step in
    # TensorFlow while worker 0 runs DISC's, and the collectives still pair up
    if result["task"] == 1:
        _refuse_compiles()
    result["mixed"] = _with_disc(lambda: _train(tf, keras, strategy, data, weights, prepare))
    with open(out_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    {"mirrored": mirrored, "worker": worker}[sys.argv[1]](sys.argv[2])
