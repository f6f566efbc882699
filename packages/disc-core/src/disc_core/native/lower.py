"""Lowering before fusion: rewrite ops into the forms the native schedules cover."""

from __future__ import annotations

import itertools

import numpy as np

from ..ir import Graph, Op, Value
from ..opdef import Rewriter
from ..passes.dce import DCE
from ..passes.rewrite import rewrite_ops


def split_reductions(graph: Graph) -> None:
    """reduce over several axes -> a chain of single-axis reductions (innermost first).

    Kept as is: single-axis reductions (row schedule) and reductions over a strict prefix of
    the axes (column schedule). Reordering changes only floating-point summation order.
    """
    def split(op: Op, rw: Rewriter) -> Value | None:
        axes = sorted(op.attrs["axes"]) if op.name == "reduce" else []
        if len(axes) <= 1 or (axes == list(range(len(axes))) and len(axes) < op.operands[0].rank):
            return None
        cur = op.operands[0]
        for a in reversed(axes):  # innermost first keeps the remaining axis numbers valid
            cur = rw.op("reduce", cur, kind=op.attrs["kind"], axes=[a])
        return cur

    rewrite_ops(graph, split)


def canonicalize_dots(graph: Graph) -> None:
    """Transpose dot_general operands into a layout BLAS takes directly.

    lhs becomes [batch..., free..., contract...] and rhs [batch..., contract..., free...]
    unless they already have a layout the GEMM call can express with its transpose flags;
    the result layout (batch, lhs free, rhs free) is unchanged, so no consumer changes.
    """
    from .emit import gemm_layout

    def to_blas_layout(op: Op, rw: Rewriter) -> Value | None:
        if op.name != "dot_general":
            return None
        folded = _fold_operand_transposes(op)
        if folded is not None and gemm_layout(folded) is not None:
            return rw.op("dot_general", *folded.operands, **folded.attrs)
        if gemm_layout(op) is not None:
            return None
        a = op.attrs
        lhs, rhs = op.operands
        lfree = [d for d in range(lhs.rank)
                 if d not in a["lhs_batch"] and d not in a["lhs_contract"]]
        rfree = [d for d in range(rhs.rank)
                 if d not in a["rhs_batch"] and d not in a["rhs_contract"]]
        lperm = list(a["lhs_batch"]) + lfree + list(a["lhs_contract"])
        rperm = list(a["rhs_batch"]) + list(a["rhs_contract"]) + rfree
        nb, nc = len(a["lhs_batch"]), len(a["lhs_contract"])
        operands = [v if perm == list(range(v.rank)) else rw.op("transpose", v, permutation=perm)
                    for v, perm in ((lhs, lperm), (rhs, rperm))]
        return rw.op("dot_general", *operands,
                     lhs_batch=list(range(nb)), rhs_batch=list(range(nb)),
                     lhs_contract=list(range(nb + len(lfree), nb + len(lfree) + nc)),
                     rhs_contract=list(range(nb, nb + nc)))

    rewrite_ops(graph, to_blas_layout)
    DCE().run(graph)  # transposes that only fed dots are gone


def _fold_operand_transposes(op: Op) -> Op | None:
    """The dot with every transposed operand read in place, or None when nothing folds.

    A transpose feeding a dot (``mm(x.t(), g)`` in every weight gradient, ``x @ w.t()`` in
    every linear layer) is only a renaming of the dims the dot contracts, and the GEMM's
    transpose flags read either layout at full speed, whereas materializing it is a
    strided copy. An operand folds only when its free dims keep their relative order, so
    the result layout, and every consumer, stays as it is.
    """
    a = dict(op.attrs)
    operands = list(op.operands)
    changed = False
    for i, side in enumerate(("lhs", "rhs")):
        v = operands[i]
        if v.producer is None or v.producer.name != "transpose":
            continue
        perm = v.producer.attrs["permutation"]
        batch, contract = a[f"{side}_batch"], a[f"{side}_contract"]
        free = [perm[d] for d in range(v.rank) if d not in batch and d not in contract]
        if free != sorted(free):
            continue
        a[f"{side}_batch"] = [perm[d] for d in batch]
        a[f"{side}_contract"] = [perm[d] for d in contract]
        operands[i] = v.producer.operands[0]
        changed = True
    if not changed:
        return None
    return Op(op.opdef, operands, a, [r.type for r in op.results])


