"""Elementwise ops: unary math, binary arithmetic and logic, compare, select, clamp, convert.

Operands of an elementwise op have identical shapes (no implicit broadcasting, as in
StableHLO: bridges insert ``broadcast_in_dim``), so the shape rule is "unify operand dims"
and each op contributes dim equalities to the shape-constraint analysis.

Unary and binary ops are rows of a table: name, accepted dtypes, numpy semantics. Half
types compute in float32 and round once (see ``DType.compute_np``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, NUMERIC_DTYPES, DType
from ..ir import Op, TensorType, Value
from ..opdef import DTYPE, STR, Attr, Ctx, Env, Fusion, InterpretError, OpDef, Rewriter, RowSum
from ..shape_facts import Eq, Fact
from ..value_facts import at_most_zero, only_plus_one

if TYPE_CHECKING:
    from ..opdef import KernelContext, RowContext

LOGICAL_DTYPES = (DType.BOOL,) + INT_DTYPES


def _same_shape_facts(op: Op, operand_indices: Iterable[int] | None = None) -> Iterable[Fact]:
    idx = range(len(op.operands)) if operand_indices is None else operand_indices
    out = op.results[0].shape
    for i in idx:
        v = op.operands[i]
        if v.rank == len(out):
            for a, b in zip(v.shape, out):
                if a != b:
                    yield Eq(a, b)


def _check_same_shapes(name: str, arrays: list[np.ndarray]) -> None:
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise InterpretError(f"{name}: operand shapes {[a.shape for a in arrays]} differ; "
                             f"elementwise operands must have identical shapes")


def _to_compute(x: np.ndarray, dtype: DType) -> np.ndarray:
    return x.astype(dtype.compute_np, copy=False)


class Elementwise(OpDef):
    """Shared behaviour of elementwise ops with a table-driven numpy function."""

    traits = frozenset({"elementwise", "pure"})
    fusion = Fusion.ELEMENTWISE
    dtypes: tuple[DType, ...] = ALL_DTYPES
    fn: Callable[..., np.ndarray]
    result_dtype: DType | None = None  # None: same as the operands

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        for i in range(len(ctx.types)):
            ctx.dtype_in(i, cls.dtypes)
            if i:
                ctx.same_dtype(0, i)
        shape = ctx.same_shape(list(range(len(ctx.types))))
        return [TensorType(cls.result_dtype or ctx.types[0].dtype, shape)]

    @classmethod
    def facts(cls, op: Op) -> Iterable[Fact]:
        return _same_shape_facts(op)

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        _check_same_shapes(cls.name, inputs)
        dt = DType(_dtype_short(inputs[0]))
        with np.errstate(all="ignore"):
            out = cls.fn(*[_to_compute(x, dt) for x in inputs])
        return np.asarray(out).astype((cls.result_dtype or dt).np, copy=False)

    @classmethod
    def c_expr(cls, op: Op, args: list[str]) -> str | None:
        """The C expression computing one element (native codegen), or None if unsupported.

        ``args`` are C expressions of the operands' element values, in the operands' C type.
        """
        template = C_TEMPLATES.get(cls.name)
        return template(op.operands[0].dtype, *args) if template else None


def _dtype_short(x: np.ndarray) -> str:
    from ..dtypes import dtype_of

    return dtype_of(x.dtype).value


# -- unary ------------------------------------------------------------------------------

def _logistic(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


_erf = np.frompyfunc(math.erf, 1, 1)


def _erf_fn(x: np.ndarray) -> np.ndarray:
    return np.asarray(_erf(x.astype(np.float64)), dtype=np.float64)


def _round_half_away(x: np.ndarray) -> np.ndarray:
    t = np.trunc(x)
    frac = x - t  # exact in floating point
    return t + np.where(np.abs(frac) >= 0.5, np.sign(x), 0).astype(x.dtype)


def _not(x: np.ndarray) -> np.ndarray:
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


def _sign(x: np.ndarray) -> np.ndarray:
    return np.sign(x) if x.dtype != np.uint8 else (x > 0).astype(np.uint8)


_UNARY: dict[str, tuple[Callable[[np.ndarray], np.ndarray], tuple[DType, ...], str]] = {
    "neg": (np.negative, NUMERIC_DTYPES, "-x (integers wrap)"),
    "abs": (np.abs, NUMERIC_DTYPES, "|x| (abs of the most negative integer wraps)"),
    "sign": (_sign, NUMERIC_DTYPES, "-1, 0 or 1; NaN stays NaN"),
    "exp": (np.exp, FLOAT_DTYPES, "e**x"),
    "expm1": (np.expm1, FLOAT_DTYPES, "e**x - 1, accurate near 0"),
    "log": (np.log, FLOAT_DTYPES, "natural log"),
    "log1p": (np.log1p, FLOAT_DTYPES, "log(1 + x), accurate near 0"),
    "sqrt": (np.sqrt, FLOAT_DTYPES, "square root"),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), FLOAT_DTYPES, "1 / sqrt(x)"),
    "tanh": (np.tanh, FLOAT_DTYPES, "hyperbolic tangent"),
    "logistic": (_logistic, FLOAT_DTYPES, "1 / (1 + e**-x), the sigmoid"),
    "erf": (_erf_fn, FLOAT_DTYPES, "the error function"),
    "sin": (np.sin, FLOAT_DTYPES, "sine"),
    "cos": (np.cos, FLOAT_DTYPES, "cosine"),
    "tan": (np.tan, FLOAT_DTYPES, "tangent"),
    "floor": (np.floor, FLOAT_DTYPES, "round toward -inf"),
    "ceil": (np.ceil, FLOAT_DTYPES, "round toward +inf"),
    "round": (_round_half_away, FLOAT_DTYPES, "round half away from zero (HLO round)"),
    "round_even": (np.rint, FLOAT_DTYPES, "round half to even (torch.round, tf.round)"),
    "not": (_not, LOGICAL_DTYPES, "logical not of bool, bitwise not of integers"),
}

#: ops whose C form calls a math function (the prelude's inline polynomials or libm): a
#: loop computing them is bound by their throughput (trait ``math_call``, which the row
#: kernels' reduction loops consult, kernel_emit.split_sum)
_MATH_CALLS = {"exp", "expm1", "log", "log1p", "tanh", "logistic", "erf", "sin", "cos", "tan",
               "pow", "atan2", "rem"}


def _traits(name: str, *more: str) -> frozenset[str]:
    return Elementwise.traits | set(more) | ({"math_call"} if name in _MATH_CALLS else set())


def _exp_c_expr(cls, op: Op, args: list[str]) -> str:
    """f32 exp without its overflow clamp where the graph proves the argument at most zero
    (``x - max(x)``, the shift of softmax and attention rows: value_facts.at_most_zero)."""
    x = op.operands[0]
    if x.dtype is DType.F32 and at_most_zero(x):
        return f"disc_expf_nonpos({args[0]})"
    return C_TEMPLATES["exp"](x.dtype, *args)


def _erf_c_kernel(cls, op: Op, ctx: KernelContext) -> str | None:
    """f32 erf read only as ``erf + 1`` in its kernel (the normal CDF of an exact GELU, its
    gradient): the absolute-accuracy approximation, about twice as fast (value_facts)."""
    x = op.operands[0]
    if x.dtype is DType.F32 and only_plus_one(ctx.uses(op.results[0])):
        return f"disc_erff_abs({ctx.operand(0)})"
    return cls.c_expr(op, [ctx.operand(0)])


def _exp_c_row_sum(cls, op: Op, dst: str, n: str, ctx: RowContext) -> RowSum | None:
    """f32: the prelude's exp and sum of a row (vector code on AVX-512), with the overflow
    clamp only where the argument may be positive. It reads the argument's row where it
    is in memory, or ``a - s`` from a's row and a value s per row (softmax's x - max(x)),
    with no loop of the kernel's own; otherwise the loop stores the argument in ``dst``
    and the helper works in place."""
    x = op.operands[0]
    if x.dtype is not DType.F32:
        return None

    def call(src: str, shift: str) -> str:
        return f"disc_row_exp_sum_f32({dst}, {src}, {shift}, {n}, {0 if at_most_zero(x) else 1})"

    src = ctx.row(op, 0)
    if src is not None:
        return RowSum(call(src, "0.0f"))
    sub = ctx.producer(x)
    if sub is not None and sub.name == "sub":
        a = ctx.row(sub, 0)
        s = ctx.row_scalar(sub, 1) if a is not None else None
        if s is not None:
            return RowSum(call(a, s))
    return RowSum(call(dst, "0.0f"), fills=True)


_C_FORMS: dict[str, dict[str, Any]] = {
    "exp": {"c_expr": classmethod(_exp_c_expr), "c_row_sum": classmethod(_exp_c_row_sum)},
    "erf": {"c_kernel": classmethod(_erf_c_kernel)},
}

for _name, (_fn, _dtypes, _doc) in _UNARY.items():
    type(f"Unary_{_name}", (Elementwise,), {
        "name": _name, "operands": ("x",), "dtypes": _dtypes, "fn": staticmethod(_fn),
        "summary": _doc, "__doc__": _doc, "traits": _traits(_name),
        **_C_FORMS.get(_name, {}),
    })


class IsFinite(Elementwise):
    """True where x is neither infinite nor NaN."""

    name = "is_finite"
    operands = ("x",)
    dtypes = FLOAT_DTYPES
    result_dtype = DType.BOOL
    fn = staticmethod(np.isfinite)


# -- binary -----------------------------------------------------------------------------

def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C-style division truncating toward zero; x / 0 is defined as 0 (XLA leaves it open)."""
    safe = np.where(b == 0, 1, b).astype(a.dtype)
    q = a // safe
    if np.issubdtype(a.dtype, np.signedinteger):
        q = q + (((a % safe) != 0) & ((a < 0) != (safe < 0))).astype(a.dtype)
    return np.where(b == 0, 0, q).astype(a.dtype)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.true_divide(a, b) if a.dtype.kind == "f" else _int_div(a, b)


