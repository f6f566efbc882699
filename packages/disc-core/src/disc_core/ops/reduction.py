"""Reductions: ``reduce`` (sum, prod, max, min, and, or over a set of axes), ``argmax``
and ``argmin``; and the scan ``cumulative`` (running sum, prod, max, min along an axis).

Accumulation (the reference is the oracle, so it accumulates at least as precisely as any
backend): f16/bf16 accumulate in float32 and round once; f32 accumulates in float64 and
rounds once; f64 in float64; integers accumulate modulo 2**bits of their own type (sums
and products wrap exactly as a same-width accumulator would, whatever the order).
Backends accumulating f32 in f32 therefore differ from the reference by rounding only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..dtypes import ALL_DTYPES, NUMERIC_DTYPES, DType, dtype_of
from ..index_map import DimMap, OperandMap, kdim
from ..ir import Op, TensorType, Value
from ..opdef import (
    DTYPE,
    INT,
    INTS,
    STR,
    Attr,
    Ctx,
    Env,
    Fusion,
    InterpretError,
    OpDef,
    Rewriter,
    ScanSpec,
)
from .linalg import acc_dtype

_KIND_DTYPES: dict[str, tuple[DType, ...]] = {
    "sum": NUMERIC_DTYPES,
    "prod": NUMERIC_DTYPES,
    "max": ALL_DTYPES,
    "min": ALL_DTYPES,
    "and": (DType.BOOL,),
    "or": (DType.BOOL,),
}


def identity(kind: str, dt: DType) -> Any:
    """The value an empty ``reduce`` of ``kind`` over ``dt`` produces."""
    if kind == "sum":
        return 0
    if kind == "prod":
        return 1
    if kind == "and":
        return True
    if kind == "or":
        return False
    if dt.is_bool:
        return kind == "min"  # max of nothing is False, min of nothing is True
    if dt.is_float:
        return -np.inf if kind == "max" else np.inf
    info = np.iinfo(dt.np)
    return info.min if kind == "max" else info.max


class _Reduction(OpDef):
    """What the native backend knows of every reduction: the operand's reduced dims take
    the kernel dims the result does not use (a row kernel's innermost, a column kernel's
    leading ones), in order; the kept dims follow the result's."""

    traits = frozenset({"pure", "reduction"})
    fusion = Fusion.REDUCTION

    @classmethod
    def index_map(cls, op: Op, i: int, result_map: DimMap, kernel_rank: int) -> OperandMap:
        axes = cls.red_axes(op)
        assert axes is not None
        kept = iter(result_map)
        used = {kdim(e) for e in result_map}
        missing = iter(d for d in range(kernel_rank) if d not in used)
        return tuple(next(missing) if j in axes else next(kept)  # type: ignore[misc]
                     for j in range(op.operands[0].rank)), {}


class Reduce(_Reduction):
    """Reduce ``x`` over ``axes`` (removed from the result; any order, no repeats).

    ``kind`` is one of:

    * ``sum``, ``prod``: numeric dtypes; empty reductions give 0 and 1. Integers wrap.
    * ``max``, ``min``: every dtype (on bool they are or/and); NaN propagates (any NaN in
      the reduced elements gives NaN); empty reductions give -inf/+inf for floats, the
      dtype's min/max for integers, False/True for bool.
    * ``and``, ``or``: bool only; empty reductions give True and False.

    The result has ``x``'s dtype. See the module docstring for accumulation precision.
    ``axes=[]`` is the identity (and canonicalizes away).
    """

    name = "reduce"
    operands = ("x",)
    attrs = {
        "kind": Attr(STR, choices=tuple(_KIND_DTYPES), doc="sum, prod, max, min, and, or"),
        "axes": Attr(INTS, doc="the axes reduced over, removed from the result"),
    }

    @classmethod
    def red_axes(cls, op: Op) -> list[int]:
        return sorted(op.attrs["axes"])

    @classmethod
    def reduction_kind(cls, op: Op) -> str:
        return op.attrs["kind"]

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        kind = attrs["kind"]
        ctx.dtype_in(0, _KIND_DTYPES[kind], f"for kind={kind} one of")
        x = ctx.types[0]
        ctx.axes(attrs["axes"], x.rank, "axes")
        axes = set(attrs["axes"])
        return [x.with_shape(d for i, d in enumerate(x.shape) if i not in axes)]

    @classmethod
    def canonicalize(cls, op: Op, rw: Rewriter) -> Value | None:
        return op.operands[0] if not op.attrs["axes"] else None

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        x = inputs[0]
        dt = dtype_of(x.dtype)
        kind = attrs["kind"]
        axes = tuple(attrs["axes"])
        if any(not 0 <= a < x.ndim for a in axes):
            raise InterpretError(f"reduce: axes={list(axes)} out of range for an input of "
                                 f"shape {x.shape}")
        if kind in ("sum", "prod"):
            fn = np.sum if kind == "sum" else np.prod
            out = fn(x.astype(acc_dtype(dt)), axis=axes)
        elif kind in ("max", "min"):
            fn = np.max if kind == "max" else np.min
            out = fn(x.astype(dt.compute_np, copy=False), axis=axes,
                     initial=identity(kind, dt))
        elif kind == "and":
            out = np.all(x, axis=axes)
        else:
            out = np.any(x, axis=axes)
        with np.errstate(all="ignore"):
            return np.asarray(out).astype(dt.np)


