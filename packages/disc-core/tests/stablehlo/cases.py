"""One small graph per core op (per dtype it accepts), with inputs drawn per shape binding.

Shared by the round-trip test (export -> import -> interpret, every dtype) and the XLA
cross-check (export -> XLA CPU vs DISC's native engine). Every graph has symbolic dims; the
bindings include 0, 1, odd sizes, and none of them is special to the compiler (DISC compiles
once per graph, so every shape it runs is one it did not see at compile time).

Inputs avoid the corners where DISC defines what StableHLO leaves open or defines
differently (docs/stablehlo.md, "What does not map"): integer division by zero, float to
int conversion of NaN or out-of-range values, negative integer exponents.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from disc_core.builder import GraphBuilder
from disc_core.dtypes import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, NUMERIC_DTYPES, DType
from disc_core.ir import Graph
from disc_core.opdef import get_op
from disc_core.symbolic import Expr, floordiv

#: symbol values every case runs on: empty, one, odd, even, larger (the shapes are drawn
#: from them; B is the batch-like dim, N a second independent one)
BINDINGS: list[dict[str, int]] = [{"B": 0, "N": 3}, {"B": 1, "N": 1}, {"B": 3, "N": 5},
                                  {"B": 8, "N": 2}, {"B": 13, "N": 7}]

Draw = Callable[[np.random.Generator, tuple[int, ...], DType], np.ndarray]


def normal(rng: np.random.Generator, shape: tuple[int, ...], dt: DType) -> np.ndarray:
    if dt.is_bool:
        return rng.random(shape) < 0.5
    if dt.is_int:
        lo = -50 if dt.is_signed else 0
        return rng.integers(lo, 50, size=shape).astype(dt.np)
    return rng.standard_normal(shape).astype(np.float32).astype(dt.np)


def positive(rng: np.random.Generator, shape: tuple[int, ...], dt: DType) -> np.ndarray:
    if dt.is_int:
        return rng.integers(1, 10, size=shape).astype(dt.np)
    return (np.abs(rng.standard_normal(shape)) + 0.25).astype(np.float32).astype(dt.np)


def nonzero(rng: np.random.Generator, shape: tuple[int, ...], dt: DType) -> np.ndarray:
    mag = rng.integers(1, 10, size=shape)
    if dt.is_signed:
        mag = mag * rng.choice([-1, 1], size=shape)
    return mag.astype(np.float32).astype(dt.np)


def small(rng: np.random.Generator, shape: tuple[int, ...], dt: DType) -> np.ndarray:
    """Few distinct values: ties for argmax, sort, max."""
    if dt.is_bool:
        return rng.random(shape) < 0.5
    lo = -2 if dt.is_signed else 0
    return rng.integers(lo, 3, size=shape).astype(dt.np)


def unit(rng: np.random.Generator, shape: tuple[int, ...], dt: DType) -> np.ndarray:
    return rng.uniform(-0.9, 0.9, size=shape).astype(np.float32).astype(dt.np)


def with_nan(rng: np.random.Generator, shape: tuple[int, ...], dt: DType) -> np.ndarray:
    x = small(rng, shape, DType.I32).astype(dt.np)
    if x.size:
        x.reshape(-1)[rng.integers(0, x.size)] = np.nan
    return x


@dataclass
class Inp:
    dtype: DType
    shape: list[object]
    draw: Draw = normal
    #: (low, high) for integer index inputs, as expressions over the bindings (may be out
    #: of range on purpose: indices are clamped)
    index_range: tuple[str, str] | None = None


@dataclass
class Case:
    op: str
    label: str
    dtype: DType
    graph: Graph
    inputs: list[Inp]
    #: float tolerance against XLA (transcendentals, accumulation order)
    rtol: float = 0.0
    #: ops in the graph besides ``op`` that the case needs (none is the op under test)
    extra_ops: frozenset[str] = field(default_factory=frozenset)

    @property
    def id(self) -> str:
        return f"{self.op}-{self.label}-{self.dtype.short}"

    def draw(self, binding: dict[str, int], seed: int) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        out = []
        for inp in self.inputs:
            shape = tuple(Expr.const(d).value if isinstance(d, int) else d.evaluate(binding)
                          for d in inp.shape)  # type: ignore[union-attr]
            if inp.index_range is not None:
                lo, hi = (eval(s, {}, dict(binding)) for s in inp.index_range)  # noqa: S307
                out.append(rng.integers(lo, hi + 1, size=shape).astype(inp.dtype.np))
            else:
                out.append(np.asarray(inp.draw(rng, shape, inp.dtype)))
        return out


B, N = Expr.sym("B"), Expr.sym("N")


def _tol(dt: DType, base: float = 1e-5) -> float:
    return {DType.F16: 2e-3, DType.BF16: 2e-2, DType.F64: 1e-12}.get(dt, base) \
        if dt.is_float else 0.0


def _case(op: str, label: str, dt: DType, inputs: list[Inp],
          body: Callable[..., object], rtol: float | None = None) -> Case:
    b = GraphBuilder(f"{op}_{label}".replace("-", "_"))
    vals = [b.input(f"x{i}", inp.dtype, inp.shape) for i, inp in enumerate(inputs)]
    out = body(b, *vals)
    b.graph.outputs = list(out) if isinstance(out, tuple) else [out]  # type: ignore[arg-type]
    b.graph.verify()
    extra = frozenset(o.name for o in b.graph.ops) - {op}
    return Case(op, label, dt, b.graph, inputs,
                _tol(dt) if rtol is None else (rtol if dt.is_float else 0.0), extra)


_UNARY_DRAW: dict[str, Draw] = {"log": positive, "sqrt": positive, "rsqrt": positive,
                                "log1p": positive, "tan": unit}


def elementwise_cases() -> list[Case]:
    out = []
    for name in ("neg", "abs", "exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "tanh",
                 "logistic", "sin", "cos", "tan", "floor", "ceil", "round", "round_even",
                 "not", "sign", "is_finite", "erf"):
        for dt in get_op(name).dtypes:  # type: ignore[attr-defined]
            out.append(_case(name, "x", dt, [Inp(dt, [B, 3], _UNARY_DRAW.get(name, normal))],
                             lambda b, x, n=name: b.op(n, x),
                             rtol=None if name in ("floor", "ceil", "round", "round_even",
                                                   "not", "sign", "abs", "neg")
                             else _tol(dt, 2e-5) if dt is not DType.F64 else 1e-10))
    binary_draw: dict[str, tuple[Draw, Draw]] = {
        "div": (normal, nonzero), "rem": (normal, nonzero), "pow": (positive, small),
    }
    for name in ("add", "sub", "mul", "div", "rem", "pow", "max", "min", "atan2", "and",
                 "or", "xor"):
        for dt in get_op(name).dtypes:  # type: ignore[attr-defined]
            da, db = binary_draw.get(name, (normal, normal))
            if name == "pow" and dt.is_int:
                da, db = small, positive_small
            out.append(_case(name, "xy", dt, [Inp(dt, [B, 3], da), Inp(dt, [B, 3], db)],
                             lambda b, x, y, n=name: b.op(n, x, y),
                             rtol=_tol(dt, 1e-5) if name in ("pow", "atan2") else None))
    for dt in ALL_DTYPES:
        for d in ("eq", "ne", "lt", "le", "gt", "ge"):
            out.append(_case("compare", d, dt, [Inp(dt, [B, 3], small), Inp(dt, [B, 3], small)],
                             lambda b, x, y, d=d: b.op("compare", x, y, direction=d)))
        out.append(_case("select", "full", dt, [Inp(DType.BOOL, [B, 3]), Inp(dt, [B, 3]),
                                                Inp(dt, [B, 3])],
                         lambda b, p, x, y: b.op("select", p, x, y)))
        out.append(_case("select", "scalar-pred", dt, [Inp(DType.BOOL, []), Inp(dt, [B, 3]),
                                                       Inp(dt, [B, 3])],
                         lambda b, p, x, y: b.op("select", p, x, y)))
    for dt in NUMERIC_DTYPES:
        out.append(_case("clamp", "scalar", dt, [Inp(dt, []), Inp(dt, [B, 3]), Inp(dt, [])],
                         lambda b, lo, x, hi: b.op("clamp", lo, x, hi)))
        out.append(_case("clamp", "full", dt, [Inp(dt, [B, 3]), Inp(dt, [B, 3]),
                                               Inp(dt, [B, 3])],
                         lambda b, lo, x, hi: b.op("clamp", lo, x, hi)))
    for src in ALL_DTYPES:
        for to in ALL_DTYPES:
            if src is to or (src.is_float and to.is_int):
                continue
            out.append(_case("convert", f"to-{to.short}", src, [Inp(src, [B, 3], small)],
                             lambda b, x, to=to: b.op("convert", x, dtype=to)))
    for src in FLOAT_DTYPES:  # float -> int of in-range, finite values
        for to in INT_DTYPES:
            out.append(_case("convert", f"to-{to.short}", src, [Inp(src, [B, 3], positive)],
                             lambda b, x, to=to: b.op("convert", x, dtype=to)))
    return out


def positive_small(rng: np.random.Generator, shape: tuple[int, ...], dt: DType) -> np.ndarray:
    return rng.integers(0, 4, size=shape).astype(dt.np)


def _shape_tensor(b: GraphBuilder, dims: list[object], like: object) -> object:
    """A 1-D i64 tensor of ``dims`` computed from the graph's input dims."""
    parts = [b.reshape_to(b.size_value(d, "i64"), [1]) for d in dims]
    return b.op("concatenate", *parts, dimension=0)


