"""Backend lowering before fusion: rewrite ops into the forms the native schedules cover.

Each rewrite is a named pass (:class:`SplitInputDilation`, :class:`LowerConvolutions`,
:class:`SplitReductions`, :class:`CanonicalizeDots`), and :func:`backend_lowering` is the
pass manager the ``lower`` compile stage runs (``disc_core.pipeline``): each pass once, in
that order (a convolution's phase split makes more convolutions, their im2col lowering makes
the GEMMs and reductions the last two put into BLAS and schedule form), so a pass-level dump
(``PassManager.stats``, ``disc compile --stop-after lower``) names what ran. The functions of
the same names (``split_reductions(graph)`` ...) run one pass alone.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..ir import Graph, Op, Value
from ..opdef import Fusion, Rewriter
from ..passes.base import Pass
from ..passes.dce import DCE
from ..passes.manager import PassManager
from ..passes.rewrite import rewrite_ops
from ..symbolic import Expr, floordiv, product

__all__ = ["CanonicalizeDots", "CollapseReducedRuns", "LowerConvolutions",
           "SplitInputDilation", "SplitReductions", "backend_lowering", "canonicalize_dots",
           "collapse_reduced_runs", "lower_convolutions", "split_input_dilation",
           "split_reductions"]


class SplitInputDilation(Pass):
    """A convolution with ``lhs_dilation`` > 1 -> one convolution per output phase."""

    name = "split-input-dilation"

    def run(self, graph: Graph) -> bool:
        return split_input_dilation(graph)


class LowerConvolutions(Pass):
    """convolution -> im2col (one gather) + one GEMM per group."""

    name = "lower-convolutions"

    def run(self, graph: Graph) -> bool:
        return lower_convolutions(graph)


class CollapseReducedRuns(Pass):
    """A reduction over adjacent axes of an elementwise cone -> over one merged axis."""

    name = "collapse-reduced-runs"

    def run(self, graph: Graph) -> bool:
        return collapse_reduced_runs(graph)


class SplitReductions(Pass):
    """A reduction over several axes -> a chain of single-axis ones."""

    name = "split-reductions"

    def run(self, graph: Graph) -> bool:
        return split_reductions(graph)


class CanonicalizeDots(Pass):
    """Transposes feeding dot_general fold into GEMM flags; other operands go to a BLAS
    layout."""

    name = "canonicalize-dots"

    def run(self, graph: Graph) -> bool:
        return canonicalize_dots(graph)


def backend_lowering() -> PassManager:
    """The ``lower`` stage: the native backend's rewrites, each once and in this order.

    Convolutions that oneDNN's primitives cover leave as ``fused_convolution`` first
    (``onednn_conv.py``, only when oneDNN is installed; an input gradient's input dilation
    included, so before the phase split).

    One iteration and no verification between passes, as these rewrites always ran: they
    are not a fixpoint system (each consumes what the previous one produced), and the
    fusion planner checks the forms it needs.
    """
    from .onednn_conv import UseOneDNNConvolutions

    return PassManager([UseOneDNNConvolutions(), SplitInputDilation(), LowerConvolutions(),
                        CollapseReducedRuns(), SplitReductions(), CanonicalizeDots()],
                       max_iterations=1,
                       verify_each=False)


def collapse_reduced_runs(graph: Graph) -> bool:
    """reduce over a run of adjacent axes (H, W of NCHW: a BN gradient's or a global
    pool's sums) -> the same reduce of the operand with the run merged into one axis.

    Split into single-axis reductions as it was, the innermost axis alone made rows of W
    floats (16-54 in a small CNN: loop overhead and remainders dominate, then a strided
    pass over H); merged, each row is H*W floats. The operand is rebuilt on the merged
    shape through its elementwise ops and broadcasts, down to values that are in memory
    anyway (graph inputs, library results), which merge as zero-copy reshapes. Any other
    producer (a transpose, a pad, a slice) would have to be written out to be reshaped,
    so such a reduction is left as it is. Producers with other users are recomputed on
    the merged shape, never written twice. Left alone: full reductions (split, a GEMM's
    row sums ride on it as its epilogue) and reductions over leading axes (the column
    schedule flattens those already).
    """
    reshaped: dict[tuple, Value] = {}  # shared: two sums of one tensor read one reshape

    def collapse(op: Op, rw: Rewriter) -> Value | None:
        if op.name != "reduce" or op.opdef.reduction_kind(op) is None:
            return None
        x = op.operands[0]
        axes = sorted(op.attrs["axes"])
        runs = _adjacent_runs(axes)
        if (all(len(r) == 1 for r in runs) or len(axes) == x.rank
                or axes == list(range(len(axes)))):
            return None  # nothing to merge; a full reduction; a column schedule already
        merged = _merged_shape(x.shape, runs)
        if not _mergeable(x, runs, {}):
            return None
        cur = _rebuild(x, runs, merged, rw, {}, reshaped)
        axes, base = [], 0
        for d in range(x.rank):
            run = next((r for r in runs if r[0] == d), None)
            if run is not None:
                axes.append(d - base)
                base += len(run) - 1
        return rw.op("reduce", cur, kind=op.attrs["kind"], axes=axes)

    return rewrite_ops(graph, collapse)


def _adjacent_runs(axes: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for a in axes:
        if runs and runs[-1][-1] == a - 1:
            runs[-1].append(a)
        else:
            runs.append([a])
    return runs


def _merged_shape(shape: tuple[Expr, ...], runs: list[list[int]]) -> list[Expr]:
    out: list[Expr] = []
    d = 0
    while d < len(shape):
        run = next((r for r in runs if r[0] == d and len(r) > 1), None)
        if run is None:
            out.append(shape[d])
            d += 1
        else:
            out.append(product(shape[a] for a in run))
            d = run[-1] + 1
    return out


def _in_memory(v: Value) -> bool:
    """``v`` is a buffer whatever the fusion plan does: a graph input, or the result of an
    op that never runs inside a fused kernel (a library call), or a reshape of those."""
    p = v.producer
    if p is None:
        return True
    if p.name == "reshape":
        return _in_memory(p.operands[0])
    return p.opdef.fusion not in Fusion.IN_KERNEL


def _mergeable(v: Value, runs: list[list[int]], memo: dict[int, bool]) -> bool:
    """Whether :func:`_rebuild` can put ``v`` on the merged shape without writing out
    anything that a fused kernel would otherwise compute in registers."""
    if id(v) in memo:
        return memo[id(v)]
    p = v.producer
    if _in_memory(v):
        ok = True
    elif p.opdef.fusion == Fusion.ELEMENTWISE and len(p.results) == 1:
        ok = all(w.shape == v.shape and _mergeable(w, runs, memo) for w in p.operands)
    elif p.name == "broadcast_in_dim":
        inner = _broadcast_runs(p, runs)
        ok = inner is not None and (not inner or _mergeable(p.operands[0], inner, {}))
    else:  # a transpose, pad, slice, iota...: indexing the merged axis cannot express
        ok = False
    memo[id(v)] = ok
    return ok


def _broadcast_runs(p: Op, runs: list[list[int]]) -> list[list[int]] | None:
    """For a broadcast_in_dim into the merged axes: the operand's runs to merge with them
    ([] when every run is broadcast, nothing to merge), None when a run is partly
    broadcast or its operand dims may broadcast at run time (they must be the result's)."""
    bdims = list(p.attrs["broadcast_dimensions"])
    x, out = p.operands[0], p.results[0]
    inner: list[list[int]] = []
    for run in runs:
        if len(run) == 1:
            continue
        src = [bdims.index(a) if a in bdims else None for a in run]
        if all(s is None for s in src):
            continue
        if any(s is None for s in src) or src != list(range(src[0], src[0] + len(run))):
            return None
        if any(x.shape[s] != out.shape[a] for s, a in zip(src, run)):
            return None
        inner.append(src)
    return inner


def _rebuild(v: Value, runs: list[list[int]], merged: list[Expr], rw: Rewriter,
             memo: dict[tuple, Value], reshaped: dict[tuple, Value]) -> Value:
    """``v`` on the shape with ``runs`` merged (each run to one axis). ``memo``: what this
    reduction's operand already rebuilt; ``reshaped``: the reshapes of buffers built for
    any reduction so far (placed before the op being rewritten, so before this one). The
    rebuilt elementwise ops are not shared between reductions: the fusion planner gives a
    value two reductions read a kernel of its own, where each reduction's copy of it
    fuses into one row kernel with the other."""
    key = (id(v), tuple(map(tuple, runs)))
    if key in memo:
        return memo[key]
    p = v.producer
    if _in_memory(v):
        out = reshaped.get(key) or rw.op("reshape", v, shape=merged)
        reshaped[key] = out
    elif p.name == "broadcast_in_dim":
        inner = _broadcast_runs(p, runs)
        x = p.operands[0]
        src = (_rebuild(x, inner, _merged_shape(x.shape, inner), rw, memo, reshaped)
               if inner else x)
        # each operand dim's new result axis: result axes shift left past merged runs
        new_axis = {}
        shift = 0
        for d in range(v.rank):
            run = next((r for r in runs if d in r and len(r) > 1), None)
            new_axis[d] = d - shift - (d - run[0] if run else 0)
            if run is not None and d == run[-1]:
                shift += len(run) - 1
        bdims = [new_axis[a] for i, a in enumerate(p.attrs["broadcast_dimensions"])
                 if not any(i in r[1:] for r in inner)]
        out = rw.op("broadcast_in_dim", src, shape=merged, broadcast_dimensions=bdims)
    else:
        operands = [_rebuild(w, runs, merged, rw, memo, reshaped) for w in p.operands]
        out = rw.op(p.name, *operands, **p.attrs)
    memo[key] = out
    return out


def split_reductions(graph: Graph) -> bool:
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

    return rewrite_ops(graph, split)


def canonicalize_dots(graph: Graph) -> bool:
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

    changed = rewrite_ops(graph, to_blas_layout)
    return DCE().run(graph) or changed  # transposes that only fed dots are gone


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


def lower_convolutions(graph: Graph) -> bool:
    """convolution -> im2col (one gather) + one GEMM per group.

    The input goes to [N, spatial..., C] (padding first: low/high zeros and, for
    ``lhs_dilation``, interior zeros; then the transpose, one kernel writes both), viewed
    as [N, P, C] with P the flattened padded positions. The patch matrix
    [N, out..., taps..., C] is one gather along P whose indices are iota arithmetic
    (``sum_j (o_j * stride_j + t_j * dilation_j) * row_stride_j``, fused into the gather's
    loop), so it is written once, whatever the sizes: the output extent and the kernel
    extent may both be symbolic (a filter gradient's "kernel" is the output gradient).
    Per group, the patches [N*out, taps*C] are contracted with the kernel viewed as
    [taps*I, O] by one BLAS call, so K is taps*C rather than C (per-tap GEMMs with K = 3
    or 16, the first layers of a CNN, run BLAS far below its peak). Feature groups take
    channel slices, batch groups batch slices; the group results are concatenated along
    the features and transposed to the output layout.
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
        ns = len(sp)
        ksizes = [rhs.shape[kl.index(s)] for s in sp]
        outs = [res.shape[ol.index(s)] for s in sp]
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
        n, c, padded = x.shape[0], x.shape[-1], list(x.shape[1:-1])
        flat = emit("reshape", x, shape=[n, product(padded), c])
        # the flat padded position each (output position, kernel tap) reads
        ishape = [*outs, *ksizes]
        i64 = np.dtype(np.int64)

        def splat(v: Value) -> Value:
            return emit("broadcast_in_dim", v, shape=ishape, broadcast_dimensions=[])

        def const(k: int) -> Value:
            return splat(emit("constant", value=np.array(k, i64)))

        idx = None
        row_stride: Value | None = None  # product of the padded dims after dim j
        for j in reversed(range(ns)):
            pos = emit("add", emit("mul", emit("iota", shape=ishape, dimension=j, dtype="i64"),
                                   const(a["window_strides"][j])),
                       emit("mul", emit("iota", shape=ishape, dimension=ns + j, dtype="i64"),
                            const(a["rhs_dilation"][j])))
            term = pos if row_stride is None else emit("mul", pos, row_stride)
            idx = term if idx is None else emit("add", idx, term)
            size = (const(padded[j].value) if padded[j].is_const else
                    splat(emit("get_dimension_size", x, dimension=1 + j)))
            row_stride = size if row_stride is None else emit("mul", row_stride, size)
        patches = emit("gather", flat, idx, axis=1)  # [N, out..., taps..., C]
        if _per_image(a, ol, sp):
            return _per_image_gemm(emit, patches, rhs, kl, sp, outs, res)
        w = emit("transpose", rhs, permutation=[*[kl.index(s) for s in sp], kl.index("I"),
                                                 kl.index("O")])
        i_feat, o_feat = w.shape[-2], w.shape[-1]
        fgc, bgc = a["feature_group_count"], a["batch_group_count"]
        groups = fgc * bgc  # at most one exceeds 1
        if groups > 1 and not o_feat.is_const:
            raise NativeUnsupported("grouped convolution with symbolic feature counts")
        if fgc > 1 and not c.is_const:
            raise NativeUnsupported("grouped convolution with symbolic feature counts")
        og = o_feat // groups
        nb = n // bgc
        taps = product(ksizes)
        # NCHW-like outputs: the GEMM writes [O, N, spatial...] (weights times patches), so
        # the transpose to the output layout moves whole contiguous spatial rows; the
        # patches-times-weights orientation would leave the channels innermost and every
        # consumer (batch norm, pooling) reading the result with a channel-sized stride.
        features_first = ol.index("C") < min(ol.index(ch) for ch in sp) if sp else False
        parts = []
        for g in range(groups):
            b0, b1 = (g * nb, (g + 1) * nb) if bgc > 1 else (0, n)
            c0, c1 = (g * i_feat, (g + 1) * i_feat) if fgc > 1 else (0, c)
            pg = patches
            if groups > 1:
                pg = emit("slice", patches, start=[b0, *[0] * (2 * ns), c0],
                          limit=[b1, *ishape, c1], stride=[1] * patches.rank)
            pg = emit("reshape", pg, shape=[(b1 - b0) * product(outs), taps * (c1 - c0)])
            ws = w if groups == 1 else emit("slice", w, start=[0] * (w.rank - 1) + [g * og],
                                            limit=[*w.shape[:-1], (g + 1) * og],
                                            stride=[1] * w.rank)
            ws = emit("reshape", ws, shape=[taps * i_feat, og])
            if features_first:
                y = emit("dot_general", ws, pg, lhs_batch=[], rhs_batch=[], lhs_contract=[0],
                         rhs_contract=[1])
                parts.append(emit("reshape", y, shape=[og, b1 - b0, *outs]))
            else:
                y = emit("dot_general", pg, ws, lhs_batch=[], rhs_batch=[], lhs_contract=[1],
                         rhs_contract=[0])
                parts.append(emit("reshape", y, shape=[b1 - b0, *outs, og]))
        axis = 0 if features_first else lhs.rank - 1
        y = parts[0] if groups == 1 else emit("concatenate", *parts, dimension=axis)
        src = ["C", "N", *sp] if features_first else ["N", *sp, "C"]
        y = emit("transpose", y, permutation=[src.index(ch) for ch in ol])
        if y.type != res.type:
            raise NativeUnsupported(f"convolution lowering produced {y.type}, expected "
                                    f"{res.type}")
        return y

    return rewrite_ops(graph, lower)


def _per_image(attrs: dict, ol: str, sp: list[str]) -> bool:
    """Whether a convolution lowers to one GEMM per image (:func:`_per_image_gemm`): an
    ungrouped one whose output is laid out [N, C, spatial...] in the input's spatial order
    (NCHW: every forward and input-gradient convolution of an NCHW model)."""
    return (attrs["feature_group_count"] == 1 and attrs["batch_group_count"] == 1
            and list(ol) == ["N", "C", *sp])


def _per_image_gemm(emit, patches: Value, rhs: Value, kl: str, sp: list[str],
                    outs: list[Expr], res: Value) -> Value:
    """[N, O, spatial...] = per image n, weights [O, taps*C] times patches[n] [P, taps*C]
    transposed: one batched GEMM whose weights every image shares (a broadcast along the
    batch, read with batch stride 0 by the GEMM step, never materialized).

    Its C is the output itself, [N, O, P] = [N, O, spatial...], where one GEMM over all
    images writes [O, N*P] and needs a transpose pass to the output layout. A kernel that
    consumes the output (bias, batch-norm inference, ReLU) then reads it in its own
    layout and runs as the GEMM's epilogue (gemm_epilogue.py) on each image's rows.
    """
    n, kdim = patches.shape[0], product(patches.shape[1 + len(outs):])
    pg = emit("reshape", patches, shape=[n, product(outs), kdim])
    w = emit("transpose", rhs, permutation=[kl.index("O"), *[kl.index(s) for s in sp],
                                             kl.index("I")])
    o_feat = w.shape[0]
    w = emit("reshape", w, shape=[o_feat, kdim])
    wb = emit("broadcast_in_dim", w, shape=[n, o_feat, kdim], broadcast_dimensions=[1, 2])
    y = emit("dot_general", wb, pg, lhs_batch=[0], rhs_batch=[0], lhs_contract=[2],
             rhs_contract=[2])
    y = emit("reshape", y, shape=[n, o_feat, *outs])
    if y.type != res.type:
        from .fusion import NativeUnsupported

        raise NativeUnsupported(f"convolution lowering produced {y.type}, expected {res.type}")
    return y


def split_input_dilation(graph: Graph) -> bool:
    """convolution with ``lhs_dilation`` s > 1 -> one convolution per output phase.

    Such a convolution (the input gradient of a strided convolution, every transposed
    convolution) reads an input with s - 1 zeros between neighbours, so lowered as it is,
    all but one in s of its products, per dilated dim, multiply a zero. Outputs
    ``y = s*q + p`` of phase p only ever meet the taps ``t = t0 + s*m`` with
    ``t0 = (pad_low - p) mod s``, at input ``q + m + d`` (``d = (p + t0 - pad_low) / s``):
    an ordinary convolution of the undilated input (shifted by d, padded or cropped to
    ``ceil(Y/s) + M - 1``) with that strided slice of the kernel. The phases' results are
    interleaved back (a size-1 axis after each dilated dim, concatenated per phase, merged,
    cropped to Y). A phase without taps (kernel smaller than the stride) is zeros.

    Applies when every window stride and kernel dilation is 1 (what both uses produce) and
    the kernel's dilated spatial sizes are static; anything else lowers as it is.
    """
    def split(op: Op, rw: Rewriter) -> Value | None:
        if op.name != "convolution" or all(d == 1 for d in op.attrs["lhs_dilation"]):
            return None
        a = op.attrs
        if any(v != 1 for v in (*a["window_strides"], *a["rhs_dilation"])):
            return None
        lhs, rhs = op.operands
        res = op.results[0]
        il, kl, ol = a["input_layout"], a["kernel_layout"], a["output_layout"]
        sp = [ch for ch in il if ch not in "NC"]
        ksize = [rhs.shape[kl.index(ch)] for ch in sp]
        if any(not k.is_const for k, s in zip(ksize, a["lhs_dilation"]) if s > 1):
            return None
        emit = rw.op
        zero = emit("constant", value=np.zeros((), lhs.dtype.np))
        strides = list(a["lhs_dilation"])
        outs = [res.shape[ol.index(ch)] for ch in sp]
        quot = [floordiv(y + s - 1, s) for y, s in zip(outs, strides)]
        phase_shape = [quot[sp.index(ch)] if ch in sp else d for ch, d in zip(ol, res.shape)]
        conv_attrs = {**a, "padding": [[0, 0]] * len(sp), "lhs_dilation": [1] * len(sp)}
        results: dict[tuple[int, ...], Value] = {}
        for phase in itertools.product(*(range(s) for s in strides)):
            x_low, x_high = [0] * lhs.rank, [0] * lhs.rank
            k_start, k_limit, k_step = [0] * rhs.rank, list(rhs.shape), [1] * rhs.rank
            empty = False
            for j, (ch, p, s) in enumerate(zip(sp, phase, strides)):
                low = a["padding"][j][0]
                t0 = (low - p) % s
                # taps t0, t0 + s, ... below the kernel size (static where s > 1)
                taps = ksize[j] if s == 1 else Expr.const(max(-(-(ksize[j].value - t0) // s), 0))
                if taps.is_const and taps.value == 0:
                    empty = True
                    break
                shift = (p + t0 - low) // s
                x_low[il.index(ch)] = -shift
                x_high[il.index(ch)] = quot[j] + taps - 1 + shift - lhs.shape[il.index(ch)]
                ki = kl.index(ch)
                k_start[ki], k_step[ki] = t0, s
                k_limit[ki] = Expr.const(t0) + (taps - 1) * s + 1
            if empty:
                results[phase] = emit("broadcast_in_dim", zero, shape=phase_shape,
                                      broadcast_dimensions=[])
                continue
            x = lhs
            if any(x_low) or not all(Expr.const(0) == h for h in x_high):
                x = emit("pad", lhs, zero, low=x_low, high=x_high, interior=[0] * lhs.rank)
            w = rhs
            if k_start != [0] * rhs.rank or k_step != [1] * rhs.rank or any(
                    lim != d for lim, d in zip(k_limit, rhs.shape)):
                w = emit("slice", rhs, start=k_start, limit=k_limit, stride=k_step)
            results[phase] = emit("convolution", x, w, **conv_attrs)
        # interleave: a size-1 axis after each dilated output dim, filled by its phases
        dilated = [ch for ch, s in zip(sp, strides) if s > 1]
        expanded, axis_of = [], {}
        for ch, d in zip(ol, phase_shape):
            expanded.append(d)
            if ch in dilated:
                axis_of[ch] = len(expanded)
                expanded.append(Expr.const(1))

        def interleave(level: int, fixed: tuple[int, ...]) -> Value:
            if level == len(sp):
                return emit("reshape", results[fixed], shape=expanded)
            s = strides[level]
            parts = [interleave(level + 1, (*fixed, p)) for p in range(s)]
            if s == 1:
                return parts[0]
            return emit("concatenate", *parts, dimension=axis_of[sp[level]])

        merged = [d * strides[sp.index(ch)] if ch in dilated else d
                  for ch, d in zip(ol, phase_shape)]
        y = emit("reshape", interleave(0, ()), shape=merged)
        return emit("slice", y, start=[0] * res.rank, limit=list(res.shape),
                    stride=[1] * res.rank)

    return rewrite_ops(graph, split)
