"""Fused attention: ``attention`` (softmax(Q Kᵀ·scale + mask) V, with the logsumexp of
every score row) and its gradient ``attention_grad``.

Both are library calls of the native engine (``native/attention_emit.py``, the blocked
kernels of ``csrc/attention.c``): tiles of query rows against blocks of keys with an
online softmax, so the [..., Sq, Sk] scores are never written to memory. Every dim may be
symbolic, so one compilation serves every sequence length.

Shapes: ``query`` [b..., Sq, D], ``key`` [b..., Sk, D], ``value`` [b..., Sk, Dv] with the
same batch dims b... (any number, rank >= 2), and an optional additive ``mask`` of the
query's dtype and rank that broadcasts to [b..., Sq, Sk] (each dim 1 or the full size,
e.g. a padding mask [B, 1, 1, Sk] or a causal one [1, 1, Sq, Sk]). ``causal`` masks key
``j > i`` for query row ``i`` (top-left aligned when Sq != Sk, as torch's flash kernel).

Layout: ``seq_major`` lists the head tensors (query, key, value, output and, for the
gradient, grad_output and the three gradients; numbered in ``FWD_TENSORS`` /
``GRAD_TENSORS``) held sequence-major, [b..., S, H, D] instead of [b..., H, S, D]: the
last batch dim (the heads) after the sequence dim, as a [B, S, H*D] projection reshaped
to heads is before its transpose. The op means the same computation on the transposed
tensor; the kernels read and write such a tensor in place through its strides, so the
transposes around attention (``passes/attention.py`` folds them) cost no pass over
memory. The mask and the logsumexp keep the logical [b..., H, Sq, ...] order.

Conventions (torch's CPU flash attention): a row whose scores are all -inf (fully masked,
or Sk = 0) gives output 0 and logsumexp 0 (``empty_rows="nan"``: output NaN when Sk > 0,
as the unfused softmax computes it). The logsumexp has the query's dtype.

The reference accumulates f32 in float64 (as ``dot_general`` does) and rounds once; the
native kernels accumulate in the operands' own type, so they differ by rounding only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Op, TensorType
from ..opdef import BOOL, FLOAT, INTS, STR, Attr, Ctx, Env, Fusion, LibraryCode, OpDef
from ..shape_facts import Eq, Fact
from ..symbolic import Expr

#: dtypes of the fused ops (the native kernels multiply through BLAS sgemm / dgemm)
ATTENTION_DTYPES = (DType.F32, DType.F64)

#: the head tensors of ``attention`` and ``attention_grad`` in ``seq_major``'s numbering
#: (operands first, then results)
FWD_TENSORS = ("query", "key", "value", "output")
GRAD_TENSORS = ("query", "key", "value", "output", "grad_output", "grad_query", "grad_key",
                "grad_value")
_SEQ_MAJOR_DOC = ("the head tensors held sequence-major, [b..., S, H, D] (numbered as in "
                  "{}); the others are [b..., H, S, D]")

_ATTRS: dict[str, Attr] = {
    "scale": Attr(FLOAT, 1.0, doc="factor applied to Q Kᵀ before the mask"),
    "rsqrt_head_dim": Attr(BOOL, False, doc="also multiply the scores by 1/sqrt(head dim), "
                                            "evaluated at run time (SDPA's default scale "
                                            "over a head dim that may be symbolic)"),
    "causal": Attr(BOOL, False, doc="mask key j > query row i (top-left aligned)"),
}
#: the forward only: what a row with no unmasked key (and Sk > 0) outputs
_FWD_ATTRS = {**_ATTRS, "empty_rows": Attr(
    STR, "zero", choices=("zero", "nan"),
    doc="zero: output 0 (torch's flash kernel); nan: NaN, as an unfused softmax of an "
        "all -inf row gives (what the pattern rewrite preserves)"),
    "seq_major": Attr(INTS, (), doc=_SEQ_MAJOR_DOC.format("FWD_TENSORS"))}
_GRAD_ATTRS = {**_ATTRS, "seq_major": Attr(INTS, (), doc=_SEQ_MAJOR_DOC.format("GRAD_TENSORS"))}


def swap_seq_heads(shape: tuple[Expr, ...]) -> tuple[Expr, ...]:
    """[b..., X, Y, D] -> [b..., Y, X, D]: between the sequence-major and the logical
    layout of a head tensor (its own inverse)."""
    return (*shape[:-3], shape[-2], shape[-3], shape[-1])


def logical_types(ctx: Ctx, seq_major: Iterable[int], n_operands: int,
                  names: tuple[str, ...]) -> None:
    """Check ``seq_major`` and replace the sequence-major operand types in ``ctx`` by
    their logical ([b..., H, S, D]) types, so the shape rule reads one layout."""
    seen = set()
    for i in seq_major:
        if not 0 <= i < len(names) or i in seen:
            ctx.fail(f"seq_major {tuple(seq_major)}: each entry must be one of 0..."
                     f"{len(names) - 1} ({', '.join(names)}), at most once")
        seen.add(i)
        if i < n_operands:
            t = ctx.types[i]
            if t.rank < 3:
                ctx.fail(f"{ctx.operand_name(i)} is sequence-major but has rank {t.rank} "
                         f"({t}); expected [batch..., S, H, D]")
            ctx.types[i] = TensorType(t.dtype, swap_seq_heads(t.shape))


def _physical(results: list[TensorType], seq_major: Iterable[int], n_operands: int
              ) -> list[TensorType]:
    out = list(results)
    for i in seq_major:
        j = i - n_operands
        if 0 <= j < len(out):
            out[j] = TensorType(out[j].dtype, swap_seq_heads(out[j].shape))
    return out


def logical_operand_shapes(op: Op) -> list[tuple[Expr, ...]]:
    """The operands' shapes in the logical layout (sequence-major ones swapped back)."""
    sm = set(op.attrs.get("seq_major", ()))
    return [swap_seq_heads(v.shape) if i in sm else v.shape
            for i, v in enumerate(op.operands)]


