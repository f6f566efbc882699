"""``Einsum``: one or two operands, any equation without repeated letters in an operand.

Keras's ``MultiHeadAttention`` and ``EinsumDense`` compute with einsums, so without this
converter their matrix products stay in TensorFlow and the core passes that work on
``dot_general`` (GEMM epilogues, ``fuse-attention``) never see them. A two-operand
equation becomes

1. a sum over every letter that only one operand has and the output lacks;
2. each operand transposed to ``[batch..., its other letters in their own order]``, the
   batch letters (in both operands and in the output) in output order;
3. one ``dot_general`` over the shared letters the output lacks, its operands swapped when
   that makes the result's free dims come out in output order;
4. a transpose to the output order, when one is still needed.

Step 2 gives the batched-matmul form the attention pass matches (batch dims leading, one
row and one column dim): ``aecd,abcd->acbe`` (MHA's scores) becomes ``[a, c, b, d] x
[a, c, e, d] -> [a, c, b, e]`` with no transpose after it. Transposes that only swap an
operand's last two dims fold into the GEMM's flags in the native backend
(``canonicalize-dots``). ``...`` stands for the same broadcast dims in every operand
(numpy's rule, trailing dims aligned); one-operand equations are transposes and sums.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import tensorflow as tf

from disc_core.ir import Value

from ..lowering import ConversionError, Lowering
from .math import reduce
from .registry import FLOAT_DTYPES, converter

#: stand-ins for the dims under ``...`` (never valid einsum letters)
_ELLIPSIS_LETTERS = [chr(0x2460 + i) for i in range(20)]


@dataclass(frozen=True)
class Equation:
    """An einsum equation with ``...`` expanded: one letter per dim of every operand."""

    inputs: tuple[str, ...]
    output: str


def parse_equation(equation: str, ranks: Sequence[int]) -> Equation:
    """``equation`` for operands of ``ranks``, with ``...`` replaced by one stand-in letter
    per dim it covers (trailing-aligned across operands, as numpy broadcasts) and the
    implicit output (no ``->``) spelled out: the ellipsis dims, then the letters used
    once, in alphabetical order."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ConversionError(f"einsum {equation!r} names {len(terms)} operands, got "
                              f"{len(ranks)}")
    ell = 0
    named: list[str] = []
    for term, rank in zip(terms, ranks, strict=True):
        if term.count("...") > 1 or "." in term.replace("...", ""):
            raise ConversionError(f"einsum {equation!r}: malformed ellipsis")
        letters = term.replace("...", "")
        if not all(c.isalpha() for c in letters):
            raise ConversionError(f"einsum {equation!r}: subscripts must be letters")
        extra = rank - len(letters)
        if extra < 0 or (extra > 0 and "..." not in term):
            raise ConversionError(f"einsum {equation!r}: term {term!r} does not match an "
                                  f"operand of rank {rank}")
        ell = max(ell, extra)
        named.append(letters)
    if ell > len(_ELLIPSIS_LETTERS):
        raise ConversionError(f"einsum {equation!r}: ellipsis covers too many dims")
    stand_ins = "".join(_ELLIPSIS_LETTERS[:ell])
    inputs = []
    for term, rank in zip(terms, ranks, strict=True):
        if "..." in term:
            extra = rank - len(term.replace("...", ""))
            term = term.replace("...", stand_ins[ell - extra:])
        inputs.append(term)
    if arrow:
        if out.count("...") > 1 or "." in out.replace("...", ""):
            raise ConversionError(f"einsum {equation!r}: malformed ellipsis")
        out = out.replace("...", stand_ins)
    else:
        counts = {c: sum(t.count(c) for t in named) for c in set("".join(named))}
        out = stand_ins + "".join(sorted(c for c, n in counts.items() if n == 1))
    everywhere = set("".join(inputs))
    for term in (*inputs, out):
        if len(set(term)) != len(term):
            raise ConversionError(f"einsum {equation!r}: a repeated subscript in {term!r} "
                                  "(diagonals are not supported)")
    missing = set(out) - everywhere
    if missing:
        raise ConversionError(f"einsum {equation!r}: output subscripts {sorted(missing)} "
                              "name no operand dim")
    return Equation(tuple(inputs), out)


