"""Algebraic simplification rules, as data: (op, condition, rewrite, why).

Only identities that hold for every input, including NaN, infinities and signed zeros,
are listed (so ``x * 0 -> 0`` is integer-only and ``x + 0 -> x`` is not applied to floats,
where -0.0 + 0.0 is +0.0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..dtypes import DType
from ..ir import Op, Value
from ..opdef import Rewriter
from ..symbolic import product
from ..value_facts import splat


@dataclass(frozen=True)
class Rule:
    op: str
    applies: Callable[[Op], bool]
    rewrite: Callable[[Op, Rewriter], Value]
    why: str


def _is(v: Value, x: float | bool) -> bool:
    s = splat(v)
    return s is not None and s == x and not (isinstance(s, float) and s != s)


def _int(op: Op) -> bool:
    return op.results[0].dtype.is_int


def _float(op: Op) -> bool:
    return op.results[0].dtype.is_float


def _same_type(a: Value, op: Op) -> bool:
    return a.type == op.results[0].type


def _lhs(op: Op, rw: Rewriter) -> Value:
    return op.operands[0]


def _rhs(op: Op, rw: Rewriter) -> Value:
    return op.operands[1]


def _widening(src: DType, mid: DType) -> bool:
    """src -> mid -> src is the identity."""
    if src.is_float and mid.is_float:
        order = {DType.F16: 1, DType.BF16: 1, DType.F32: 2, DType.F64: 3}
        return order[mid] > order[src] or mid == src
    if src.is_int and mid.is_int and src.is_signed == mid.is_signed:
        return mid.bits >= src.bits
    if src.is_bool:
        return not mid.is_bool
    return False


def _reduced_reshape_source(op: Op) -> tuple[Value, list[int]] | None:
    """For ``reduce(reshape(u), axes)`` whose axes are exactly the leading dims the reshape
    merged or split (the kept trailing dims untouched): ``u`` and the axes of ``u`` that
    cover the same elements. None for any other reduce."""
    x = op.operands[0]
    p = x.producer
    if p is None or p.name != "reshape":
        return None
    u = p.operands[0]
    axes = sorted(op.attrs["axes"])
    k = len(axes)
    if not axes or axes != list(range(k)):
        return None
    kept = x.rank - k  # trailing dims both sides must share
    ku = u.rank - kept
    if ku < 1 or tuple(x.shape[k:]) != tuple(u.shape[ku:]):
        return None
    if product(x.shape[:k]) != product(u.shape[:ku]):
        return None
    return u, list(range(ku))


def _reduce_source(op: Op, rw: Rewriter) -> Value:
    u, axes = _reduced_reshape_source(op)  # type: ignore[misc]
    return rw.op("reduce", u, kind=op.attrs["kind"], axes=axes)


RULES: list[Rule] = [
    Rule("add", lambda op: _int(op) and _is(op.operands[1], 0)
         and _same_type(op.operands[0], op), _lhs, "x + 0 = x (integers)"),
    Rule("add", lambda op: _int(op) and _is(op.operands[0], 0)
         and _same_type(op.operands[1], op), _rhs, "0 + x = x (integers)"),
    Rule("sub", lambda op: _is(op.operands[1], 0) and _same_type(op.operands[0], op), _lhs,
         "x - 0 = x (also for -0.0 and NaN)"),
    Rule("mul", lambda op: _is(op.operands[1], 1) and _same_type(op.operands[0], op), _lhs,
         "x * 1 = x"),
    Rule("mul", lambda op: _is(op.operands[0], 1) and _same_type(op.operands[1], op), _rhs,
         "1 * x = x"),
    Rule("div", lambda op: _is(op.operands[1], 1) and _same_type(op.operands[0], op), _lhs,
         "x / 1 = x"),
    Rule("pow", lambda op: _is(op.operands[1], 1) and _same_type(op.operands[0], op), _lhs,
         "x ** 1 = x"),
    Rule("pow", lambda op: _float(op) and _is(op.operands[1], 2),
         lambda op, rw: rw.op("mul", op.operands[0], op.operands[0]), "x ** 2 = x * x"),
    Rule("neg", lambda op: op.operands[0].producer is not None
         and op.operands[0].producer.name == "neg",
         lambda op, rw: op.operands[0].producer.operands[0], "-(-x) = x"),  # type: ignore
    Rule("not", lambda op: op.operands[0].producer is not None
         and op.operands[0].producer.name == "not",
         lambda op, rw: op.operands[0].producer.operands[0], "not not x = x"),  # type: ignore
    Rule("and", lambda op: _is(op.operands[1], True) and op.operands[0].dtype is DType.BOOL
         and _same_type(op.operands[0], op), _lhs, "x and true = x"),
    Rule("or", lambda op: _is(op.operands[1], False) and op.operands[0].dtype is DType.BOOL
         and _same_type(op.operands[0], op), _lhs, "x or false = x"),
] + [
    Rule(name, lambda op: op.operands[0] is op.operands[1] and _same_type(op.operands[0], op),
         _lhs, f"{name}(x, x) = x") for name in ("max", "min", "and", "or")
] + [
    Rule("select", lambda op: op.operands[1] is op.operands[2]
         and _same_type(op.operands[1], op), lambda op, rw: op.operands[1],
         "select(c, x, x) = x"),
    Rule("select", lambda op: _is(op.operands[0], True) and _same_type(op.operands[1], op),
         lambda op, rw: op.operands[1], "select(true, a, b) = a"),
    Rule("select", lambda op: _is(op.operands[0], False) and _same_type(op.operands[2], op),
         lambda op, rw: op.operands[2], "select(false, a, b) = b"),
    Rule("reduce", lambda op: _reduced_reshape_source(op) is not None, _reduce_source,
         "reducing the leading dims of reshape(u) that only regroups them reduces u's "
         "leading dims (a bias gradient of [B*S, H] reads [B, S, H] where it is made)"),
    Rule("convert", lambda op: op.operands[0].producer is not None
         and op.operands[0].producer.name == "convert"
         and op.operands[0].producer.operands[0].dtype is op.results[0].dtype
         and _widening(op.results[0].dtype, op.operands[0].dtype),
         lambda op, rw: op.operands[0].producer.operands[0],  # type: ignore[union-attr]
         "convert(convert(x, wider), original) = x"),
]


def _commutative_constant_left(op: Op) -> bool:
    a, b = op.operands
    return (a.producer is not None and a.producer.name in ("constant", "broadcast_in_dim")
            and splat(a) is not None and splat(b) is None)


def swap_operands_rules(commutative: list[str]) -> list[Rule]:
    """Constants go right in commutative ops, so ``c + x`` and ``x + c`` CSE together."""
    return [Rule(name, _commutative_constant_left,
                 lambda op, rw: rw.op(op.name, op.operands[1], op.operands[0]),
                 f"{name}(c, x) = {name}(x, c)") for name in commutative]