def _swap_arrays(arrays: list[np.ndarray], seq_major: Iterable[int], offset: int
                 ) -> list[np.ndarray]:
    out = list(arrays)
    for i in seq_major:
        if 0 <= i - offset < len(out):
            out[i - offset] = np.swapaxes(out[i - offset], -3, -2)
    return out


def _check_qkv(ctx: Ctx, q: int, k: int, v: int) -> tuple[tuple[Expr, ...], Expr, Expr,
                                                         Expr, Expr]:
    """Verify query/key/value operands; (batch dims, Sq, Sk, D, Dv)."""
    for i in (q, k, v):
        ctx.dtype_in(i, ATTENTION_DTYPES, "a float dtype the fused kernels take:")
        ctx.same_dtype(q, i)
    tq, tk, tv = ctx.types[q], ctx.types[k], ctx.types[v]
    if tq.rank < 2:
        ctx.fail(f"{ctx.operand_name(q)} has rank {tq.rank} ({tq}), expected rank >= 2 "
                 f"([batch..., Sq, D])")
    ctx.rank(k, tq.rank)
    ctx.rank(v, tq.rank)
    nb = tq.rank - 2
    batch = []
    for d in range(nb):
        u = ctx.unify(tq.shape[d], tk.shape[d], f"batch dim {d} of query ({tq}) vs key ({tk})")
        batch.append(ctx.unify(u, tv.shape[d], f"batch dim {d} of query ({tq}) vs value "
                                              f"({tv})"))
    dq = ctx.unify(tq.shape[-1], tk.shape[-1], f"head dim of query ({tq}) vs key ({tk})")
    sk = ctx.unify(tk.shape[-2], tv.shape[-2], f"key length of key ({tk}) vs value ({tv})")
    return tuple(batch), tq.shape[-2], sk, dq, tv.shape[-1]


