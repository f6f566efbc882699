"""Move reshapes that only regroup leading dims out of the way of fusion.

Frameworks run a linear layer on [B, S, K] activations as a 2-D GEMM: the input is viewed
as [B*S, K], the GEMM and its bias add run on [B*S, N], and the result is viewed back as
[B, S, N]. Those views are free, but each splits the kernels around it: the bias add runs
over [B*S, N] and cannot join the activation or residual that follows over [B, S, N], and
the backward pass's weight gradient reads two flattened views. Here the reshapes move:

* ``dot(reshape(u), w)`` with the merged dim free becomes ``reshape(dot(u, w))``: BLAS
  takes u's leading dims as its M as they are;
* ``dot(reshape(a), reshape(b))`` contracting the merged dim of both (a weight gradient)
  contracts a's and b's leading dims directly;
* ``e(reshape(u), broadcast(bias))``, elementwise, becomes ``reshape(e(u, broadcast(bias)))``
  on u's shape: the view moves on towards the consumers, and cancels against the view
  back to u's shape that follows a linear layer;
* ``reshape(e(x, broadcast(bias)))`` splitting x's leading dim, with the view e's only
  reader, becomes ``e(reshape(x), broadcast(bias))``: e runs in its reader's layout. A
  backward pass recomputes a linear layer's output from the saved flat GEMM result
  (``[B*S, N]`` plus the bias) and views it as ``[B, S, N]`` for the activation's
  gradient; in the flat layout the add is a kernel of its own writing the whole tensor,
  in the reader's it joins the gradient kernel (and with it, the GEMM epilogue there).

Only static rules on structurally equal dims: the rewritten graph computes the same values
for every shape.
"""

from __future__ import annotations

from ..ir import Graph, Op, Value
from ..opdef import Rewriter
from ..symbolic import product
from .base import Pass
from .rewrite import rewrite_ops


def leading_group(u: Value, x: Value) -> int | None:
    """How many leading dims of ``u`` the reshape ``u -> x`` merges into x's dim 0, keeping
    the rest; None when it does anything else."""
    kept = x.rank - 1
    k = u.rank - kept
    if k < 2 or tuple(u.shape[k:]) != tuple(x.shape[1:]):
        return None
    if product(u.shape[:k]) != x.shape[0]:
        return None
    return k


def row_split(u: Value, x: Value) -> int | None:
    """For a reshape ``u -> x`` to rank 2: the k >= 2 such that u's first k dims make x's
    rows and the rest its columns (``[B, S, H, D] -> [B*S, H*D]``: k = 2), else None."""
    if x.rank != 2:
        return None
    for k in range(2, u.rank):
        if (product(u.shape[:k]) == x.shape[0]
                and product(u.shape[k:]) == x.shape[1]):
            return k
    return None


def _reshaped(v: Value) -> Value | None:
    p = v.producer
    return p.operands[0] if p is not None and p.name == "reshape" else None