def _rem(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Remainder with the sign of the dividend (C fmod); integer x rem 0 is x (as in XLA)."""
    if a.dtype.kind == "f":
        return np.fmod(a, b)
    return (a - _int_div(a, b) * b).astype(a.dtype)


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return np.power(a, b)
    neg = b < 0
    out = np.power(a, np.where(neg, 0, b))
    if a.dtype.kind == "i":
        # integer x**-n: 1 for x == 1, +-1 for x == -1, else 0 (HLO semantics)
        odd = (b % 2) != 0
        neg_val = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0))
        out = np.where(neg, neg_val, out)
    return out.astype(a.dtype)


def _logical(fn_bool: Callable, fn_int: Callable) -> Callable[..., np.ndarray]:
    def f(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return fn_bool(a, b) if a.dtype == np.bool_ else fn_int(a, b)

    return f


_BINARY: dict[str, tuple[Callable[..., np.ndarray], tuple[DType, ...], str]] = {
    "add": (np.add, NUMERIC_DTYPES, "a + b (integers wrap)"),
    "sub": (np.subtract, NUMERIC_DTYPES, "a - b"),
    "mul": (np.multiply, NUMERIC_DTYPES, "a * b"),
    "div": (_div, NUMERIC_DTYPES, "a / b; integers truncate toward zero, x / 0 = 0"),
    "rem": (_rem, NUMERIC_DTYPES, "remainder with the sign of a (C fmod); int x rem 0 = x"),
    "pow": (_pow, NUMERIC_DTYPES, "a ** b"),
    "max": (np.maximum, ALL_DTYPES, "elementwise maximum, NaN propagates"),
    "min": (np.minimum, ALL_DTYPES, "elementwise minimum, NaN propagates"),
    "atan2": (np.arctan2, FLOAT_DTYPES, "atan2(a, b)"),
    "and": (_logical(np.logical_and, np.bitwise_and), LOGICAL_DTYPES, "logical/bitwise and"),
    "or": (_logical(np.logical_or, np.bitwise_or), LOGICAL_DTYPES, "logical/bitwise or"),
    "xor": (_logical(np.logical_xor, np.bitwise_xor), LOGICAL_DTYPES, "logical/bitwise xor"),
}

_COMMUTATIVE = {"add", "mul", "max", "min", "and", "or", "xor"}

for _name, (_fn, _dtypes, _doc) in _BINARY.items():
    type(f"Binary_{_name}", (Elementwise,), {
        "name": _name, "operands": ("lhs", "rhs"), "dtypes": _dtypes, "fn": staticmethod(_fn),
        "summary": _doc, "__doc__": _doc,
        "traits": _traits(_name, *(("commutative",) if _name in _COMMUTATIVE else ())),
        # x / s with s one value per row (softmax's sum, a norm's scale) may multiply by
        # 1 / s, which the C compiler hoists out of the row: at most an ulp apart
        "reciprocal_divisor": _name == "div",
    })


_COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
            "gt": np.greater, "ge": np.greater_equal}


class Compare(Elementwise):
    """Elementwise comparison with IEEE semantics (NaN compares unequal)."""

    name = "compare"
    operands = ("lhs", "rhs")
    attrs = {"direction": Attr(STR, choices=tuple(_COMPARE))}
    result_dtype = DType.BOOL

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        _check_same_shapes(cls.name, inputs)
        dt = DType(_dtype_short(inputs[0]))
        a, b = (_to_compute(x, dt) for x in inputs)
        with np.errstate(all="ignore"):
            return _COMPARE[attrs["direction"]](a, b)

    @classmethod
    def c_expr(cls, op: Op, args: list[str]) -> str:
        return f"((uint8_t)(({args[0]}) {_C_COMPARE[op.attrs['direction']]} ({args[1]})))"


class Select(OpDef):
    """pred ? on_true : on_false; pred is bool, of the same shape or a scalar."""

    name = "select"
    operands = ("pred", "on_true", "on_false")
    traits = frozenset({"elementwise", "pure"})
    fusion = Fusion.ELEMENTWISE

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        ctx.dtype_in(0, (DType.BOOL,))
        ctx.same_dtype(1, 2)
        shape = ctx.same_shape([1, 2])
        if ctx.types[0].rank:
            shape = ctx.same_shape([1, 2, 0])
        return [TensorType(ctx.types[1].dtype, shape)]

    @classmethod
    def facts(cls, op: Op) -> Iterable[Fact]:
        return _same_shape_facts(op, [1, 2] + ([0] if op.operands[0].rank else []))

    @classmethod
    def c_expr(cls, op: Op, args: list[str]) -> str:
        return f"(({args[0]}) ? ({args[1]}) : ({args[2]}))"

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        pred, a, b = inputs
        _check_same_shapes(cls.name, [a, b] + ([pred] if pred.ndim else []))
        return np.where(pred, a, b).astype(a.dtype, copy=False)


class Clamp(OpDef):
    """min(max(x, lo), hi); lo and hi have x's shape or are scalars."""

    name = "clamp"
    operands = ("lo", "x", "hi")
    traits = frozenset({"elementwise", "pure"})
    fusion = Fusion.ELEMENTWISE

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        ctx.dtype_in(1, NUMERIC_DTYPES)
        ctx.same_dtype(1, 0)
        ctx.same_dtype(1, 2)
        idx = [1] + [i for i in (0, 2) if ctx.types[i].rank]
        return [TensorType(ctx.types[1].dtype, ctx.same_shape(idx))]

    @classmethod
    def facts(cls, op: Op) -> Iterable[Fact]:
        return _same_shape_facts(op, [1] + [i for i in (0, 2) if op.operands[i].rank])

    @classmethod
    def c_expr(cls, op: Op, args: list[str]) -> str:
        lo, x, hi = args
        dt = op.operands[1].dtype
        return C_TEMPLATES["min"](dt, C_TEMPLATES["max"](dt, x, lo), hi)

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        lo, x, hi = inputs
        _check_same_shapes(cls.name, [x] + [a for a in (lo, hi) if a.ndim])
        dt = DType(_dtype_short(x))
        with np.errstate(all="ignore"):
            out = np.minimum(np.maximum(_to_compute(x, dt), _to_compute(lo, dt)),
                             _to_compute(hi, dt))
        return out.astype(x.dtype, copy=False)


class Convert(OpDef):
    """Change the element type. Float to int truncates toward zero (out of range and NaN
    are undefined); anything to bool is ``x != 0``; to a half type rounds to nearest even."""

    name = "convert"
    operands = ("x",)
    attrs = {"dtype": Attr(DTYPE)}
    traits = frozenset({"elementwise", "pure"})
    fusion = Fusion.ELEMENTWISE

    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        return [ctx.types[0].with_dtype(attrs["dtype"])]

    @classmethod
    def facts(cls, op: Op) -> Iterable[Fact]:
        return _same_shape_facts(op)

    @classmethod
    def canonicalize(cls, op: Op, rw: Rewriter) -> Value | None:
        return op.operands[0] if op.operands[0].dtype == attrs_dtype(op) else None

    @classmethod
    def c_expr(cls, op: Op, args: list[str]) -> str:
        from ..native.cexpr import ctype

        src, to = op.operands[0].dtype, attrs_dtype(op)
        x = args[0]
        if to is DType.BOOL:
            return f"((uint8_t)(({x}) != 0))"
        if to.is_int and src.is_float:  # NaN and infinities convert to 0, as the reference
            return f"(isfinite({x}) ? ({ctype(to)})({x}) : 0)"
        return f"(({ctype(to)})({x}))"

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                  ) -> np.ndarray:
        x = inputs[0]
        to: DType = attrs["dtype"]
        if to is DType.BOOL:
            return x != 0
        with np.errstate(all="ignore"):
            if to.is_int and x.dtype.kind == "f":
                x = np.trunc(x.astype(np.float64))
                x = np.where(np.isfinite(x), x, 0)
            return x.astype(to.np)