def _sum_away(ctx: Lowering, x: Value, letters: str, keep: set[str]) -> tuple[Value, str]:
    """``x`` summed over its letters outside ``keep``."""
    axes = [i for i, c in enumerate(letters) if c not in keep]
    if not axes:
        return x, letters
    return (reduce(ctx, x, "sum", axes),
            "".join(c for c in letters if c in keep))


def _permute(ctx: Lowering, x: Value, letters: str, order: str) -> Value:
    perm = [letters.index(c) for c in order]
    return x if perm == list(range(len(perm))) else ctx.op("transpose", x, permutation=perm)


def _broadcast_shared(ctx: Lowering, a: Value, la: str, b: Value, lb: str
                      ) -> tuple[Value, Value]:
    """Both operands with the sizes of their shared letters broadcast to a common size (a
    dim of 1 under ``...`` against a larger one)."""
    common = {c: ctx.broadcast_shape([a.shape[la.index(c)]], [b.shape[lb.index(c)]])[0]
              for c in la if c in lb}
    out = []
    for v, letters in ((a, la), (b, lb)):
        shape = [common.get(c, v.shape[i]) for i, c in enumerate(letters)]
        out.append(ctx.broadcast_to(v, shape))
    return out[0], out[1]


def contract(ctx: Lowering, a: Value, la: str, b: Value, lb: str, out: str) -> Value:
    """The two-operand einsum ``la,lb->out`` as one dot_general (see the module doc)."""
    a, la = _sum_away(ctx, a, la, set(lb) | set(out))
    b, lb = _sum_away(ctx, b, lb, set(la) | set(out))
    a, b = _broadcast_shared(ctx, a, la, b, lb)
    batch = [c for c in out if c in la and c in lb]
    lfree = [c for c in out if c in la and c not in lb]
    rfree = [c for c in out if c in lb and c not in la]
    if lfree and rfree and out.index(rfree[0]) < out.index(lfree[0]):
        a, la, b, lb = b, lb, a, la
    nb = len(batch)
    la2 = "".join(batch) + "".join(c for c in la if c not in batch)
    lb2 = "".join(batch) + "".join(c for c in lb if c not in batch)
    a, b = _permute(ctx, a, la, la2), _permute(ctx, b, lb, lb2)
    shared = [c for c in la2[nb:] if c in lb2]
    y = ctx.op("dot_general", a, b, lhs_batch=list(range(nb)), rhs_batch=list(range(nb)),
               lhs_contract=[la2.index(c) for c in shared],
               rhs_contract=[lb2.index(c) for c in shared])
    ly = ("".join(batch) + "".join(c for c in la2[nb:] if c not in shared)
          + "".join(c for c in lb2[nb:] if c not in shared))
    return _permute(ctx, y, ly, out)


@converter("Einsum", dtypes=FLOAT_DTYPES)
def einsum(ctx: Lowering, op: tf.Operation) -> Value:
    xs = [ctx.value(t) for t in op.inputs]
    if len(xs) not in (1, 2):
        raise ConversionError(f"einsum of {len(xs)} operands (TensorFlow splits longer "
                              "ones into pairs)")
    if len({x.dtype for x in xs}) != 1:
        raise ConversionError("operands of different dtypes", code="unsupported_dtype")
    eq = parse_equation(op.get_attr("equation").decode(), [x.rank for x in xs])
    if len(xs) == 1:
        x, letters = _sum_away(ctx, xs[0], eq.inputs[0], set(eq.output))
        return _permute(ctx, x, letters, eq.output)
    return contract(ctx, xs[0], eq.inputs[0], xs[1], eq.inputs[1], eq.output)