def shape_cases() -> list[Case]:
    out = []
    for dt in ALL_DTYPES:
        out += [
            _case("reshape", "split", dt, [Inp(dt, [B, 6])],
                  lambda b, x: b.op("reshape", x, shape=[B, 2, 3])),
            _case("reshape", "flat", dt, [Inp(dt, [B, 6])],
                  lambda b, x: b.op("reshape", x, shape=[6 * B])),
            _case("reshape", "static", dt, [Inp(dt, [2, 6])],
                  lambda b, x: b.op("reshape", x, shape=[3, 4])),
            _case("broadcast_in_dim", "new-dim", dt, [Inp(dt, [B]), Inp(dt, [N])],
                  lambda b, x, y: (y, b.op("broadcast_in_dim", x, shape=[B, N],
                                           broadcast_dimensions=[0]))),
            _case("broadcast_in_dim", "expand-1", dt, [Inp(dt, [1, 3]), Inp(dt, [B])],
                  lambda b, x, y: (y, b.op("broadcast_in_dim", x, shape=[B, 3],
                                           broadcast_dimensions=[0, 1]))),
            _case("broadcast_in_dim", "static", dt, [Inp(dt, [3])],
                  lambda b, x: b.op("broadcast_in_dim", x, shape=[2, 3],
                                    broadcast_dimensions=[1])),
            _case("transpose", "3d", dt, [Inp(dt, [B, 3, N])],
                  lambda b, x: b.op("transpose", x, permutation=[2, 0, 1])),
            _case("reverse", "2d", dt, [Inp(dt, [B, 4])],
                  lambda b, x: b.op("reverse", x, dimensions=[0, 1])),
            _case("concatenate", "dim1", dt, [Inp(dt, [B, 2]), Inp(dt, [B, 3])],
                  lambda b, x, y: b.op("concatenate", x, y, dimension=1)),
            _case("concatenate", "dim0", dt, [Inp(dt, [B, 3]), Inp(dt, [2, 3])],
                  lambda b, x, y: b.op("concatenate", x, y, dimension=0)),
            _case("slice", "strided", dt, [Inp(dt, [B, 6])],
                  lambda b, x: b.op("slice", x, start=[0, 1], limit=[B, 6], stride=[1, 2])),
            _case("slice", "symbolic-start", dt, [Inp(dt, [B, 6])],
                  lambda b, x: b.op("slice", x, start=[floordiv(B, 2), 0], limit=[B, 6],
                                    stride=[2, 1])),
            _case("dynamic_slice", "static-size", dt,
                  [Inp(dt, [B + 1, 6]), Inp(DType.I32, [], index_range=("-2", "B + 2")),
                   Inp(DType.I64, [], index_range=("-1", "6"))],
                  lambda b, x, i, j: b.op("dynamic_slice", x, i, j, sizes=[1, 4])),
            _case("dynamic_slice", "symbolic-size", dt,
                  [Inp(dt, [B, 6]), Inp(DType.I64, [], index_range=("-1", "B")),
                   Inp(DType.I64, [], index_range=("0", "5"))],
                  lambda b, x, i, j: b.op("dynamic_slice", x, i, j,
                                          sizes=[floordiv(B, 2), 3])),
            _case("dynamic_update_slice", "2d", dt,
                  [Inp(dt, [B + 1, 6]), Inp(dt, [1, 3]),
                   Inp(DType.I32, [], index_range=("-2", "B + 2")),
                   Inp(DType.I64, [], index_range=("-1", "6"))],
                  lambda b, x, u, i, j: b.op("dynamic_update_slice", x, u, i, j)),
            _case("pad", "static", dt, [Inp(dt, [B, 3]), Inp(dt, [])],
                  lambda b, x, p: b.op("pad", x, p, low=[1, -1], high=[0, 2],
                                       interior=[0, 1])),
            _case("pad", "symbolic", dt, [Inp(dt, [B, 3]), Inp(dt, []), Inp(dt, [N])],
                  lambda b, x, p, y: (y, b.op("pad", x, p, low=[0, N], high=[B, 0]))),
            _case("constant", "2x2", dt, [Inp(dt, [2, 2])],
                  lambda b, x, dt=dt: (x, b.constant(np.asarray([[1, 0], [0, 1]]).astype(dt.np)))),
            _case("get_dimension_size", "dim0", dt, [Inp(dt, [B, 3])],
                  lambda b, x: b.op("get_dimension_size", x, dimension=0)),
            _case("dynamic_reshape", "tensor", dt, [Inp(dt, [B, 6])],
                  lambda b, x: b.op("dynamic_reshape", x,
                                    _shape_tensor(b, [2 * B, 3], x), shape=[2 * B, 3])),
            _case("dynamic_broadcast_in_dim", "tensor", dt, [Inp(dt, [B]), Inp(dt, [N])],
                  lambda b, x, y: (y, b.op("dynamic_broadcast_in_dim", x,
                                           _shape_tensor(b, [B, N], x), shape=[B, N],
                                           broadcast_dimensions=[0]))),
        ]
        if dt is not DType.BOOL:
            out.append(_case("iota", "symbolic", dt, [Inp(dt, [B, N])],
                             lambda b, x, dt=dt: (x, b.op("iota", shape=[B, N], dimension=1,
                                                          dtype=dt))))
    return out


