"""Matrix products (``matmul``, ``bmm``) and their gradients, and ``add_n``.

Every product is ONE ``dot_general`` (the native engine calls BLAS for it): transpose
flags become the choice of contracted axis, a weight without batch dims is contracted
as it is (``[B, S, H] x [H, N]`` is a ``[B*S, H] x [H, N]`` GEMM, the weight never
broadcast), and a gradient that sums over broadcast batch dims contracts them in the
same GEMM instead of summing afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from disc_core.ir import Value
from disc_core.symbolic import Expr

from ..lowering import ConversionError, Lowering
from .registry import ALL_DTYPES, FLOAT_DTYPES, converter


def _is_one(d: Expr) -> bool:
    return d.is_const and d.value == 1


def product(ctx: Lowering, p: Value, pc: int, q: Value, qc: int,
            batch: Sequence[Expr]) -> Value:
    """``r[batch..., i, j] = sum_k p[..., i, k] q[..., k, j]`` over the last two dims of
    ``p`` and ``q`` (rank >= 2), ``pc``/``qc`` (-1 or -2) naming the contracted one of
    each. The batch dims broadcast (numpy rules); ``batch`` is the batch shape wanted:
    their broadcast shape (a forward product) or that of one operand (a gradient), the
    broadcast dims it lacks or holds as a static 1 being summed over."""
    pb, qb = list(p.shape[:-2]), list(q.shape[:-2])
    if not qb or not pb:
        r = ctx.op("dot_general", p, q, lhs_batch=[], rhs_batch=[],
                   lhs_contract=[p.rank + pc], rhs_contract=[q.rank + qc])
        if not pb and qb:  # [i, qb..., j] -> [qb..., i, j]
            n = len(qb)
            r = ctx.op("transpose", r, permutation=list(range(1, n + 1)) + [0, n + 1])
        full = list(r.shape[:-2])
        kept = _kept(full, batch)
        summed = [i for i in range(len(full)) if i not in kept]
        if summed:
            r = ctx.op("reduce", r, kind="sum", axes=summed)
    else:
        full = list(ctx.broadcast_shape(pb, qb))
        nb = len(full)
        p = ctx.broadcast_to(p, full + list(p.shape[-2:]))
        q = ctx.broadcast_to(q, full + list(q.shape[-2:]))
        kept = _kept(full, batch)
        summed = [i for i in range(nb) if i not in kept]
        r = ctx.op("dot_general", p, q, lhs_batch=kept, rhs_batch=kept,
                   lhs_contract=summed + [nb + 2 + pc], rhs_contract=summed + [nb + 2 + qc])
    off = len(full) - len(batch)
    dims = iter(r.shape[:-2])
    shape = [next(dims) if off + i in kept else 1 for i in range(len(batch))]
    r = ctx.reshape(r, shape + list(r.shape[-2:]))
    # a symbolic dim computed under another symbol (or a static size): checked at run time
    return ctx.broadcast_to(r, list(batch) + list(r.shape[-2:]))


def _kept(full: Sequence[Expr], batch: Sequence[Expr]) -> list[int]:
    """The broadcast batch dims (of ``full``) the result keeps: those ``batch`` has, unless
    it holds them as a static 1 that stretched (those, and the leading ones it lacks, are
    summed over)."""
    off = len(full) - len(batch)
    if off < 0:
        raise ConversionError(f"a product of batch dims {list(full)} for batch {list(batch)}")
    return [i for i in range(off, len(full))
            if not (_is_one(batch[i - off]) and not _is_one(full[i]))]


class _Matmul:
    """Paddle's matmul operands as matrices: a 1-D x is a row ``[1, K]`` and a 1-D y a
    column ``[K, 1]`` (their transpose flag ignored, as Paddle does), the dim removed from
    the result; otherwise the flags transpose the last two dims."""

    def __init__(self, ctx: Lowering, x: Value, y: Value, tx: bool, ty: bool):
        if x.rank == 0 or y.rank == 0:
            raise ConversionError("pd_op.matmul of a 0-D operand")
        self.x_shape, self.y_shape = list(x.shape), list(y.shape)
        self.x1, self.y1 = x.rank == 1, y.rank == 1
        self.x = ctx.reshape(x, [1, x.shape[0]]) if self.x1 else x
        self.y = ctx.reshape(y, [y.shape[0], 1]) if self.y1 else y
        self.tx, self.ty = tx and not self.x1, ty and not self.y1
        self.xb, self.yb = list(self.x.shape[:-2]), list(self.y.shape[:-2])

    def out_matrix(self, ctx: Lowering, out: Value) -> Value:
        """The output (gradient) with the dims a 1-D operand removed put back."""
        shape = list(out.shape)
        if self.x1 and self.y1:
            return ctx.reshape(out, [1, 1])
        if self.y1:
            shape = shape + [1]
        if self.x1:
            shape = shape[:-1] + [1] + shape[-1:]
        return ctx.reshape(out, shape)

    def forward(self, ctx: Lowering) -> Value:
        batch = ctx.broadcast_shape(self.xb, self.yb)
        r = product(ctx, self.x, -2 if self.tx else -1, self.y, -1 if self.ty else -2, batch)
        shape = list(r.shape)
        if self.y1:
            shape.pop(-1)
        if self.x1:
            shape.pop(-2 if not self.y1 else -1)
        return ctx.reshape(r, shape)

    def x_grad(self, ctx: Lowering, g: Value) -> Value:
        """dX = dOut @ Y^T (a transposed x gets its transpose), summed to x's batch."""
        yn = -1 if not self.ty else -2  # y's N axis
        if self.tx:
            r = product(ctx, self.y, yn, g, -1, self.xb)
        else:
            r = product(ctx, g, -1, self.y, yn, self.xb)
        return ctx.reshape(r, self.x_shape)

    def y_grad(self, ctx: Lowering, g: Value) -> Value:
        """dY = X^T @ dOut (a transposed y gets its transpose), summed to y's batch."""
        xm = -1 if self.tx else -2  # x's M axis
        if self.ty:
            r = product(ctx, g, -2, self.x, xm, self.yb)
        else:
            r = product(ctx, self.x, xm, g, -2, self.yb)
        return ctx.reshape(r, self.y_shape)


