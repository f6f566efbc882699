"""Lowering before fusion: rewrite ops into the forms the native schedules cover."""

from __future__ import annotations

import itertools

import numpy as np

from ..ir import Graph, Op, Value
from ..opdef import Rewriter
from ..passes.dce import DCE
from ..passes.rewrite import rewrite_ops
from ..symbolic import product


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
    """convolution -> im2col + one GEMM per group.

    The input goes to [N, spatial..., C] (transpose, then padding: low/high zeros and, for
    ``lhs_dilation``, interior zeros, all folded into the reads of the next kernel), the
    kernel to [spatial..., I, O]. Two schedules, both one BLAS call per group:

    * constant kernel size (forward convolutions, input gradients): each kernel tap is a
      strided slice of the input, [N, out..., C]; the taps are concatenated along the
      channels into the patch matrix [N, out..., taps*C] (one fused kernel writes it) and
      contracted with the weights viewed as [taps*I, O], so K is taps*C rather than C:
      per-tap GEMMs with K = 3 or 16 (the first layers of a CNN) run BLAS far below its
      peak.
    * symbolic kernel size but constant result size (filter gradients: the "kernel" is the
      output gradient, the result is the weight shape): the roles swap, each *result*
      position is a strided slice of the input over the whole kernel extent, [N, K..., C];
      the positions are stacked along the batch into [positions*N, K...*C] and contracted
      with the kernel viewed as [K...*I, O] in one GEMM whose K dimension is the large
      batch*output-positions extent.

    Feature groups run group by group over channel slices, batch groups over batch slices;
    the group results are concatenated along the features and transposed to the output
    layout.
    """
    from .fusion import NativeUnsupported

    def lower(op: Op, rw: Rewriter) -> Value | None:
        if op.name != "convolution":
            return None
        emit = rw.op
        a = op.attrs
        lhs, rhs = op.operands
        res = op.results[0]
        il, kl, ol = a["input_layout"], a["kernel_layout"], a["output_layout"]
        sp = [ch for ch in il if ch not in "NC"]
        ksizes = [rhs.shape[kl.index(s)] for s in sp]
        outs = [res.shape[ol.index(s)] for s in sp]
        by_pos = all(o.is_const for o in outs)
        by_tap = all(k.is_const for k in ksizes) and not (
            by_pos and product(outs).value < product(ksizes).value)  # fewer slices wins
        if not by_tap and not by_pos:
            raise NativeUnsupported("convolution with symbolic kernel and result sizes")
        x = lhs
        # pad first: a pad's operand is materialized, so padding a transpose would cost a pass
        if any(v for pair in a["padding"] for v in pair) or any(d != 1 for d in a["lhs_dilation"]):
            low, high, interior = [0] * x.rank, [0] * x.rank, [0] * x.rank
            for j, ch in enumerate(sp):
                low[il.index(ch)], high[il.index(ch)] = a["padding"][j]
                interior[il.index(ch)] = a["lhs_dilation"][j] - 1
            zero = emit("constant", value=np.zeros((), lhs.dtype.np))
            x = emit("pad", x, zero, low=low, high=high, interior=interior)
        x = emit("transpose", x, permutation=[il.index("N"), *[il.index(s) for s in sp],
                                               il.index("C")])
        w = emit("transpose", rhs, permutation=[*[kl.index(s) for s in sp], kl.index("I"),
                                                 kl.index("O")])
        n, c = x.shape[0], x.shape[-1]
        i_feat, o_feat = w.shape[-2], w.shape[-1]
        fgc, bgc = a["feature_group_count"], a["batch_group_count"]
        groups = fgc * bgc  # at most one exceeds 1
        if groups > 1 and not o_feat.is_const:
            raise NativeUnsupported("grouped convolution with symbolic feature counts")
        if fgc > 1 and not c.is_const:
            raise NativeUnsupported("grouped convolution with symbolic feature counts")
        og = o_feat // groups
        nb = n // bgc
        strides, rdil = a["window_strides"], a["rhs_dilation"]
        parts = []
        for g in range(groups):
            # the rows (batch) and channels of the input this group reads
            b0, b1 = (g * nb, (g + 1) * nb) if bgc > 1 else (0, n)
            c0, c1 = (g * i_feat, (g + 1) * i_feat) if fgc > 1 else (0, c)
            ws = emit("slice", w, start=[0] * (w.rank - 1) + [g * og],
                      limit=[*w.shape[:-1], (g + 1) * og], stride=[1] * w.rank)
            if by_tap:
                cols = []
                for tap in itertools.product(*[range(k.value) for k in ksizes]):
                    starts = [t * d for t, d in zip(tap, rdil)]
                    cols.append(emit(
                        "slice", x, start=[b0, *starts, c0],
                        limit=[b1, *[s0 + (o - 1) * st + 1
                                     for s0, o, st in zip(starts, outs, strides)], c1],
                        stride=[1, *strides, 1]))
                patches = cols[0] if len(cols) == 1 else emit("concatenate", *cols,
                                                              dimension=x.rank - 1)
                ws = emit("reshape", ws, shape=[product(ksizes) * i_feat, og])
                parts.append(emit("dot_general", patches, ws, lhs_batch=[], rhs_batch=[],
                                  lhs_contract=[patches.rank - 1], rhs_contract=[0]))
                continue
            rows = []
            for pos in itertools.product(*[range(o.value) for o in outs]):
                starts = [p * st for p, st in zip(pos, strides)]
                rows.append(emit(
                    "slice", x, start=[b0, *starts, c0],
                    limit=[b1, *[s0 + (k - 1) * d + 1 for s0, k, d in zip(starts, ksizes, rdil)],
                           c1],
                    stride=[1, *rdil, 1]))
            stacked = rows[0] if len(rows) == 1 else emit("concatenate", *rows, dimension=0)
            positions = len(rows)
            patches = emit("reshape", stacked, shape=[positions * (b1 - b0),
                                                      product(ksizes) * (c1 - c0)])
            ws = emit("reshape", ws, shape=[product(ksizes) * i_feat, og])
            y = emit("dot_general", patches, ws, lhs_batch=[], rhs_batch=[],
                     lhs_contract=[1], rhs_contract=[0])
            parts.append(emit("reshape", y, shape=[*outs, b1 - b0, og]))
        y = parts[0] if groups == 1 else emit("concatenate", *parts, dimension=lhs.rank - 1)
        src = ["N", *sp, "C"] if by_tap else [*sp, "N", "C"]
        y = emit("transpose", y, permutation=[src.index(ch) for ch in ol])
        if y.type != res.type:
            raise NativeUnsupported(f"convolution lowering produced {y.type}, expected "
                                    f"{res.type}")
        return y

    rewrite_ops(graph, lower)
