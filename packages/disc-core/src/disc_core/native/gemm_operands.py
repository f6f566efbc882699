"""Which buffers a GEMM step reads: an operand that only replicates a matrix along the
GEMM's batch dims (a convolution's weights, shared by every image of a per-image GEMM) is
read from its source with batch stride 0, never materialized."""

from __future__ import annotations

from ..ir import Op, Value

__all__ = ["batch_shared_source", "library_reads"]


def batch_shared_source(op: Op, i: int) -> Value | None:
    """The matrix operand ``i`` of GEMM ``op`` repeats for every batch index, when it is a
    broadcast that only adds the leading batch dims (``broadcast_dimensions`` = the rest,
    every source dim equal to the operand's); else None."""
    nb = len(op.attrs.get("lhs_batch", ()))
    v = op.operands[i]
    p = v.producer
    if nb == 0 or p is None or not p.opdef.has_trait("broadcast"):
        return None
    dims = p.attrs.get("broadcast_dimensions")
    src = p.operands[0]
    if dims is None or list(dims) != list(range(nb, v.rank)):
        return None
    if tuple(src.shape) != tuple(v.shape[nb:]):
        return None
    return src


def library_reads(op: Op) -> list[Value]:
    """The values GEMM step ``op`` reads from memory (batch-shared operands: their source)."""
    return [batch_shared_source(op, i) or v for i, v in enumerate(op.operands)]
