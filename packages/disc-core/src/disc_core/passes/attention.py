"""Recognize unfused attention in any bridge's core graph and use the fused op.

The pattern, as the bridges' converters and decompositions spell it::

    S = dot_general(Q, K)             batched, contracting the head dim (K may come
                                      transposed); its batch dims may be reshaped
    S = S * c | S / c                 any number of constant scalings (or none: a scale
                                      folded into Q before the dot stays there)
    S = S + M | select(C, -inf, S)    additive masks and -inf fills (masked_fill, where),
        | select(C, S, -inf)          broadcast from smaller tensors
    P = softmax(S) along the keys     max, sub, exp, sum, div
    O = dot_general(P, V)             batched, contracting the keys (V may be transposed)

becomes ``attention(Q, K, V, mask)`` with the scalings as its ``scale``: the [.., Sq, Sk]
scores are no longer written to memory. A condition that provably masks the keys after
each query row (comparisons of iotas over the last two dims: what ``tril`` and ``j > i``
trace to, a ``band_part`` of a boolean tensor's ``select(c, true, false)`` included)
becomes ``causal``, which skips those blocks; such a condition may fill with a large
finite value instead of -inf (Keras's ``-0.7 * max``, ``-1e9``: :data:`FINITE_FILL_LIMIT`),
as every row keeps at least its first key. Other masks are passed at the
size they were broadcast from (an [S, S] condition becomes a [1, 1, S, S] additive
mask), several added together. It fires only where every intermediate (scores,
probabilities, the softmax's statistics) has no use outside the pattern: a training
graph that saves the probabilities for its backward keeps them. A finite fill
of any other condition (``masked_fill(-1e9)`` of a padding mask) is not matched: it
replaces scores, which an additive mask only approximates where a whole row is masked.
A row whose scores are all -inf stays NaN (``empty_rows="nan"``), as the unfused
softmax computes it.

``DISC_FUSED_ATTENTION=0`` turns the pass off (for comparisons).

``attention-layout`` (:class:`FoldAttentionLayout`) then folds the transposes around the
fused ops into their ``seq_major`` layout: a head tensor that reaches attention as
``transpose(x)`` swapping the sequence and head dims (the [B, S, H, D] -> [B, H, S, D] of
a projection split into heads) is read from ``x`` in place, and a result whose every use
is that transpose back is written in the [B, S, H, D] order its users want. What a
transformer spends on materializing those permutes (three for Q, K, V, one for the
output, four more in the backward) goes; the transposes stay where something else
(a graph output: a tensor saved for the backward) still reads them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..dtypes import DType
from ..ir import Graph, Op, Value
from ..opdef import Rewriter, get_op
from ..ops.attention import ATTENTION_DTYPES
from ..options import CORE_OPTIONS
from ..symbolic import Expr
from .base import Pass
from .rewrite import rewrite_ops

__all__ = ["FoldAttentionLayout", "FuseAttention"]


def _prod(v: Value, name: str) -> Op | None:
    p = v.producer
    return p if p is not None and p.name == name else None


def _scalar(v: Value) -> float | None:
    """The value of a scalar constant, or of a broadcast of one."""
    p = v.producer
    if p is not None and p.name == "broadcast_in_dim" and p.operands[0].rank == 0:
        p = p.operands[0].producer
    if p is not None and p.opdef.has_trait("constant") and p.results[0].rank == 0:
        return float(p.attrs["value"].array.item())
    return None


def _last_axis_reduce(v: Value, kind: str, src: Value) -> bool:
    """``v`` is broadcast_in_dim(reduce(src, kind, last axis)) back over that axis."""
    b = _prod(v, "broadcast_in_dim")
    if b is None:
        return False
    r = _prod(b.operands[0], "reduce")
    rank = src.rank
    return (r is not None and r.operands[0] is src and r.attrs["kind"] == kind
            and list(r.attrs["axes"]) == [rank - 1]
            and list(b.attrs["broadcast_dimensions"]) == list(range(rank - 1)))


def _batch_reshape(v: Value) -> Value | None:
    """The operand of a reshape that only regroups the batch dims (same last two)."""
    r = _prod(v, "reshape")
    if r is None:
        return None
    src = r.operands[0]
    if src.rank >= 2 and v.rank >= 2 and tuple(src.shape[-2:]) == tuple(v.shape[-2:]):
        return src
    return None


@dataclass
class _Match:
    q: Value
    q_t: bool  # q is [b, D, Sq]
    k: Value
    k_t: bool  # k is [b, D, Sk] (as Q Kᵀ's rhs usually is)
    v: Value
    v_t: bool  # v is [b, Dv, Sk]
    scores: Value  # the softmax's input, [bx..., Sq, Sk]
    scale: float
    masks: list[tuple[str, Value, float]] = field(default_factory=list)
    internal: list[Value] = field(default_factory=list)  # must have no outside use


class FuseAttention(Pass):
    name = "fuse-attention"

    def run(self, graph: Graph) -> bool:
        if not CORE_OPTIONS.value("fused_attention"):
            return False
        users = graph.users()
        outputs = {id(v) for v in graph.outputs}

        def rewrite(op: Op, rw: Rewriter) -> Value | None:
            if op.name != "dot_general":
                return None
            m = _match(op, users, outputs)
            if m is None:
                return None
            return _build(op, m, rw)

        return rewrite_ops(graph, rewrite)


def _swaps_seq_heads(t: Op) -> bool:
    """``t`` is a transpose exchanging the two dims before the last (and nothing else)."""
    r = t.results[0].rank
    return r >= 3 and list(t.attrs["permutation"]) == [*range(r - 3), r - 2, r - 3, r - 1]


class FoldAttentionLayout(Pass):
    """Fold head transposes into ``attention`` / ``attention_grad`` (``seq_major``)."""

    name = "attention-layout"

    def run(self, graph: Graph) -> bool:
        users = graph.users()
        outputs = {id(v) for v in graph.outputs}
        replace: dict[int, Value] = {}
        dropped: set[int] = set()
        new_ops: list[Op] = []
        for op in graph.ops:
            if id(op) in dropped:
                continue
            op.operands = [replace.get(id(v), v) for v in op.operands]
            new = self._fold(op, users, outputs, replace, dropped)
            new_ops.append(new or op)
        graph.ops = new_ops
        graph.outputs = [replace.get(id(v), v) for v in graph.outputs]
        return bool(replace)

    @staticmethod
    def _fold(op: Op, users: dict[Value, list[Op]], outputs: set[int],
              replace: dict[int, Value], dropped: set[int]) -> Op | None:
        """The op with what it can fold folded (recording the replaced values and the
        transposes to drop), or None when nothing folds."""
        if op.name not in ("attention", "attention_grad"):
            return None
        # head operands, then head results, in FWD_TENSORS / GRAD_TENSORS order
        n_in, n_out = (3, 1) if op.name == "attention" else (5, 3)
        before = set(op.attrs["seq_major"])
        sm = set(before)
        operands = list(op.operands)
        for i in range(n_in):
            t = operands[i].producer
            if i not in sm and t is not None and t.name == "transpose" and _swaps_seq_heads(t):
                operands[i] = t.operands[0]
                sm.add(i)
        folded: dict[int, list[Op]] = {}
        for j in range(n_out):
            r = op.results[j]
            uses = users.get(r, [])
            if (n_in + j not in sm and id(r) not in outputs and uses
                    and all(u.name == "transpose" and _swaps_seq_heads(u) for u in uses)):
                sm.add(n_in + j)
                folded[j] = uses
        if sm == before:
            return None
        new = get_op(op.name).build(operands, {**op.attrs, "seq_major": tuple(sorted(sm))})
        if any(u.results[0].type != new.results[j].type
               for j, uses in folded.items() for u in uses):
            return None  # not expected (the swap is its own inverse): keep the op
        for j, r in enumerate(op.results):
            if j in folded:
                for u in folded[j]:
                    replace[id(u.results[0])] = new.results[j]
                    dropped.add(id(u))
            else:
                replace[id(r)] = new.results[j]
        return new


def _dot_sides(op: Op) -> tuple[int, int, int] | None:
    """(batch rank, lhs contract position, rhs contract position) of a batched matmul:
    both operands [batch..., x, y], batch dims leading in order, one contracted dim each
    among the last two."""
    a = op.attrs
    lhs, rhs = op.operands
    nb = len(a["lhs_batch"])
    if (list(a["lhs_batch"]) != list(range(nb)) or list(a["rhs_batch"]) != list(range(nb))
            or lhs.rank != nb + 2 or rhs.rank != nb + 2 or len(a["lhs_contract"]) != 1):
        return None
    return nb, a["lhs_contract"][0] - nb, a["rhs_contract"][0] - nb


def _match(pv: Op, users: dict[Value, list[Op]], outputs: set[int]) -> _Match | None:
    sides = _dot_sides(pv)
    if sides is None or pv.operands[0].dtype not in ATTENTION_DTYPES:
        return None
    _, pc, vc = sides
    if pc != 1:  # P's keys must be contracted
        return None
    p, v = pv.operands
    internal = [p]
    p0 = _batch_reshape(p) or p
    if p0 is not p:
        internal.append(p0)
    div = _prod(p0, "div")
    if div is None:
        return None
    e, bsum = div.operands
    ex = _prod(e, "exp")
    if ex is None or not _last_axis_reduce(bsum, "sum", e):
        return None
    sub = _prod(ex.operands[0], "sub")
    if sub is None:
        return None
    x, bmax = sub.operands
    if not _last_axis_reduce(bmax, "max", x):
        return None
    internal += [e, bsum, bsum.producer.operands[0], ex.operands[0], bmax,
                 bmax.producer.operands[0]]
    # the scores: masks and scalings around Q Kᵀ, peeled from the outside
    masks: list[tuple[str, Value, float]] = []  # (kind, value, scalings outside it)
    scale = 1.0
    y = x
    while True:
        op = y.producer
        if op is None:
            return None
        if op.name == "dot_general":
            break
        internal.append(y)
        if op.name == "reshape":
            src = _batch_reshape(y)
            if src is None or _prod(src, "dot_general") is None:
                return None
            y = src
            continue
        if op.name == "select":
            c, t, f = op.operands
            ft, ff = _scalar(t), _scalar(f)
            if ft == -math.inf:
                masks.append(("fill", c, scale))
                y = f
            elif ff == -math.inf:
                masks.append(("keep", c, scale))
                y = t
            elif _drowns(ft, scale):
                masks.append(("fill_finite", c, scale))
                y = f
            elif _drowns(ff, scale):
                masks.append(("keep_finite", c, scale))
                y = t
            else:
                return None
        elif op.name == "add":
            a, b = op.operands
            side = [_is_mask_like(u) for u in (a, b)]
            if side == [False, True]:
                masks.append(("add", b, scale))
                y = a
            elif side == [True, False]:
                masks.append(("add", a, scale))
                y = b
            else:
                return None
        elif op.name in ("mul", "div"):
            a, b = op.operands
            cb = _scalar(b)
            ca = _scalar(a) if op.name == "mul" else None
            c_, rest = (cb, a) if cb is not None else (ca, b)
            if c_ is None or not c_ > 0 or not math.isfinite(c_):
                return None
            scale *= c_ if op.name == "mul" else 1.0 / c_
            y = rest
        else:
            return None
    qk = y.producer
    assert qk is not None
    qk_sides = _dot_sides(qk)
    if qk_sides is None:
        return None
    _, qc, kc = qk_sides
    internal.append(y)
    q, k = qk.operands
    # a mask found under outer scalings was scaled with everything inside them: x holds
    # ``under * mask`` (the factor each mask term keeps)
    if not _private(internal, pv, users, outputs):
        return None
    # a finite fill stands for -inf only where no row is masked whole: a causal condition
    # alone (row i keeps key 0), with no other mask term that could mask a row's rest
    if any(kind.endswith("_finite") for kind, _, _ in masks) and not all(
            _is_causal(kind, c) for kind, c, _ in masks):
        return None
    return _Match(q=q, q_t=qc == 0, k=k, k_t=kc == 0, v=v, v_t=vc == 1, scores=x,
                  scale=scale, masks=masks, internal=internal)


#: a finite fill at or below this (after the scalings outside it) masks like -inf: Keras
#: fills with -0.7 * the dtype's max or -1e9, ``masked_fill(-1e9)`` is common. The unfused
#: softmax gives such a key exp(fill - row max), exactly 0 in float32 and float64 unless
#: the row's largest kept score is within ~745 of the fill (below about -1e9), where the
#: framework's own mask no longer masks either.
FINITE_FILL_LIMIT = -1e9


def _drowns(fill: float | None, scale: float) -> bool:
    """``fill`` (a select's constant branch, under ``scale``) masks like -inf."""
    return fill is not None and math.isfinite(fill) and fill * scale <= FINITE_FILL_LIMIT


def _is_mask_like(v: Value) -> bool:
    """An additive mask term: not computed from the scores (an input, a broadcast, or a
    value whose producer is not the score chain's kind of op)."""
    p = v.producer
    return p is None or p.name in ("broadcast_in_dim", "constant", "convert", "select",
                                   "reshape") and not _reaches_dot(v, 4)


def _reaches_dot(v: Value, depth: int) -> bool:
    p = v.producer
    if p is None or depth == 0:
        return False
    if p.name == "dot_general":
        return True
    return any(_reaches_dot(o, depth - 1) for o in p.operands)


def _private(internal: list[Value], pv: Op, users: dict[Value, list[Op]],
             outputs: set[int]) -> bool:
    """Every intermediate is read only inside the pattern (by its ops or by the final
    product ``pv``); a graph output is a use outside."""
    inside = {id(v.producer) for v in internal if v.producer is not None} | {id(pv)}
    return all(id(v) not in outputs and all(id(u) in inside for u in users.get(v, []))
               for v in internal)


def _arrange(v: Value, transposed: bool, batch: tuple[Expr, ...], rw: Rewriter) -> Value:
    """``v`` as [batch..., rows, cols] (transposing its last two dims if asked). A reshape
    that merged the batch dims is looked through, so the transpose meets the one that
    made ``v`` (K's ``permute``) and the two fold into one."""
    src = _batch_reshape(v)
    if src is not None and tuple(src.shape[:-2]) == batch:
        v = src
    if transposed:
        perm = list(range(v.rank - 2)) + [v.rank - 1, v.rank - 2]
        v = rw.op("transpose", v, permutation=perm)
    if tuple(v.shape[:-2]) != batch:
        v = rw.op("reshape", v, shape=[*batch, *v.shape[-2:]])
    return v


def _const(rw: Rewriter, value: float, dt: DType) -> Value:
    return rw.op("constant", value=np.asarray(value, dtype=dt.np))


def _mask_value(kind: str, val: Value, factor: float, target: tuple[Expr, ...],
                dt: DType, rw: Rewriter) -> Value:
    """A mask term as an additive mask of the scores' rank at the size it was broadcast
    from (dims 1 where it broadcasts)."""
    src = val
    b = _prod(val, "broadcast_in_dim")
    dims: list[int] = list(range(val.rank))
    if b is not None and list(b.attrs["broadcast_dimensions"]) == sorted(
            b.attrs["broadcast_dimensions"]):
        src, dims = b.operands[0], list(b.attrs["broadcast_dimensions"])
    shape = [Expr.const(1)] * len(target)
    for j, d in enumerate(dims):
        shape[d] = src.shape[j]
    if kind == "add":
        m = src
        if m.dtype != dt:
            m = rw.op("convert", m, dtype=dt)
        if factor != 1.0:
            c = rw.op("broadcast_in_dim", _const(rw, factor, dt),
                      shape=list(m.shape), broadcast_dimensions=[])
            m = rw.op("mul", m, c)
    else:
        zero = rw.op("broadcast_in_dim", _const(rw, 0.0, dt),
                     shape=list(src.shape), broadcast_dimensions=[])
        ninf = rw.op("broadcast_in_dim", _const(rw, -math.inf, dt),
                     shape=list(src.shape), broadcast_dimensions=[])
        m = rw.op("select", src, ninf, zero) if kind == "fill" else rw.op(
            "select", src, zero, ninf)
    if tuple(m.shape) != tuple(shape):
        m = rw.op("reshape", m, shape=shape)
    return m


# -- causal masks: conditions that are provably "key j after query i" --------------------

Lin = tuple[int, int, int]  # a*i + b*j + c over the query index i and key index j


def _lin(v: Value, dims: list[int], rank: int, depth: int = 8) -> Lin | None:
    """``v`` as an integer linear function of the score's last two indices (``dims``: the
    score dim each of ``v``'s dims follows), or None."""
    p = v.producer
    if p is None or depth == 0 or not v.dtype.is_int:
        return None
    c = _scalar(v)
    if c is not None:
        return (0, 0, int(c)) if float(c).is_integer() else None
    if p.name == "broadcast_in_dim":
        return _lin(p.operands[0], [dims[d] for d in p.attrs["broadcast_dimensions"]], rank,
                    depth - 1)
    if p.name == "iota":
        d = dims[p.attrs["dimension"]]
        return (1, 0, 0) if d == rank - 2 else (0, 1, 0) if d == rank - 1 else None
    if p.name in ("add", "sub"):
        a, b = (_lin(o, dims, rank, depth - 1) for o in p.operands)
        if a is None or b is None:
            return None
        sign = 1 if p.name == "add" else -1
        return (a[0] + sign * b[0], a[1] + sign * b[1], a[2] + sign * b[2])
    return None


def _pred(v: Value, dims: list[int], rank: int, depth: int = 8) -> Lin | None:
    """A boolean ``v`` as the integer inequality ``a*i + b*j + c >= 0``, or None."""
    p = v.producer
    if p is None or depth == 0:
        return None
    if p.name == "broadcast_in_dim":
        return _pred(p.operands[0], [dims[d] for d in p.attrs["broadcast_dimensions"]], rank,
                     depth - 1)
    if p.name == "not":
        inner = _pred(p.operands[0], dims, rank, depth - 1)
        return None if inner is None else (-inner[0], -inner[1], -inner[2] - 1)
    if p.name == "select":  # select(c, true, false) is c (band_part of a bool tensor)
        c, t, f = p.operands
        bt, bf = _scalar(t), _scalar(f)
        if not t.dtype.is_bool or bt is None or bf is None or bool(bt) == bool(bf):
            return None
        inner = _pred(c, dims, rank, depth - 1)
        if inner is None or bool(bt):
            return inner
        return (-inner[0], -inner[1], -inner[2] - 1)
    if p.name == "compare":
        a, b = (_lin(o, dims, rank) for o in p.operands)
        if a is None or b is None:
            return None
        d = (a[0] - b[0], a[1] - b[1], a[2] - b[2])
        neg = (-d[0], -d[1], -d[2])
        return {"ge": d, "gt": (d[0], d[1], d[2] - 1), "le": neg,
                "lt": (neg[0], neg[1], neg[2] - 1)}.get(p.attrs["direction"])
    return None


def _is_causal(kind: str, cond: Value) -> bool:
    """The mask term masks exactly the keys after each query row (j > i)."""
    if kind == "add":
        return False
    pred = _pred(cond, list(range(cond.rank)), cond.rank)
    # fill where j - i - 1 >= 0; keep where i - j >= 0 (a finite fill alike, see _drowns)
    return pred == ((-1, 1, -1) if kind.startswith("fill") else (1, -1, 0))


def _build_inputs(m: _Match, rw: Rewriter) -> list[Value]:
    """The fused op's operands for a match: Q, K, V as [batch..., S, D] and the additive
    mask (if any) of the non-causal mask terms (also the gradient's, see
    attention_training)."""
    x = m.scores
    batch = tuple(x.shape[:-2])
    q = _arrange(m.q, m.q_t, batch, rw)
    k = _arrange(m.k, m.k_t, batch, rw)
    v = _arrange(m.v, m.v_t, batch, rw)
    dt = x.dtype
    masks = [_mask_value(kind, val, f, tuple(x.shape), dt, rw) for kind, val, f in m.masks
             if not _is_causal(kind, val)]
    mask = None
    if masks:
        union = [Expr.const(1)] * x.rank
        for mk in masks:
            for d, dim in enumerate(mk.shape):
                if not (dim.is_const and dim.value == 1):
                    union[d] = x.shape[d]
        for mk in masks:
            if tuple(mk.shape) != tuple(union):
                mk = rw.op("broadcast_in_dim", mk, shape=union,
                           broadcast_dimensions=list(range(x.rank)))
            mask = mk if mask is None else rw.op("add", mask, mk)
    return [q, k, v] + ([] if mask is None else [mask])


def is_causal_match(m: _Match) -> bool:
    """Whether a mask term of the match is the causal condition (the ``causal`` flag)."""
    return any(_is_causal(kind, val) for kind, val, _ in m.masks)


def _build(pv: Op, m: _Match, rw: Rewriter) -> Value:
    operands = _build_inputs(m, rw)
    out = rw.op("attention", *operands, scale=m.scale, causal=is_causal_match(m),
                empty_rows="nan")
    want = pv.results[0].shape
    if tuple(out.shape) != tuple(want):
        out = rw.op("reshape", out, shape=list(want))
    return out