def _check_mask(ctx: Ctx, m: int, target: tuple[Expr, ...], like: int) -> None:
    """The mask broadcasts to ``target``: each dim is 1 or (possibly) the full size."""
    tm = ctx.types[m]
    ctx.same_dtype(like, m)
    ctx.rank(m, len(target))
    for d, (have, want) in enumerate(zip(tm.shape, target, strict=True)):
        if have.is_const and have.value == 1:
            continue
        ctx.unify(have, want, f"dim {d} of the mask ({tm}) must be 1 or match "
                              f"[{', '.join(map(str, target))}]")


def _qkv_facts(op: Op) -> Iterable[Fact]:
    tq, tk, tv = logical_operand_shapes(op)[:3]
    pairs = [(tq[d], tk[d]) for d in range(len(tq) - 2)]
    pairs += [(tq[d], tv[d]) for d in range(len(tq) - 2)]
    pairs += [(tq[-1], tk[-1]), (tk[-2], tv[-2])]
    for a, b in pairs:
        if a != b:
            yield Eq(a, b)


def scale_of(attrs: Mapping[str, Any], head_dim: int) -> float:
    """The factor the scores are multiplied by: ``scale``, times 1/sqrt(head dim) with
    ``rsqrt_head_dim`` (1 for an empty head dim)."""
    s = float(attrs["scale"])
    return s / float(np.sqrt(head_dim)) if attrs["rsqrt_head_dim"] and head_dim else s


