"""Gradients through a launch op, for tapes recorded around a DISC function.

A train step traced as one tf.function already holds its gradient ops, and DISC clusters
them like any other op. But a DISC function *called* under an eager ``tf.GradientTape``
(``with tape: logits = forward(x)``, ``forward`` a tf.function) asks TensorFlow for the
gradient of each op in the rewritten function, launch ops included, which have no
gradient of their own. Every launch node is therefore marked (``_gradient_op_type``) for the
gradient function below, which imports the cluster's original ops into the backward graph
and differentiates them with TensorFlow's own gradients. The backward pass then recomputes
the cluster's forward in TensorFlow: correct, not fast (a train step traced whole is both).
"""

from __future__ import annotations

import itertools
import threading

import tensorflow as tf
from tensorflow.core.framework import graph_pb2, node_def_pb2

__all__ = ["GRADIENT_OP_TYPE", "KEY_ATTR", "mark_differentiable"]

#: the gradient registry name every launch node points at
GRADIENT_OP_TYPE = "DiscLaunchFallbackGrad"
#: the launch node attr naming its entry in :data:`_subgraphs`
KEY_ATTR = "_disc_fallback_key"

_keys = itertools.count()
_lock = threading.Lock()
# key -> (the cluster's ops fed by placeholders, placeholder tensor names, output names)
_subgraphs: dict[str, tuple[graph_pb2.GraphDef, list[str], list[str]]] = {}


def mark_differentiable(node: node_def_pb2.NodeDef, sub: graph_pb2.GraphDef,
                        feeds: list[str], outputs: list[str]) -> None:
    """Give the launch ``node`` the gradient of the subgraph ``sub`` (its original ops)."""
    with _lock:
        key = f"disc_fallback_{next(_keys)}"
        _subgraphs[key] = (sub, list(feeds), list(outputs))
    node.attr["_gradient_op_type"].s = GRADIENT_OP_TYPE.encode()
    node.attr[KEY_ATTR].s = key.encode()


def _differentiable(dtype: tf.DType) -> bool:
    return dtype.is_floating or dtype.is_complex


@tf.RegisterGradient(GRADIENT_OP_TYPE)
def _launch_gradient(op: tf.Operation, *out_grads: tf.Tensor | None) -> list[tf.Tensor | None]:
    key = op.get_attr(KEY_ATTR).decode()
    with _lock:
        entry = _subgraphs.get(key)
    if entry is None:  # a graph from another process (e.g. a loaded SavedModel)
        raise LookupError(f"DISC launch {op.name}: its original ops are not known in this "
                          f"process, so it has no gradient (key {key})")
    sub, feeds, outputs = entry
    # identities in the backward graph: the inputs as captured there, to differentiate by
    xs = [tf.identity(x) for x in op.inputs]
    ys = tf.graph_util.import_graph_def(sub, input_map=dict(zip(feeds, xs)),
                                        return_elements=outputs, name=f"{op.name}_grad")
    pairs = [(y, g) for y, g in zip(ys, out_grads) if g is not None and _differentiable(y.dtype)]
    wrt = [i for i, x in enumerate(xs) if _differentiable(x.dtype)]
    result: list[tf.Tensor | None] = [None] * len(xs)
    if pairs and wrt:
        grads = tf.gradients([y for y, _ in pairs], [xs[i] for i in wrt],
                             grad_ys=[g for _, g in pairs])
        for i, g in zip(wrt, grads):
            result[i] = g
    return result
