"""Recognize unfused attention *and its gradient* in a training graph and use the fused
``attention`` / ``attention_grad`` pair.

``fuse-attention`` fuses a forward only where its probabilities P have no other use; in a
training graph the backward reads P, so that pass leaves it. A framework's autodiff of the
same forward (TF's gradients of einsums/BatchMatMuls and Softmax, a Paddle or JAX
backward) spells the backward, on the core graph, as::

    dP  = dot_general(dO, V)                 contracting the value dim: [b..., Sq, Sk]
    dV  = dot_general(P, dO)                 contracting the queries:   [b..., Sk, Dv]
    dS  = (dP - rowsum(dP * P)) * P * c...   softmax's gradient, then the forward's
                                             constant scalings (chain rule)
    dQ  = dot_general(dS, K)                 contracting the keys:      [b..., Sq, D]
    dK  = dot_general(dS, Q)                 contracting the queries:   [b..., Sk, D]

with Q, K, V the very values (after CSE) the forward multiplied. When the forward matches
``fuse-attention``'s pattern with P read only by it and by these ops, and every
intermediate of the backward is read only inside the pattern, the forward becomes
``attention`` (its output and logsumexp) and dQ, dK, dV the results of one
``attention_grad``: neither pass writes the [b..., Sq, Sk] scores or probabilities. The
masks are the forward's (additive, -inf fills, causal conditions) and are not
differentiated: a mask whose gradient the graph takes reads dS elsewhere, so it does not
match. The gradient of a select mask (``select(c, dS, 0)``, TF's SelectV2 gradient) may
sit in dS's chain: it zeroes dS where P is already 0, so it goes with the pattern. Rows
masked whole give NaN forward as before and zero gradients (the unfused backward gives
NaN there, after a NaN loss).

``DISC_FUSED_ATTENTION=0`` turns this pass off with the forward one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir import Graph, Op, Value
from ..opdef import Rewriter, get_op
from ..options import CORE_OPTIONS
from .attention import _arrange, _build_inputs, _dot_sides, _Match, _match, _scalar, is_causal_match
from .base import Pass

__all__ = ["FuseAttentionTraining"]


@dataclass
class _Backward:
    dp: Op  # dot_general(dO, V)
    dv: Op  # dot_general(P, dO)
    dq: Op  # dot_general(dS, K)
    dk: Op  # dot_general(dS, Q)
    d_out: Value
    d_out_t: bool  # dO is [b, Dv, Sq]
    ops: list[Op]  # every op of the backward pattern (the three results' dots included)
    scale: float  # the constant scalings of dS
    #: the gradients of the forward's select masks in dS's chain: (kind, condition),
    #: ``select(c, dS, 0)`` for a kept condition, ``select(c, 0, dS)`` for a filled one
    mask_grads: list[tuple[str, Value]]


def _single_user(v: Value, users: dict[Value, list[Op]], outputs: set[int]) -> Op | None:
    us = users.get(v, [])
    return us[0] if len(us) == 1 and id(v) not in outputs else None


def _other(op: Op, v: Value) -> Value | None:
    """The operand of a binary op that is not ``v`` (None when both are, or neither)."""
    a, b = op.operands
    if a is v and b is not v:
        return b
    if b is v and a is not v:
        return a
    return None


def _backward(p: Value, pv: Op, users: dict[Value, list[Op]], outputs: set[int]
              ) -> _Backward | None:
    """The softmax-attention backward reading ``p`` (see the module docstring)."""
    others = [u for u in users.get(p, []) if u is not pv]
    if id(p) in outputs or len(others) != 3:
        return None
    dv = next((u for u in others if u.name == "dot_general"), None)
    muls = [u for u in others if u.name == "mul"]
    if dv is None or len(muls) != 2 or dv.operands[0] is not p:
        return None
    sides = _dot_sides(dv)
    if sides is None or sides[1] != 0:  # P contracted over its queries
        return None
    d_out = dv.operands[1]
    d_out_t = sides[2] == 1  # dO [b, Dv, Sq] contracted over its last dim
    # mul(dP, P) -> rowsum -> broadcast back; sub(dP, that); mul(sub, P)
    first = second = None
    for m in muls:
        other = _other(m, p)
        if other is None:
            return None
        if other.producer is not None and other.producer.name == "sub":
            second = m
        else:
            first = m
    if first is None or second is None:
        return None
    dp_v = _other(first, p)
    sub = _other(second, p).producer  # type: ignore[union-attr]
    if dp_v is None or sub is None or sub.operands[0] is not dp_v:
        return None
    dp = dp_v.producer
    if dp is None or dp.name != "dot_general" or sorted(
            id(u) for u in users.get(dp_v, [])) != sorted([id(first), id(sub)]):
        return None
    bcast = sub.operands[1]
    chain: list[Op] = []
    b = bcast.producer
    if b is None or b.name != "broadcast_in_dim":
        return None
    # the rowsum may come back through reshapes ([.., S] -> [.., S, 1] -> [.., S])
    inner = b.operands[0]
    while inner.producer is not None and inner.producer.name == "reshape":
        chain.append(inner.producer)
        inner = inner.producer.operands[0]
    red = inner.producer
    if red is None or red.name != "reduce" or red.operands[0] is not first.results[0]:
        return None
    # a chain of reshapes from [b..., Sq] back to [b..., Sq] is the identity
    if not (red.attrs["kind"] == "sum" and list(red.attrs["axes"]) == [p.rank - 1]
            and list(b.attrs["broadcast_dimensions"]) == list(range(p.rank - 1))
            and tuple(inner.shape) == tuple(p.shape[:-1])):
        return None
    # dS: the scalings after the softmax gradient
    ds = second.results[0]
    scale_ops: list[Op] = []
    scale = 1.0
    mask_grads: list[tuple[str, Value]] = []
    while True:
        us = users.get(ds, [])
        if id(ds) in outputs:
            return None
        if len(us) == 1 and us[0].name == "select":  # a select mask's gradient
            op = us[0]
            c, t, f = op.operands
            if t is ds and f is not ds and _scalar(f) == 0.0:
                mask_grads.append(("keep", c))
            elif f is ds and t is not ds and _scalar(t) == 0.0:
                mask_grads.append(("fill", c))
            else:
                return None
            scale_ops.append(op)
            ds = op.results[0]
            continue
        if len(us) == 1 and us[0].name in ("mul", "div"):
            op = us[0]
            c = _scalar(op.operands[1]) if op.operands[0] is ds else (
                _scalar(op.operands[0]) if op.name == "mul" else None)
            if c is None or not c > 0 or not math.isfinite(c):
                return None
            scale *= c if op.name == "mul" else 1.0 / c
            scale_ops.append(op)
            ds = op.results[0]
            continue
        break
    us = users.get(ds, [])
    if len(us) != 2 or not all(u.name == "dot_general" and u.operands[0] is ds for u in us):
        return None
    dq = dk = None
    for u in us:
        s = _dot_sides(u)
        if s is None:
            return None
        if s[1] == 1:
            dq = u
        elif s[1] == 0:
            dk = u
    if dq is None or dk is None:
        return None
    pattern = [dp, dv, first, red, *chain, b, sub, second, *scale_ops, dq, dk]
    # internal values: read only inside the pattern
    inside = {id(o) for o in pattern}
    for o in [dp, first, red, *chain, b, sub, second, *scale_ops]:
        for r in o.results:
            if id(r) in outputs or any(id(u) not in inside for u in users.get(r, [])):
                return None
    return _Backward(dp, dv, dq, dk, d_out, d_out_t, pattern, scale, mask_grads)


def _consistent(m: _Match, bwd: _Backward) -> bool:
    """The backward multiplies the forward's own Q, K, V and dO, in the orientations the
    gradient of this forward has."""
    dp_sides = _dot_sides(bwd.dp)
    dq_sides = _dot_sides(bwd.dq)
    dk_sides = _dot_sides(bwd.dk)
    if dp_sides is None or dq_sides is None or dk_sides is None:
        return False
    # dP = dO Vᵀ: dO's value dim and V's value dim contracted
    if bwd.dp.operands[0] is not bwd.d_out or bwd.dp.operands[1] is not m.v:
        return False
    if dp_sides[1] != (0 if bwd.d_out_t else 1) or dp_sides[2] != (0 if m.v_t else 1):
        return False
    # dQ = dS K: K's key dim contracted; dK = dSᵀ Q: Q's query dim contracted
    if bwd.dq.operands[1] is not m.k or dq_sides[2] != (1 if m.k_t else 0):
        return False
    if bwd.dk.operands[1] is not m.q or dk_sides[2] != (1 if m.q_t else 0):
        return False
    # a select in dS's chain zeroes the scores' gradient where the forward masked them,
    # where P, and so dS, is already 0: it must be one of the forward's own select masks
    selects = {(kind.split("_")[0], id(c)) for kind, c, _ in m.masks if kind != "add"}
    if any((kind, id(c)) not in selects for kind, c in bwd.mask_grads):
        return False
    return math.isclose(bwd.scale, m.scale, rel_tol=1e-6)


class FuseAttentionTraining(Pass):
    name = "fuse-attention-training"

    def run(self, graph: Graph) -> bool:
        if not CORE_OPTIONS.value("fused_attention"):
            return False
        users = graph.users()
        outputs = {id(v) for v in graph.outputs}
        position = {id(op): i for i, op in enumerate(graph.ops)}
        found: list[tuple[Op, _Match, _Backward]] = []
        for op in graph.ops:
            if op.name != "dot_general" or op.operands[0].producer is None:
                continue
            p = op.operands[0]
            bwd = _backward(p, op, users, outputs)
            if bwd is None:
                continue
            filtered = {**users, p: [op]}
            m = _match(op, filtered, outputs)
            if m is None or m.scores.rank != p.rank or not _consistent(m, bwd):
                continue
            if position[id(op)] > min(position[id(bwd.dp)], position[id(bwd.dv)]):
                continue  # the gradient is placed before dP / dV, after the forward
            found.append((op, m, bwd))
        if not found:
            return False
        return _rewrite(graph, found)


def _rewrite(graph: Graph, found: list[tuple[Op, _Match, _Backward]]) -> bool:
    fwd_of = {id(pv): (m, bwd) for pv, m, bwd in found}
    position = {id(op): i for i, op in enumerate(graph.ops)}
    first_bwd = {}
    for pv, m, bwd in found:
        start = min((bwd.dp, bwd.dv), key=lambda o: position[id(o)])
        first_bwd[id(start)] = (pv, m, bwd)
    state: dict[int, tuple[list[Value], Value, Value]] = {}  # pv -> (q k v mask, out, lse)
    results: dict[int, Value] = {}  # dq / dk / dv op -> its replacement
    replace: dict[int, Value] = {}
    new_ops: list[Op] = []
    for op in graph.ops:
        op.operands = [replace.get(id(v), v) for v in op.operands]
        if id(op) in first_bwd:
            pv, m, bwd = first_bwd[id(op)]
            operands, out, lse = state[id(pv)]
            rw = Rewriter()
            batch = tuple(m.scores.shape[:-2])
            d_out = _arrange(replace.get(id(bwd.d_out), bwd.d_out), bwd.d_out_t, batch, rw)
            q, k, v, *mask = operands
            grad = get_op("attention_grad").build(
                [q, k, v, out, d_out, lse, *mask],
                {"scale": m.scale, "causal": is_causal_match(m)})
            rw.created.append(grad)
            new_ops.extend(rw.created)
            for dot, r in zip((bwd.dq, bwd.dk, bwd.dv), grad.results):
                results[id(dot)] = r
        if id(op) in fwd_of:
            m, bwd = fwd_of[id(op)]
            rw = Rewriter()
            m.q, m.k, m.v = (replace.get(id(t), t) for t in (m.q, m.k, m.v))
            m.masks = [(kind, replace.get(id(t), t), f) for kind, t, f in m.masks]
            operands = _build_inputs(m, rw)
            fwd = get_op("attention").build(operands, {"scale": m.scale,
                                                       "causal": is_causal_match(m),
                                                       "empty_rows": "nan"})
            rw.created.append(fwd)
            out = fwd.results[0]
            want = op.results[0].shape
            if tuple(out.shape) != tuple(want):
                out = rw.op("reshape", out, shape=list(want))
            new_ops.extend(rw.created)
            state[id(op)] = (operands, fwd.results[0], fwd.results[1])
            replace[id(op.results[0])] = out
            continue
        if id(op) in results:
            r = results[id(op)]
            want = op.results[0].shape
            if tuple(r.shape) != tuple(want):
                rw = Rewriter()
                r = rw.op("reshape", r, shape=list(want))
                new_ops.extend(rw.created)
            replace[id(op.results[0])] = r
            continue
        new_ops.append(op)
    graph.ops = new_ops
    graph.outputs = [replace.get(id(v), v) for v in graph.outputs]
    return True