def _acc(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


def reference_scores(q: np.ndarray, k: np.ndarray, mask: np.ndarray | None, scale: float,
                     causal: bool) -> np.ndarray:
    """scale * Q Kᵀ (+ mask), -inf above the causal diagonal, in float64."""
    s = np.matmul(_acc(q), np.swapaxes(_acc(k), -1, -2)) * scale
    if mask is not None:
        s = s + _acc(mask)
    if causal:
        sq, sk = s.shape[-2], s.shape[-1]
        above = np.arange(sk)[None, :] > np.arange(sq)[:, None]
        s = np.where(above, -np.inf, s)
    return s


class Attention(OpDef):
    """softmax(Q Kᵀ·scale + mask [causal]) V and the logsumexp of each score row.

    Results: ``output`` [b..., Sq, Dv] and ``logsumexp`` [b..., Sq] (query's dtype). See
    the module docstring for shapes and conventions."""

    name = "attention"
    operands = ("query", "key", "value", "*mask")
    attrs = _FWD_ATTRS
    traits = frozenset({"pure"})
    #: a blocked kernel of its own (native/attention_emit.py), not generated code
    fusion = Fusion.LIBRARY

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        if len(ctx.types) > 4:
            ctx.fail(f"expected at most one mask operand, got {len(ctx.types) - 3}")
        logical_types(ctx, attrs["seq_major"], 3, FWD_TENSORS)
        batch, sq, sk, _, dv = _check_qkv(ctx, 0, 1, 2)
        if len(ctx.types) == 4:
            _check_mask(ctx, 3, (*batch, sq, sk), 0)
        dt = ctx.types[0].dtype
        return _physical([TensorType(dt, (*batch, sq, dv)), TensorType(dt, (*batch, sq))],
                         attrs["seq_major"], 3)

    @classmethod
    def facts(cls, op: Op) -> Iterable[Fact]:
        return _qkv_facts(op)

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> list[np.ndarray]:
        q, k, v = _swap_arrays(inputs[:3], attrs["seq_major"], 0)
        mask = inputs[3] if len(inputs) > 3 else None
        s = reference_scores(q, k, mask, scale_of(attrs, q.shape[-1]), attrs["causal"])
        with np.errstate(all="ignore"):
            top = s.max(axis=-1, keepdims=True, initial=-np.inf)
            shift = np.where(top == -np.inf, 0.0, top)
            w = np.exp(s - shift)
            total = w.sum(axis=-1, keepdims=True)
            empty = total == 0
            p = w / np.where(empty, 1.0, total)
            out = np.matmul(p, _acc(v))
            if attrs["empty_rows"] == "nan" and s.shape[-1] > 0:
                out = np.where(empty, np.nan, out)
            lse = np.where(empty, 0.0, np.log(np.where(empty, 1.0, total)) + shift)[..., 0]
        return _swap_arrays([out.astype(q.dtype), lse.astype(q.dtype)], attrs["seq_major"], 3)

    @classmethod
    def library_call(cls, op: Op, ptr: Any, syms: Any) -> LibraryCode:
        from ..native.attention_emit import emit_attention

        return emit_attention(op, logical_operand_shapes(op), ptr, syms)


class AttentionGrad(OpDef):
    """The gradients (dQ, dK, dV) of ``attention``'s output, from Q, K, V, the forward's
    output O and logsumexp L, and the output's gradient dO:

    P = exp(scores - L) (masked scores give 0), dV = Pᵀ dO, dS = P * (dO Vᵀ -
    rowsum(dO * O)), dQ = scale * dS K, dK = scale * dSᵀ Q."""

    name = "attention_grad"
    operands = ("query", "key", "value", "output", "grad_output", "logsumexp", "*mask")
    attrs = _GRAD_ATTRS
    traits = frozenset({"pure"})
    fusion = Fusion.LIBRARY

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        if len(ctx.types) > 7:
            ctx.fail(f"expected at most one mask operand, got {len(ctx.types) - 6}")
        logical_types(ctx, attrs["seq_major"], 5, GRAD_TENSORS)
        batch, sq, sk, _, dv = _check_qkv(ctx, 0, 1, 2)
        for i, what in ((3, "output"), (4, "grad_output")):
            ctx.same_dtype(0, i)
            ctx.rank(i, ctx.types[0].rank)
            want = (*batch, sq, dv)
            for d, (have, w) in enumerate(zip(ctx.types[i].shape, want, strict=True)):
                ctx.unify(have, w, f"dim {d} of {what} ({ctx.types[i]}) vs "
                                   f"[{', '.join(map(str, want))}]")
        ctx.same_dtype(0, 5)
        ctx.rank(5, ctx.types[0].rank - 1)
        for d, (have, w) in enumerate(zip(ctx.types[5].shape, (*batch, sq), strict=True)):
            ctx.unify(have, w, f"dim {d} of logsumexp ({ctx.types[5]})")
        if len(ctx.types) == 7:
            _check_mask(ctx, 6, (*batch, sq, sk), 0)
        return _physical([ctx.types[0], ctx.types[1], ctx.types[2]], attrs["seq_major"], 5)

    @classmethod
    def facts(cls, op: Op) -> Iterable[Fact]:
        yield from _qkv_facts(op)
        shapes = logical_operand_shapes(op)
        q, v = shapes[0], shapes[2]
        want = (*q[:-1], v[-1])
        for i in (3, 4):
            for a, b in zip(shapes[i], want, strict=True):
                if a != b:
                    yield Eq(a, b)
        for a, b in zip(op.operands[5].shape, q[:-1], strict=True):
            if a != b:
                yield Eq(a, b)

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> list[np.ndarray]:
        q, k, v, o, do = _swap_arrays(inputs[:5], attrs["seq_major"], 0)
        lse = inputs[5]
        mask = inputs[6] if len(inputs) > 6 else None
        scale = scale_of(attrs, q.shape[-1])
        s = reference_scores(q, k, mask, scale, attrs["causal"])
        with np.errstate(all="ignore"):
            p = np.exp(s - _acc(lse)[..., None])
        d_o = _acc(do)
        dv = np.matmul(np.swapaxes(p, -1, -2), d_o)
        dp = np.matmul(d_o, np.swapaxes(_acc(v), -1, -2))
        row = (d_o * _acc(o)).sum(axis=-1, keepdims=True)
        ds = p * (dp - row)
        dq = np.matmul(ds, _acc(k)) * scale
        dk = np.matmul(np.swapaxes(ds, -1, -2), _acc(q)) * scale
        return _swap_arrays([dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype)],
                            attrs["seq_major"], 5)

    @classmethod
    def library_call(cls, op: Op, ptr: Any, syms: Any) -> LibraryCode:
        from ..native.attention_emit import emit_attention

        return emit_attention(op, logical_operand_shapes(op), ptr, syms)