class _ArgReduce(_Reduction):
    """Shared by argmax and argmin."""

    operands = ("x",)
    attrs = {
        "axis": Attr(INT, doc="the axis searched, removed from the result"),
        "index_dtype": Attr(DTYPE, default="i64", choices=(DType.I32, DType.I64),
                            doc="i32 or i64"),
    }
    _np_fn: Any

    @classmethod
    def red_axes(cls, op: Op) -> list[int]:
        return [op.attrs["axis"]]

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        x = ctx.types[0]
        ctx.axis(attrs["axis"], x.rank, "axis")
        axis = attrs["axis"]
        rest = [d for i, d in enumerate(x.shape) if i != axis]
        size = x.shape[axis]
        if size.is_const and size.value == 0 and all(d.is_const and d.value > 0 for d in rest):
            ctx.fail(f"operand #0 'x' ({x}) has size 0 along axis={axis}, so the non-empty "
                     f"result has no index to hold")
        return [TensorType(attrs["index_dtype"], tuple(rest))]

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        x = inputs[0]
        axis = attrs["axis"]
        idt = attrs["index_dtype"].np
        if not 0 <= axis < x.ndim:
            raise InterpretError(f"{cls.name}: axis={axis} out of range for an input of "
                                 f"shape {x.shape}")
        out_shape = x.shape[:axis] + x.shape[axis + 1:]
        if x.shape[axis] == 0:
            if int(np.prod(out_shape)) > 0:
                raise InterpretError(f"{cls.name}: the input of shape {x.shape} is empty along "
                                     f"axis={axis} but the result {out_shape} is not")
            return np.zeros(out_shape, idt)
        xc = x.astype(dtype_of(x.dtype).compute_np, copy=False)
        # numpy returns the first occurrence on ties and treats NaN as both the max and
        # the min (the first NaN wins), as torch does.
        return np.asarray(cls._np_fn(xc, axis=axis)).astype(idt)


class ArgMax(_ArgReduce):
    """Index of the largest element of ``x`` along ``axis`` (removed from the result).

    Any dtype. Ties give the first occurrence; NaN counts as larger than everything, so
    the first NaN wins (numpy and torch semantics). The result has dtype ``index_dtype``
    (i32 or i64, default i64). An axis of size 0 with a non-empty result is an error
    (VerifyError when static, InterpretError at run time).
    """

    name = "argmax"
    _np_fn = staticmethod(np.argmax)
    arg_compare = ">"


class ArgMin(_ArgReduce):
    """Index of the smallest element of ``x`` along ``axis`` (removed from the result).

    As ``argmax``, with NaN counting as smaller than everything (the first NaN wins).
    """

    name = "argmin"
    _np_fn = staticmethod(np.argmin)
    arg_compare = "<"


_SCAN_KINDS = ("sum", "prod", "max", "min")


class Cumulative(OpDef):
    """Inclusive scan of ``x`` along ``axis``: element ``i`` of the result combines
    elements ``0..i`` (torch ``cumsum``/``cumprod``/``cummax`` values, ``np.cumsum``).

    ``kind`` is ``sum``, ``prod``, ``max`` or ``min``; numeric dtypes; the result has
    ``x``'s shape and dtype. One op with a kind rather than one op per scan, as ``reduce``:
    the backends share the loop that carries the accumulator and differ only in the
    combine step. A reverse scan is ``reverse`` around it. Accumulation is sequential from
    index 0, in the precision ``reduce`` uses (f32 in float64, rounded per element;
    integers wrap); ``max``/``min`` propagate NaN (once a NaN is seen, every later element
    is NaN).
    """

    name = "cumulative"
    operands = ("x",)
    attrs = {
        "kind": Attr(STR, choices=_SCAN_KINDS, doc="sum, prod, max, min"),
        "axis": Attr(INT, doc="the axis scanned along"),
    }
    traits = frozenset({"pure"})
    fusion = Fusion.SCAN

    @classmethod
    def scan_spec(cls, op: Op) -> ScanSpec:
        return ScanSpec(op.attrs["kind"], op.attrs["axis"])

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        ctx.dtype_in(0, NUMERIC_DTYPES, "a numeric dtype:")
        x = ctx.types[0]
        ctx.axis(attrs["axis"], x.rank, "axis")
        return [x]

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        x = inputs[0]
        dt = dtype_of(x.dtype)
        kind, axis = attrs["kind"], attrs["axis"]
        if not 0 <= axis < x.ndim:
            raise InterpretError(f"cumulative: axis={axis} out of range for an input of "
                                 f"shape {x.shape}")
        if kind in ("sum", "prod"):
            fn = np.add if kind == "sum" else np.multiply
            out = fn.accumulate(x.astype(acc_dtype(dt)), axis=axis)
        else:  # np.maximum.accumulate propagates NaN exactly as specified
            fn = np.maximum if kind == "max" else np.minimum
            out = fn.accumulate(x.astype(dt.compute_np, copy=False), axis=axis)
        with np.errstate(all="ignore"):
            return np.asarray(out).astype(dt.np)