def reduction_cases() -> list[Case]:
    out = []
    for dt in ALL_DTYPES:
        kinds = ["max", "min"] + (["and", "or"] if dt.is_bool else ["sum", "prod"])
        for kind in kinds:
            draw = small if kind == "prod" else normal
            out.append(_case("reduce", f"{kind}-rows", dt, [Inp(dt, [B, 5], draw)],
                             lambda b, x, k=kind: b.op("reduce", x, kind=k, axes=[1]),
                             rtol=_tol(dt, 1e-5)))
            out.append(_case("reduce", f"{kind}-all", dt, [Inp(dt, [B, N], draw)],
                             lambda b, x, k=kind: b.op("reduce", x, kind=k, axes=[0, 1]),
                             rtol=_tol(dt, 1e-5) if dt not in (DType.F16, DType.BF16)
                             else 5e-2))
        for name in ("argmax", "argmin"):
            out.append(_case(name, "ties", dt, [Inp(dt, [B, 5], small)],
                             lambda b, x, n=name: b.op(n, x, axis=1)))
            out.append(_case(name, "axis0-i32", dt, [Inp(dt, [N, B], normal)],
                             lambda b, x, n=name: b.op(n, x, axis=0, index_dtype="i32")))
            if dt.is_float:
                out.append(_case(name, "nan", dt, [Inp(dt, [B, 5], with_nan)],
                                 lambda b, x, n=name: b.op(n, x, axis=1)))
        if dt.is_bool:
            continue
        for kind in ("sum", "prod", "max", "min"):
            out.append(_case("cumulative", kind, dt, [Inp(dt, [B, 5], small)],
                             lambda b, x, k=kind: b.op("cumulative", x, kind=k, axis=1),
                             rtol=_tol(dt, 1e-5)))
    return out