def lower_convolutions(graph: Graph) -> None:
    """convolution -> im2col + one GEMM per feature group.

    The input goes to [N, spatial..., C] (transpose, then zero padding), the kernel to
    [spatial..., I, O]. Each kernel tap is a strided slice of the input, [N, out..., C]; the
    taps are concatenated along the channels into the patch matrix [N, out..., taps*C] (one
    fused kernel writes it) and contracted with the weights viewed as [taps*I, O] by a
    single BLAS call, so K is taps*C rather than C: per-tap GEMMs with K = 3 or 16 (the
    first layers of a CNN) run BLAS far below its peak. The result is transposed to the
    output layout; feature groups run group by group and are concatenated.
    """
    from .fusion import NativeUnsupported

    def lower(op: Op, rw: Rewriter) -> Value | None:
        if op.name != "convolution":
            return None
        emit = rw.op
        a = op.attrs
        lhs, rhs = op.operands
        il, kl, ol = a["input_layout"], a["kernel_layout"], a["output_layout"]
        sp = [ch for ch in il if ch not in "NC"]
        if any(d != 1 for d in a["lhs_dilation"]) or a["batch_group_count"] != 1:
            raise NativeUnsupported("convolution with lhs_dilation or batch groups")
        ksizes = [rhs.shape[kl.index(s)] for s in sp]
        if not all(k.is_const for k in ksizes):
            raise NativeUnsupported("convolution with a symbolic kernel size")
        x = emit("transpose", lhs, permutation=[il.index("N"), *[il.index(s) for s in sp],
                                                 il.index("C")])
        w = emit("transpose", rhs, permutation=[*[kl.index(s) for s in sp], kl.index("I"),
                                                 kl.index("O")])
        lows = [lo for lo, _ in a["padding"]]
        highs = [hi for _, hi in a["padding"]]
        if any(lows) or any(highs):
            zero = emit("constant", value=np.zeros((), lhs.dtype.np))
            x = emit("pad", x, zero, low=[0, *lows, 0], high=[0, *highs, 0],
                     interior=[0] * lhs.rank)
        res = op.results[0]
        outs = [res.shape[ol.index(s)] for s in sp]
        n, c = x.shape[0], x.shape[-1]
        i_feat, o_feat = w.shape[-2], w.shape[-1]
        groups = a["feature_group_count"]
        if groups > 1 and not (c.is_const and o_feat.is_const):
            raise NativeUnsupported("grouped convolution with symbolic feature counts")
        og = o_feat // groups
        parts = []
        taps = list(itertools.product(*[range(k.value) for k in ksizes]))
        for g in range(groups):
            cols = []
            for tap in taps:
                starts = [t * d for t, d in zip(tap, a["rhs_dilation"])]
                cols.append(emit(
                    "slice", x, start=[0, *starts, g * i_feat],
                    limit=[n, *[s0 + (o - 1) * st + 1 for s0, o, st in
                                zip(starts, outs, a["window_strides"])], (g + 1) * i_feat],
                    stride=[1, *a["window_strides"], 1]))
            patches = cols[0] if len(cols) == 1 else emit("concatenate", *cols,
                                                          dimension=x.rank - 1)
            ws = emit("slice", w, start=[0] * len(taps[0]) + [0, g * og],
                      limit=[*[k.value for k in ksizes], i_feat, (g + 1) * og],
                      stride=[1] * w.rank)
            ws = emit("reshape", ws, shape=[i_feat * len(taps), og])
            parts.append(emit("dot_general", patches, ws, lhs_batch=[], rhs_batch=[],
                              lhs_contract=[patches.rank - 1], rhs_contract=[0]))
        y = parts[0] if groups == 1 else emit("concatenate", *parts, dimension=lhs.rank - 1)
        src = ["N", *sp, "C"]
        y = emit("transpose", y, permutation=[src.index(ch) for ch in ol])
        if y.type != res.type:
            raise NativeUnsupported(f"convolution lowering produced {y.type}, expected "
                                    f"{res.type}")
        return y

    rewrite_ops(graph, lower)