class MoveReshapes(Pass):
    name = "move_reshapes"

    def run(self, graph: Graph) -> bool:
        self._users = graph.users()
        self._returned = {id(v) for v in graph.outputs}
        return rewrite_ops(graph, self.rewrite)

    def rewrite(self, op: Op, rw: Rewriter) -> Value | None:
        if op.name == "dot_general":
            return self._dot(op, rw)
        if op.name == "reshape":
            return self._sink(op, rw)
        if op.opdef.has_trait("elementwise") and len(op.results) == 1:
            return self._hoist(op, rw)
        return None

    def _dot(self, op: Op, rw: Rewriter) -> Value | None:
        a = op.attrs
        if a["lhs_batch"] or a["rhs_batch"] or len(a["lhs_contract"]) != 1:
            return None
        lhs, rhs = op.operands
        (lc,), (rc,) = a["lhs_contract"], a["rhs_contract"]
        u = _reshaped(lhs)
        if u is not None and lhs.rank == 2 and lc == 1:
            k = row_split(u, lhs)
            if k is not None:  # [B, S, K] x w: M = B*S taken as it is
                if u.rank != k + 1:  # [B, S, H, D] -> [B, S, H*D] first (zero copy)
                    u = rw.op("reshape", u, shape=[*u.shape[:k], lhs.shape[1]])
                d = rw.op("dot_general", u, rhs, lhs_batch=[], rhs_batch=[],
                          lhs_contract=[k], rhs_contract=[rc])
                return rw.op("reshape", d, shape=list(op.results[0].shape))
        v = _reshaped(rhs)
        if (u is not None and v is not None and lhs.rank == 2 and rhs.rank == 2
                and lc == 0 and rc == 0):
            k, kr = leading_group(u, lhs), leading_group(v, rhs)
            if k is not None and k == kr and tuple(u.shape[:k]) == tuple(v.shape[:k]):
                # a weight gradient: contract the leading dims of both where they are
                return rw.op("dot_general", u, v, lhs_batch=[], rhs_batch=[],
                             lhs_contract=list(range(k)), rhs_contract=list(range(k)))
        return None

    def _hoist(self, op: Op, rw: Rewriter) -> Value | None:
        """``e(reshape(u), ...)`` -> ``reshape(e(u, ...))`` when the view only merges u's
        leading dims and every other operand is such a view of the same shape, a
        broadcast along the kept dims, or a scalar: e then runs on u's shape, next to what
        produced u, and the view moves on towards its consumers (where a view back to u's
        shape cancels it)."""
        res = op.results[0]
        if res.rank != 2:
            return None
        src_shape = None
        for w in op.operands:
            u = _reshaped(w)
            if u is not None and leading_group(u, w) is not None:
                src_shape = u.shape
                break
        if src_shape is None:
            return None
        shift = len(src_shape) - res.rank
        operands: list[Value] = []
        for w in op.operands:
            u = _reshaped(w)
            p = w.producer
            if w.rank == 0:
                operands.append(w)
            elif u is not None and u.shape == src_shape:
                operands.append(u)
            elif (p is not None and p.name == "broadcast_in_dim"
                  and all(d >= 1 for d in p.attrs["broadcast_dimensions"])):
                operands.append(rw.op(
                    "broadcast_in_dim", p.operands[0], shape=list(src_shape),
                    broadcast_dimensions=[d + shift for d in p.attrs["broadcast_dimensions"]]))
            else:
                return None
        out = rw.op(op.name, *operands, **dict(op.attrs))
        return rw.op("reshape", out, shape=list(res.shape))

    def _sink(self, op: Op, rw: Rewriter) -> Value | None:
        """``reshape(e(x, ...))`` -> ``e(reshape(x), ...)`` when the view splits x's
        leading dim (keeping the rest), e is elementwise and the view its only reader,
        and every operand of e is x-shaped (viewed too), a broadcast along the kept dims
        or a scalar. The views of e's operands are zero-copy (or sink further, through
        their own elementwise producers, in the next round)."""
        x, res = op.operands[0], op.results[0]
        p = x.producer
        if (p is None or len(p.results) != 1 or not p.opdef.has_trait("elementwise")
                or [id(u) for u in self._users.get(x, [])] != [id(op)]
                or id(x) in self._returned):
            return None
        if x.rank < 1 or leading_group(res, x) is None:
            return None
        shift = res.rank - x.rank
        operands: list[Value] = []
        for w in p.operands:
            q = w.producer
            if w.rank == 0:
                operands.append(w)
            elif (q is not None and q.name == "broadcast_in_dim"
                  and all(d >= 1 for d in q.attrs["broadcast_dimensions"])):
                operands.append(rw.op(
                    "broadcast_in_dim", q.operands[0], shape=list(res.shape),
                    broadcast_dimensions=[d + shift for d in q.attrs["broadcast_dimensions"]]))
            elif tuple(w.shape) == tuple(x.shape):
                operands.append(rw.op("reshape", w, shape=list(res.shape)))
            else:
                return None
        return rw.op(p.name, *operands, **dict(p.attrs))