def linalg_cases() -> list[Case]:
    out = []
    for dt in NUMERIC_DTYPES:
        draw = small if dt.is_int else normal
        tol = {DType.F16: 1e-2, DType.BF16: 5e-2}.get(dt, _tol(dt, 1e-4))
        out += [
            _case("dot_general", "matmul", dt, [Inp(dt, [B, 4], draw), Inp(dt, [4, N], draw)],
                  lambda b, x, y: b.op("dot_general", x, y, lhs_batch=[], rhs_batch=[],
                                       lhs_contract=[1], rhs_contract=[0]), rtol=tol),
            _case("dot_general", "batched", dt,
                  [Inp(dt, [B, 3, 4], draw), Inp(dt, [B, N, 4], draw)],
                  lambda b, x, y: b.op("dot_general", x, y, lhs_batch=[0], rhs_batch=[0],
                                       lhs_contract=[2], rhs_contract=[2]), rtol=tol),
        ]
    for dt in FLOAT_DTYPES:
        tol = {DType.F16: 1e-2, DType.BF16: 5e-2}.get(dt, _tol(dt, 1e-4))
        out += [
            _case("convolution", "nchw-stride2", dt,
                  [Inp(dt, [B, 2, N + 4, 6]), Inp(dt, [3, 2, 3, 3])],
                  lambda b, x, w: b.op("convolution", x, w, window_strides=[2, 1],
                                       padding=[[1, 1], [0, 2]], lhs_dilation=[1, 1],
                                       rhs_dilation=[1, 1], input_layout="NCHW",
                                       kernel_layout="OIHW", output_layout="NCHW"), rtol=tol),
            _case("convolution", "nhwc-dilated-grouped", dt,
                  [Inp(dt, [B, N + 4, 5, 4]), Inp(dt, [2, 2, 2, 6])],
                  lambda b, x, w: b.op("convolution", x, w, window_strides=[1, 1],
                                       padding=[[0, 0], [1, 1]], lhs_dilation=[1, 1],
                                       rhs_dilation=[2, 1], feature_group_count=2,
                                       input_layout="NHWC", kernel_layout="HWIO",
                                       output_layout="NHWC"), rtol=tol),
        ]
    return out