def attrs_dtype(op: Op) -> DType:
    return op.attrs["dtype"]


# -- native code generation: one C expression per op, next to its numpy semantics ------

def _f(dt: DType, name: str) -> str:
    """The libm function for the operand's float type (expf for f32, exp for f64)."""
    return name + ("f" if dt is DType.F32 else "")


def _maxmin(greater: str) -> Callable[..., str]:
    def emit(dt: DType, a: str, b: str) -> str:
        if dt.is_float:  # NaN propagates, as np.maximum/np.minimum
            return f"(((({a}) {greater} ({b})) | (({a}) != ({a}))) ? ({a}) : ({b}))"
        return f"(({a}) {greater} ({b}) ? ({a}) : ({b}))"

    return emit


def _int_or_float(float_tpl: Callable[..., str], int_tpl: Callable[..., str]
                  ) -> Callable[..., str]:
    return lambda dt, *a: float_tpl(dt, *a) if dt.is_float else int_tpl(dt, *a)


def _libm(name: str) -> Callable[..., str]:
    return lambda dt, *a: f"{_f(dt, name)}({', '.join(a)})"


C_TEMPLATES: dict[str, Callable[..., str]] = {
    "neg": lambda dt, x: f"(-({x}))",
    "abs": _int_or_float(_libm("fabs"), lambda dt, x: f"(({x}) < 0 ? -({x}) : ({x}))"),
    "sign": _int_or_float(
        lambda dt, x: f"(({x}) != ({x}) ? ({x}) : (({x}) > 0) - (({x}) < 0))",
        lambda dt, x: f"((({x}) > 0) - (({x}) < 0))"),
    "exp": lambda dt, x: f"disc_expf({x})" if dt is DType.F32 else f"exp({x})",
    "expm1": _libm("expm1"), "log": _libm("log"),
    "log1p": _libm("log1p"), "sqrt": _libm("sqrt"), "tanh": _libm("tanh"),
    # f32 erf: the prelude's inline disc_erff (vectorizes without libmvec, 1.1 ulp); read
    # only as erf + 1 in its kernel, disc_erff_abs (_erf_c_kernel)
    "erf": lambda dt, x: f"disc_erff({x})" if dt is DType.F32 else f"erf({x})",
    "sin": _libm("sin"), "cos": _libm("cos"), "tan": _libm("tan"),
    "floor": _libm("floor"), "ceil": _libm("ceil"),
    "round": _libm("round"),  # C round(): half away from zero, like HLO round
    "round_even": _libm("rint"),  # default rounding mode: half to even
    "rsqrt": lambda dt, x: f"(1 / {_f(dt, 'sqrt')}({x}))",
    "logistic": lambda dt, x: (f"(1 / (1 + disc_expf(-({x}))))" if dt is DType.F32
                               else f"(1 / (1 + exp(-({x}))))"),
    "not": lambda dt, x: f"(!({x}))" if dt.is_bool else f"(~({x}))",
    "is_finite": lambda dt, x: f"((uint8_t)isfinite({x}))",
    "add": lambda dt, a, b: f"(({a}) + ({b}))",
    "sub": lambda dt, a, b: f"(({a}) - ({b}))",
    "mul": lambda dt, a, b: f"(({a}) * ({b}))",
    # integer division truncates toward zero, x / 0 = 0, x rem 0 = x (see _int_div/_rem);
    # MIN / -1 would trap in C, so -1 is negation (wrapping, the module builds with -fwrapv)
    "div": _int_or_float(
        lambda dt, a, b: f"(({a}) / ({b}))",
        lambda dt, a, b: (f"(({b}) == 0 ? 0 : ({b}) == -1 ? -({a}) : ({a}) / ({b}))"
                          if dt.is_signed else f"(({b}) == 0 ? 0 : ({a}) / ({b}))")),
    "rem": _int_or_float(
        _libm("fmod"),
        lambda dt, a, b: (f"(({b}) == 0 ? ({a}) : ({b}) == -1 ? 0 : ({a}) % ({b}))"
                          if dt.is_signed else f"(({b}) == 0 ? ({a}) : ({a}) % ({b}))")),
    "pow": lambda dt, a, b: f"{_f(dt, 'pow')}({a}, {b})" if dt.is_float else None,
    "atan2": _libm("atan2"),
    "max": _maxmin(">"), "min": _maxmin("<"),
    # bools are 0 or 1, so the bitwise forms are exact for them too, and unlike && and ||
    # they do not branch: a short-circuit inside a vector loop (max-pool's "greater or
    # NaN" test) kept gcc from vectorizing the whole loop
    "and": lambda dt, a, b: f"(({a}) & ({b}))",
    "or": lambda dt, a, b: f"(({a}) | ({b}))",
    "xor": lambda dt, a, b: f"(({a}) != ({b}))" if dt.is_bool else f"(({a}) ^ ({b}))",
}

_C_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
