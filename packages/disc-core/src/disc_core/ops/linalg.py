"""Contractions: ``dot_general`` and ``convolution`` (StableHLO semantics).

Accumulation in the reference (the oracle): f16/bf16 accumulate in float32 and round
once, f32 accumulates in float64 and rounds once, f64 in float64; integers accumulate
modulo 2**bits of their own type (exact wrap-around, whatever the summation order).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..dtypes import NUMERIC_DTYPES, DType, dtype_of
from ..ir import Op, TensorType
from ..opdef import INT, INT_PAIRS, INTS, STR, Attr, Ctx, Env, Fusion, InterpretError, OpDef
from ..shape_facts import Divisible, Eq, Fact
from ..symbolic import Expr, floordiv


def acc_dtype(dt: DType) -> np.dtype:
    """The dtype the reference accumulates products of ``dt`` in."""
    if dt in (DType.F16, DType.BF16):
        return np.dtype(np.float32)
    if dt.is_float:
        return np.dtype(np.float64)
    return np.dtype(np.int64)  # integers: cast back wraps modulo 2**bits


def _prod(xs: Iterable[int]) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


# -- dot_general ------------------------------------------------------------------------

class DotGeneral(OpDef):
    """Batched tensor contraction (StableHLO ``dot_general``).

    ``lhs_batch[i]`` of lhs pairs with ``rhs_batch[i]`` of rhs (equal sizes) and
    ``lhs_contract[i]`` with ``rhs_contract[i]`` (equal sizes, summed over). The result
    dims are the batch dims (in ``lhs_batch`` order), then lhs's remaining ("free") dims
    in order, then rhs's free dims in order::

        result[b..., i..., j...] = sum_k lhs[b, i, k] * rhs[b, k, j]

    Both operands have the same numeric (non-bool) dtype, which is the result's dtype.
    f16/bf16 accumulate in float32; integers wrap in their own type. A contraction over
    an empty dim gives zeros.
    """

    name = "dot_general"
    operands = ("lhs", "rhs")
    attrs = {
        "lhs_batch": Attr(INTS, doc="batch axes of lhs"),
        "rhs_batch": Attr(INTS, doc="batch axes of rhs, paired with lhs_batch"),
        "lhs_contract": Attr(INTS, doc="contracting axes of lhs"),
        "rhs_contract": Attr(INTS, doc="contracting axes of rhs, paired with lhs_contract"),
    }
    #: a GEMM through the BLAS the runtime finds (native.library)
    traits = frozenset({"pure"})
    fusion = Fusion.LIBRARY

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        ctx.dtype_in(0, NUMERIC_DTYPES, "a numeric dtype:")
        ctx.same_dtype(0, 1)
        lhs, rhs = ctx.types
        lb, rb = attrs["lhs_batch"], attrs["rhs_batch"]
        lc, rc = attrs["lhs_contract"], attrs["rhs_contract"]
        if len(lb) != len(rb):
            ctx.fail(f"attributes lhs_batch={list(lb)} and rhs_batch={list(rb)} must have the "
                     f"same length")
        if len(lc) != len(rc):
            ctx.fail(f"attributes lhs_contract={list(lc)} and rhs_contract={list(rc)} must "
                     f"have the same length")
        ctx.axes(lb, lhs.rank, "lhs_batch")
        ctx.axes(lc, lhs.rank, "lhs_contract")
        ctx.axes(rb, rhs.rank, "rhs_batch")
        ctx.axes(rc, rhs.rank, "rhs_contract")
        for side, b, c in (("lhs", lb, lc), ("rhs", rb, rc)):
            both = set(b) & set(c)
            if both:
                ctx.fail(f"axes {sorted(both)} of {side} are both in {side}_batch and "
                         f"{side}_contract")
        batch = []
        for a, b in zip(lb, rb, strict=True):
            batch.append(ctx.unify(lhs.shape[a], rhs.shape[b],
                                   f"lhs_batch axis {a} of operand #0 'lhs' ({lhs}) vs "
                                   f"rhs_batch axis {b} of operand #1 'rhs' ({rhs})"))
        for a, b in zip(lc, rc, strict=True):
            ctx.unify(lhs.shape[a], rhs.shape[b],
                      f"lhs_contract axis {a} of operand #0 'lhs' ({lhs}) vs rhs_contract axis "
                      f"{b} of operand #1 'rhs' ({rhs})")
        lfree = [lhs.shape[i] for i in range(lhs.rank) if i not in lb and i not in lc]
        rfree = [rhs.shape[i] for i in range(rhs.rank) if i not in rb and i not in rc]
        return [TensorType(lhs.dtype, tuple(batch + lfree + rfree))]

    @classmethod
    def facts(cls, op: Op) -> Iterable[Fact]:
        lhs, rhs = op.operands[0].shape, op.operands[1].shape
        pairs = list(zip(op.attrs["lhs_batch"], op.attrs["rhs_batch"], strict=True))
        pairs += list(zip(op.attrs["lhs_contract"], op.attrs["rhs_contract"], strict=True))
        for a, b in pairs:
            if lhs[a] != rhs[b]:
                yield Eq(lhs[a], rhs[b])

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        lhs, rhs = inputs
        dt = dtype_of(lhs.dtype)
        lb, rb = list(attrs["lhs_batch"]), list(attrs["rhs_batch"])
        lc, rc = list(attrs["lhs_contract"]), list(attrs["rhs_contract"])
        for what, ls, rs in (("batch", lb, rb), ("contracting", lc, rc)):
            for a, b in zip(ls, rs, strict=True):
                if lhs.shape[a] != rhs.shape[b]:
                    raise InterpretError(
                        f"dot_general: {what} axis {a} of lhs {lhs.shape} has size "
                        f"{lhs.shape[a]} but {what} axis {b} of rhs {rhs.shape} has size "
                        f"{rhs.shape[b]}")
        lf = [i for i in range(lhs.ndim) if i not in lb and i not in lc]
        rf = [i for i in range(rhs.ndim) if i not in rb and i not in rc]
        bshape = tuple(lhs.shape[i] for i in lb)
        lfs = tuple(lhs.shape[i] for i in lf)
        rfs = tuple(rhs.shape[i] for i in rf)
        k = _prod(lhs.shape[i] for i in lc)
        acc = acc_dtype(dt)
        a = lhs.astype(acc).transpose(lb + lf + lc).reshape(bshape + (_prod(lfs), k))
        b = rhs.astype(acc).transpose(rb + rc + rf).reshape(bshape + (k, _prod(rfs)))
        out = np.matmul(a, b).reshape(bshape + lfs + rfs)
        with np.errstate(all="ignore"):
            return out.astype(dt.np)


# -- convolution ------------------------------------------------------------------------

_SPATIAL = "DHW"


def _parse_layouts(ctx: Ctx | None, attrs: Mapping[str, Any]
                   ) -> tuple[dict[str, int], dict[str, int], dict[str, int], list[str]]:
    """Positions of each letter in the three layouts and the spatial letters in order.

    With ``ctx`` a malformed layout is a VerifyError, without it an InterpretError.
    """

    def fail(msg: str) -> None:
        if ctx is not None:
            ctx.fail(msg)
        raise InterpretError(f"convolution: {msg}")

    out = []
    spatial_sets = []
    for attr, fixed in (("input_layout", "NC"), ("kernel_layout", "OI"),
                        ("output_layout", "NC")):
        layout = attrs[attr]
        allowed = fixed + _SPATIAL
        bad = [c for c in layout if c not in allowed]
        if bad or len(set(layout)) != len(layout) or any(c not in layout for c in fixed):
            fail(f"attribute {attr}={layout!r} must hold {fixed[0]} and {fixed[1]} once each "
                 f"and 1 to 3 distinct spatial letters from {_SPATIAL}")
        spatial = [c for c in layout if c in _SPATIAL]
        if not 1 <= len(spatial) <= 3:
            fail(f"attribute {attr}={layout!r} must have 1 to 3 spatial dims (letters from "
                 f"{_SPATIAL}), found {len(spatial)}")
        spatial_sets.append(set(spatial))
        out.append({c: i for i, c in enumerate(layout)})
    if not spatial_sets[0] == spatial_sets[1] == spatial_sets[2]:
        fail(f"input_layout={attrs['input_layout']!r}, kernel_layout="
             f"{attrs['kernel_layout']!r} and output_layout={attrs['output_layout']!r} must "
             f"use the same spatial letters")
    spatial_order = [c for c in attrs["input_layout"] if c in _SPATIAL]
    return out[0], out[1], out[2], spatial_order


def _dilated(d: Expr, dilation: int) -> Expr:
    return d if dilation == 1 else (d - 1) * dilation + 1


class Convolution(OpDef):
    """N-d convolution (cross-correlation), exactly StableHLO ``convolution``.

    Layouts are letter strings: ``input_layout`` and ``output_layout`` hold ``N`` (batch),
    ``C`` (features) and the spatial letters, ``kernel_layout`` holds ``O`` (output
    features), ``I`` (input features) and the same spatial letters; the spatial letters
    are 1 to 3 of ``D``, ``H``, ``W``, the same set in all three (e.g. ``NCHW``/``OIHW``
    /``NCHW``, ``NHWC``/``HWIO``/``NHWC``, ``NCW``, ``NCDHW``). Entry ``i`` of
    ``window_strides``, ``padding`` (``[low, high]`` pairs), ``lhs_dilation`` and
    ``rhs_dilation`` applies to the ``i``-th spatial letter of ``input_layout``.

    Per spatial dim: the input is dilated (``lhs_dilation - 1`` zeros between elements,
    size ``(d - 1) * lhs_dilation + 1``), padded with zeros (negative padding crops), and
    the kernel taps are spread ``rhs_dilation`` apart (dilated size
    ``(k - 1) * rhs_dilation + 1``); the output size is
    ``floordiv(padded - dilated_kernel, stride) + 1``, and must not be negative (a window
    larger than the padded input is an error, as in the frameworks, instead of StableHLO's
    empty result). A spatial input dim of size 0 with ``lhs_dilation > 1``, a kernel
    spatial dim of size 0 and a negative padded size are errors too.

    ``feature_group_count = G`` splits the input features and the kernel's output features
    into G groups convolved pairwise (C == I * G, O % G == 0); ``batch_group_count = G``
    splits the input batch and the kernel's output features into G groups (N % G == 0,
    O % G == 0, C == I, output batch N / G); at most one of them exceeds 1. The result
    has the operands' dtype, output batch ``N / batch_group_count`` and ``O`` features.
    f16/bf16 accumulate in float32, integers wrap in their own type.
    """

    name = "convolution"
    operands = ("lhs", "rhs")
    attrs = {
        "window_strides": Attr(INTS, doc="stride per spatial dim (>= 1)"),
        "padding": Attr(INT_PAIRS, doc="[low, high] zero padding per spatial dim"),
        "lhs_dilation": Attr(INTS, doc="input dilation per spatial dim (>= 1)"),
        "rhs_dilation": Attr(INTS, doc="kernel dilation per spatial dim (>= 1)"),
        "feature_group_count": Attr(INT, default=1),
        "batch_group_count": Attr(INT, default=1),
        "input_layout": Attr(STR, doc="e.g. NCHW, NHWC, NCW, NCDHW"),
        "kernel_layout": Attr(STR, doc="e.g. OIHW, HWIO"),
        "output_layout": Attr(STR, doc="e.g. NCHW, NHWC"),
    }
    traits = frozenset({"pure"})

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        ctx.dtype_in(0, NUMERIC_DTYPES, "a numeric dtype:")
        ctx.same_dtype(0, 1)
        lhs, rhs = ctx.types
        il, kl, ol, spatial = _parse_layouts(ctx, attrs)
        n_sp = len(spatial)
        if lhs.rank != n_sp + 2:
            ctx.fail(f"operand #0 'lhs' ({lhs}) has rank {lhs.rank}, expected "
                     f"{n_sp + 2} for input_layout={attrs['input_layout']!r}")
        if rhs.rank != n_sp + 2:
            ctx.fail(f"operand #1 'rhs' ({rhs}) has rank {rhs.rank}, expected "
                     f"{n_sp + 2} for kernel_layout={attrs['kernel_layout']!r}")
        for key in ("window_strides", "padding", "lhs_dilation", "rhs_dilation"):
            if len(attrs[key]) != n_sp:
                ctx.fail(f"attribute {key} has {len(attrs[key])} entries, expected one per "
                         f"spatial dim ({n_sp})")
        for key in ("window_strides", "lhs_dilation", "rhs_dilation"):
            if any(v < 1 for v in attrs[key]):
                ctx.fail(f"attribute {key}={list(attrs[key])} must be >= 1")
        fgc, bgc = attrs["feature_group_count"], attrs["batch_group_count"]
        if fgc < 1 or bgc < 1:
            ctx.fail(f"attributes feature_group_count={fgc} and batch_group_count={bgc} must "
                     f"be >= 1")
        if fgc > 1 and bgc > 1:
            ctx.fail(f"attributes feature_group_count={fgc} and batch_group_count={bgc}: at "
                     f"most one may exceed 1")
        n, c = lhs.shape[il["N"]], lhs.shape[il["C"]]
        o, i = rhs.shape[kl["O"]], rhs.shape[kl["I"]]
        if c.is_const and c.value % fgc:
            ctx.fail(f"operand #0 'lhs' ({lhs}) has {c} input features, not a multiple of "
                     f"feature_group_count={fgc}")
        ctx.unify(c, i * fgc, f"input features of operand #0 'lhs' ({lhs}) vs kernel input "
                              f"features * feature_group_count={fgc} of operand #1 'rhs' "
                              f"({rhs})")
        if n.is_const and n.value % bgc:
            ctx.fail(f"operand #0 'lhs' ({lhs}) has batch {n}, not a multiple of "
                     f"batch_group_count={bgc}")
        for g, key in ((fgc, "feature_group_count"), (bgc, "batch_group_count")):
            if o.is_const and o.value % g:
                ctx.fail(f"operand #1 'rhs' ({rhs}) has {o} output features, not a multiple "
                         f"of {key}={g}")
        out_spatial: dict[str, Expr] = {}
        for k, letter in enumerate(spatial):
            d, w = lhs.shape[il[letter]], rhs.shape[kl[letter]]
            stride, (lo, hi) = attrs["window_strides"][k], attrs["padding"][k]
            ld, rd = attrs["lhs_dilation"][k], attrs["rhs_dilation"][k]
            if w.is_const and w.value == 0:
                ctx.fail(f"operand #1 'rhs' ({rhs}) has an empty spatial dim {letter}")
            if d.is_const and d.value == 0 and ld > 1:
                ctx.fail(f"operand #0 'lhs' ({lhs}) has an empty spatial dim {letter}, "
                         f"unsupported with lhs_dilation={ld}")
            padded = _dilated(d, ld) + lo + hi
            size = floordiv(padded - _dilated(w, rd), stride) + 1
            if (padded.is_const and padded.value < 0) or (size.is_const and size.value < 0):
                ctx.fail(f"spatial dim {letter}: the window (kernel {w}, rhs_dilation={rd}) "
                         f"does not fit the padded input (size {d}, lhs_dilation={ld}, "
                         f"padding=[{lo}, {hi}])")
            out_spatial[letter] = size
        dims: dict[str, Expr] = {"N": floordiv(n, bgc), "C": o, **out_spatial}
        return [TensorType(lhs.dtype, tuple(dims[ch] for ch in attrs["output_layout"]))]

    @classmethod
    def facts(cls, op: Op) -> Iterable[Fact]:
        attrs = op.attrs
        lhs, rhs = op.operands[0].shape, op.operands[1].shape
        il, kl = attrs["input_layout"], attrs["kernel_layout"]
        c, i = lhs[il.index("C")], rhs[kl.index("I")]
        n, o = lhs[il.index("N")], rhs[kl.index("O")]
        fgc, bgc = attrs["feature_group_count"], attrs["batch_group_count"]
        if c != i * fgc:
            yield Eq(c, i * fgc)
        if bgc > 1 and not n.is_const:
            yield Divisible(n, bgc)
        if max(fgc, bgc) > 1 and not o.is_const:
            yield Divisible(o, max(fgc, bgc))

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        lhs, rhs = inputs
        dt = dtype_of(lhs.dtype)
        il, kl, ol, spatial = _parse_layouts(None, attrs)
        ns = len(spatial)
        if lhs.ndim != ns + 2 or rhs.ndim != ns + 2:
            raise InterpretError(f"convolution: operand ranks {lhs.ndim} and {rhs.ndim} do "
                                 f"not match the layouts")
        # canonical views: lhs (N, C, *spatial), rhs (O, I, *spatial)
        x = lhs.transpose([il["N"], il["C"]] + [il[s] for s in spatial])
        w = rhs.transpose([kl["O"], kl["I"]] + [kl[s] for s in spatial])
        n, c = x.shape[:2]
        o, i = w.shape[:2]
        fgc, bgc = attrs["feature_group_count"], attrs["batch_group_count"]
        g = fgc * bgc  # at most one exceeds 1
        if c != i * fgc or n % bgc or o % g:
            raise InterpretError(
                f"convolution: input (batch {n}, features {c}) and kernel (out features {o}, "
                f"in features {i}) do not fit feature_group_count={fgc}, "
                f"batch_group_count={bgc}")
        acc = acc_dtype(dt)
        strides, pads = attrs["window_strides"], attrs["padding"]
        lds, rds = attrs["lhs_dilation"], attrs["rhs_dilation"]
        # dilate, then pad (negative padding crops)
        sp_in = x.shape[2:]
        for k, d in enumerate(sp_in):
            if d == 0 and lds[k] > 1:
                raise InterpretError(f"convolution: spatial dim {spatial[k]} of the input is "
                                     f"empty, unsupported with lhs_dilation={lds[k]}")
        dil_shape = tuple((d - 1) * ld + 1 if d else 0 for d, ld in zip(sp_in, lds, strict=True))
        xd = np.zeros((n, c) + dil_shape, acc)
        xd[(slice(None), slice(None)) + tuple(slice(None, None, ld) for ld in lds)] = x
        xd = np.pad(xd, [(0, 0), (0, 0)] + [(max(lo, 0), max(hi, 0)) for lo, hi in pads])
        crop = tuple(slice(max(-lo, 0), xd.shape[2 + k] - max(-hi, 0))
                     for k, (lo, hi) in enumerate(pads))
        padded = tuple(dd + lo + hi for dd, (lo, hi) in zip(dil_shape, pads, strict=True))
        ksz = w.shape[2:]
        out_sp = []
        for k in range(ns):
            dk = (ksz[k] - 1) * rds[k] + 1
            size = (padded[k] - dk) // strides[k] + 1
            if ksz[k] == 0 or padded[k] < 0 or size < 0:
                raise InterpretError(
                    f"convolution: spatial dim {spatial[k]}: the window (kernel {ksz[k]}, "
                    f"rhs_dilation={rds[k]}) does not fit the padded input (size "
                    f"{sp_in[k]}, lhs_dilation={lds[k]}, padding={list(pads[k])})")
            out_sp.append(size)
        xp = xd[(slice(None), slice(None)) + crop]
        nb, ci, og = n // bgc, c // fgc, o // g
        m = nb * _prod(out_sp)
        wc = w.astype(acc)
        result = np.zeros((g, og, m), acc)
        for tap in itertools.product(*(range(s) for s in ksz)):
            sl = tuple(slice(t * rd, t * rd + (size - 1) * st + 1, st) if size else slice(0, 0)
                       for t, rd, size, st in zip(tap, rds, out_sp, strides, strict=True))
            v = xp[(slice(None), slice(None)) + sl]  # (N, C, *out_sp)
            # group the batch (batch groups) and features (feature groups): (G, Ci, Nb*out)
            v = v.reshape((bgc, nb, fgc, ci) + tuple(out_sp))
            v = np.moveaxis(v, 1, 3).reshape(g, ci, m)
            wt = wc[(slice(None), slice(None)) + tap].reshape(g, og, ci)
            result += np.matmul(wt, v)
        out = result.reshape((g, og, nb) + tuple(out_sp))
        out = np.moveaxis(out, 2, 0).reshape((nb, o) + tuple(out_sp))  # (N, O, *spatial)
        canon = "NC" + "".join(spatial)
        out = out.transpose([canon.index(ch) for ch in attrs["output_layout"]])
        with np.errstate(all="ignore"):
            return np.ascontiguousarray(out).astype(dt.np)