def indexing_cases() -> list[Case]:
    out = []
    for dt in ALL_DTYPES:
        for idt in (DType.I32, DType.I64):
            out += [
                _case("gather", f"rows-{idt.short}", dt,
                      [Inp(dt, [N, 4]), Inp(idt, [B], index_range=("-1", "N"))],
                      lambda b, e, t: b.op("gather", e, t, axis=0)),
                _case("gather", f"batched-{idt.short}", dt,
                      [Inp(dt, [B, 5, 3]), Inp(idt, [B, 2], index_range=("-1", "5"))],
                      lambda b, x, t: b.op("gather", x, t, axis=1, batch_dims=1)),
                _case("gather_elements", f"axis1-{idt.short}", dt,
                      [Inp(dt, [B, 5]), Inp(idt, [B, 3], index_range=("-2", "6"))],
                      lambda b, x, t: b.op("gather_elements", x, t, axis=1)),
            ]
    for dt in NUMERIC_DTYPES:
        for idt in (DType.I32, DType.I64):
            out += [
                _case("scatter_add", f"rows-{idt.short}", dt,
                      [Inp(dt, [N, 4], small), Inp(idt, [B], index_range=("-1", "N")),
                       Inp(dt, [B, 4], small)],
                      lambda b, x, t, u: b.op("scatter_add", x, t, u, axis=0)),
                _case("scatter_elements_add", f"smaller-{idt.short}", dt,
                      [Inp(dt, [B + 2, 5], small), Inp(idt, [B, 3], index_range=("-2", "6")),
                       Inp(dt, [B, 3], small)],
                      lambda b, x, t, u: b.op("scatter_elements_add", x, t, u, axis=1)),
                _case("scatter_elements_add", f"axis1-{idt.short}", dt,
                      [Inp(dt, [B, 5], small), Inp(idt, [B, 5], index_range=("-2", "6")),
                       Inp(dt, [B, 5], small)],
                      lambda b, x, t, u: b.op("scatter_elements_add", x, t, u, axis=1)),
            ]
    return out


def sorting_cases() -> list[Case]:
    out = []
    for dt in ALL_DTYPES:
        for desc in (False, True):
            out.append(_case("sort", "desc" if desc else "asc", dt, [Inp(dt, [B, 5], small)],
                             lambda b, x, d=desc: b.op("sort", x, dimension=1, descending=d)))
        if dt.is_float:
            out.append(_case("sort", "nan", dt, [Inp(dt, [N, B], with_nan)],
                             lambda b, x: b.op("sort", x, dimension=1)))
        if dt in NUMERIC_DTYPES:
            out.append(_case("top_k", "k2", dt, [Inp(dt, [B, N + 2], small)],
                             lambda b, x: b.op("top_k", x, k=2)))
    return out


def all_cases() -> list[Case]:
    return (elementwise_cases() + shape_cases() + reduction_cases() + linalg_cases()
            + indexing_cases() + sorting_cases())