def _check_dtypes(op: Any, x: Value, y: Value) -> None:
    if x.dtype != y.dtype:
        raise ConversionError(f"{op.name()}: operands of dtypes {x.dtype} and {y.dtype}",
                              code="unsupported_dtype")


@converter("pd_op.matmul", dtypes=FLOAT_DTYPES)
def matmul(ctx: Lowering, op: Any) -> Value:
    x, y = ctx.input(op, 0), ctx.input(op, 1)
    _check_dtypes(op, x, y)
    return _Matmul(ctx, x, y, bool(ctx.attr(op, "transpose_x", False)),
                   bool(ctx.attr(op, "transpose_y", False))).forward(ctx)


@converter("pd_op.matmul_grad", dtypes=FLOAT_DTYPES)
def matmul_grad(ctx: Lowering, op: Any) -> list[Value | None]:
    """(x_grad, y_grad); an unset one (no gradient wanted) is not computed."""
    x, y, g = ctx.input(op, 0), ctx.input(op, 1), ctx.input(op, 2)
    _check_dtypes(op, x, y)
    m = _Matmul(ctx, x, y, bool(ctx.attr(op, "transpose_x", False)),
                bool(ctx.attr(op, "transpose_y", False)))
    g = m.out_matrix(ctx, g)
    return [m.x_grad(ctx, g) if op.result(0).initialized() else None,
            m.y_grad(ctx, g) if op.result(1).initialized() else None]


def _bmm_operands(op: Any, x: Value, y: Value) -> None:
    _check_dtypes(op, x, y)
    if x.rank != 3 or y.rank != 3:
        raise ConversionError(f"{op.name()} needs 3-D operands, got ranks {x.rank}, {y.rank}")


@converter("pd_op.bmm", dtypes=FLOAT_DTYPES)
def bmm(ctx: Lowering, op: Any) -> Value:
    x, y = ctx.input(op, 0), ctx.input(op, 1)
    _bmm_operands(op, x, y)
    return _Matmul(ctx, x, y, False, False).forward(ctx)


@converter("pd_op.bmm_grad", dtypes=FLOAT_DTYPES)
def bmm_grad(ctx: Lowering, op: Any) -> list[Value | None]:
    x, y, g = ctx.input(op, 0), ctx.input(op, 1), ctx.input(op, 2)
    _bmm_operands(op, x, y)
    m = _Matmul(ctx, x, y, False, False)
    return [m.x_grad(ctx, g) if op.result(0).initialized() else None,
            m.y_grad(ctx, g) if op.result(1).initialized() else None]


@converter("pd_op.add_n", dtypes=ALL_DTYPES)
def add_n(ctx: Lowering, op: Any) -> Value:
    """The sum of a vector of tensors (Paddle requires equal shapes; broadcasting is the
    same rule checked at run time for symbolic dims)."""
    items = [ctx.value(v) for v in ctx.vector(ctx.operand(op, 0))]
    if not items:
        raise ConversionError("pd_op.add_n of no tensors")
    if items[0].dtype.is_bool or any(v.dtype != items[0].dtype for v in items):
        raise ConversionError("pd_op.add_n needs numeric operands of one dtype",
                              code="unsupported_dtype")
    items = ctx.broadcast_all(*items)
    out = items[0]
    for v in items[1:]:
        out = ctx.op("add", out, v)
    return out

