"""Reductions, arg-reductions, matrix products and BiasAddGrad."""

from __future__ import annotations

import tensorflow as tf

from disc_core.dtypes import DType
from disc_core.ir import Value

from ..lowering import ConversionError, Lowering, core_dtype
from .math import reduce
from .registry import FLOAT_DTYPES, NUMERIC_DTYPES, converter


def _axes(ctx: Lowering, op: tf.Operation, rank: int) -> list[int]:
    axes = ctx.static_ints(op.inputs[1], "reduction axes")
    for a in axes:
        if not -rank <= a < max(rank, 1):
            raise ConversionError(f"axis {a} out of range for rank {rank}")
    return sorted({a % rank for a in axes}) if rank else []


def _reduction(kind: str):
    def fn(ctx: Lowering, op: tf.Operation) -> Value:
        x = ctx.value(op.inputs[0])
        return reduce(ctx, x, kind, _axes(ctx, op, x.rank), op.get_attr("keep_dims"))

    return fn


for _tf, _kind in {"Sum": "sum", "Prod": "prod", "Max": "max", "Min": "min"}.items():
    converter(_tf, dtypes=NUMERIC_DTYPES)(_reduction(_kind))
converter("All", dtypes=[tf.bool])(_reduction("and"))
converter("Any", dtypes=[tf.bool])(_reduction("or"))


@converter("Mean", dtypes=NUMERIC_DTYPES)
def mean(ctx: Lowering, op: tf.Operation) -> Value:
    """sum / count; integer means truncate toward zero, as TensorFlow's do."""
    x = ctx.value(op.inputs[0])
    axes = _axes(ctx, op, x.rank)
    total = reduce(ctx, x, "sum", axes, op.get_attr("keep_dims"))
    if not axes:
        return total
    count = ctx.b.element_count(x, axes, x.dtype)
    return ctx.op("div", total, ctx.broadcast_to(count, total.shape))


def _arg(kind: str):
    def fn(ctx: Lowering, op: tf.Operation) -> Value:
        x = ctx.value(op.inputs[0])
        axis = ctx.static_ints(op.inputs[1], "axis")
        if len(axis) != 1 or x.rank == 0:
            raise ConversionError("expects one axis of a tensor of rank >= 1")
        out = core_dtype(op.get_attr("output_type"))
        if out not in (DType.I32, DType.I64):
            raise ConversionError(f"output_type {out}", code="unsupported_dtype")
        return ctx.op(kind, x, axis=axis[0] % x.rank, index_dtype=out)

    return fn


converter("ArgMax", dtypes=NUMERIC_DTYPES)(_arg("argmax"))
converter("ArgMin", dtypes=NUMERIC_DTYPES)(_arg("argmin"))


def _dot(ctx: Lowering, a: Value, b: Value, ta: bool, tb: bool, batch: int) -> Value:
    """a @ b over the last two dims with ``batch`` leading batch dims on both."""
    bd = list(range(batch))
    return ctx.op("dot_general", a, b, lhs_batch=bd, rhs_batch=bd,
                  lhs_contract=[batch + (0 if ta else 1)],
                  rhs_contract=[batch + (1 if tb else 0)])


@converter("MatMul", dtypes=FLOAT_DTYPES)
def matmul(ctx: Lowering, op: tf.Operation) -> Value:
    a, b = ctx.value(op.inputs[0]), ctx.value(op.inputs[1])
    if a.rank != 2 or b.rank != 2:
        raise ConversionError("MatMul of non-matrices")
    out = _dot(ctx, a, b, op.get_attr("transpose_a"), op.get_attr("transpose_b"), 0)
    if out.dtype != a.dtype:
        out = ctx.cast(out, a.dtype)
    return out


@converter("BatchMatMulV2", "BatchMatMulV3", "BatchMatMul", dtypes=FLOAT_DTYPES)
def batch_matmul(ctx: Lowering, op: tf.Operation) -> Value:
    """Batch dims broadcast (numpy matmul rules), then one dot_general."""
    a, b = ctx.value(op.inputs[0]), ctx.value(op.inputs[1])
    if a.rank < 2 or b.rank < 2:
        raise ConversionError("BatchMatMul needs rank >= 2 operands")
    if op.type == "BatchMatMulV3" and op.get_attr("Tout") != op.inputs[0].dtype:
        raise ConversionError("BatchMatMulV3 with a different output type",
                              code="unsupported_dtype")
    if a.dtype != b.dtype:
        raise ConversionError("operands of different dtypes", code="unsupported_dtype")
    batch = ctx.broadcast_shape(a.shape[:-2], b.shape[:-2])
    a = ctx.broadcast_to(a, list(batch) + list(a.shape[-2:]))
    b = ctx.broadcast_to(b, list(batch) + list(b.shape[-2:]))
    return _dot(ctx, a, b, op.get_attr("adj_x"), op.get_attr("adj_y"), len(batch))


@converter("BiasAddGrad", dtypes=NUMERIC_DTYPES)
def bias_add_grad(ctx: Lowering, op: tf.Operation) -> Value:
    g = ctx.value(op.inputs[0])
    fmt = op.get_attr("data_format").decode()
    channel = 1 if fmt.startswith("NC") and g.rank > 2 else g.rank - 1
    return reduce(ctx, g, "sum", [i for i in range(g.rank) if i != channel])


