"""Elementwise math, comparisons, casts, activations and their gradients against Paddle.

Each test builds one static program (dynamic dims), compiles it once with native code and
runs it on several input sets whose sizes the compilation never saw (0, 1, odd, larger,
a broadcast operand). Edge values (ties, bounds of piecewise functions, halves for
rounding, NaN and infinities) are planted at the start of the inputs.
"""

from __future__ import annotations

import numpy as np
import paddle
import pytest
from op_parity import check_ops, rand

from disc_core.symbolic import Expr, floordiv, mod, smax
from disc_paddle import partition

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

C = paddle._C_ops
F = paddle.nn.functional
FLOATS = ["float32", "float64"]
INTS = ["int32", "int64"]


def _plant(a: np.ndarray, values: list[float]) -> np.ndarray:
    """``a`` with its first elements replaced by ``values`` (as many as fit)."""
    out = a.copy().reshape(-1)
    n = min(len(values), out.size)
    out[:n] = np.asarray(values[:n], dtype=a.dtype)
    return out.reshape(a.shape)


def _nonzero(a: np.ndarray) -> np.ndarray:
    return np.where(a == 0, 1, a).astype(a.dtype)


# 2-D x with a 1-D operand broadcast along its rows; sizes never seen at compile time. The
# 1-D operand comes second: its symbolic dim meets x's, the first operand's dim is the
# result's, and the run-time check lets the second be 1 (a first operand of size 1 against
# a larger symbolic dim is refused at run time by the bridges' broadcasting rule).
PAIR_SHAPES = [((3, 5), (5,)), ((1, 1), (1,)), ((7, 4), (4,)), ((0, 3), (3,)),
               ((2, 6), (1,)), ((9, 17), (17,))]


# -- binary ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
def test_binary_float(dtype):
    def build(x, y):
        return [C.add(x, y), C.subtract(x, y), C.multiply(x, y), C.divide(x, y),
                C.maximum(x, y), C.minimum(x, y), C.floor_divide(x, y), C.remainder(x, y),
                C.elementwise_pow(C.abs(x), y)]

    sets = []
    for i, (xs, ys) in enumerate(PAIR_SHAPES):
        x = _plant(rand(xs, dtype, i, -6, 6), [1.5, -1.5, 0.0, -0.0, 4.0])
        y = _plant(rand(ys, dtype, i + 50), [1.5, 1.5, -1.0, 2.0, -2.0])
        sets.append([x, y])
    check_ops(build, [([-1, -1], dtype), ([-1], dtype)], sets,
              required=["pd_op.floor_divide", "pd_op.remainder", "pd_op.elementwise_pow"])


@pytest.mark.parametrize("dtype", INTS)
def test_binary_int(dtype):
    def build(x, y, e):
        return [C.add(x, y), C.subtract(x, y), C.multiply(x, y), C.maximum(x, y),
                C.minimum(x, y), C.floor_divide(x, y), C.remainder(x, y),
                C.elementwise_pow(x, e)]

    sets = []
    for i, (xs, ys) in enumerate(PAIR_SHAPES):
        x = _plant(rand(xs, dtype, i, -6, 6), [7, -7, 7, -7, 0, 0, 1, -1])
        y = _plant(_nonzero(rand(ys, dtype, i + 50, -4, 4)), [2, 2, -2, -2, 3, -3, -2, -3])
        e = _plant(rand(ys, dtype, i + 70, -1, 2), [2, 3, -1, 0, -1, 0, -3, -3])
        sets.append([x, y, e])
    spec = [([-1, -1], dtype), ([-1], dtype), ([-1], dtype)]
    check_ops(build, spec, sets, required=["pd_op.floor_divide", "pd_op.elementwise_pow"])


# -- binary gradients --------------------------------------------------------------------

def _grads(fn, wrt, dout):
    """The gradient ops of ``fn(*wrt)`` with ``dout`` as the output's gradient."""
    for v in wrt:
        v.stop_gradient = False
    return paddle.static.gradients([fn(*wrt)], wrt, target_gradients=[dout])


@pytest.mark.parametrize("dtype", FLOATS)
def test_binary_grads(dtype):
    """x [n, m] with y [m] (leading dim summed), r [1, m] and c [n, 1] (static-1 dims
    summed and kept)."""
    def build(x, y, r, c, d):
        return [C.add_grad(x, y, d, -1), C.subtract_grad(x, y, d, -1),
                C.add_grad(r, c, d, -1), C.subtract_grad(c, x, d, -1),
                _grads(C.multiply, [x, y], d), _grads(C.multiply, [r, c], d),
                C.divide_grad(x, y, C.divide(x, y), d, -1),
                C.divide_grad(c, r, C.divide(c, r), d, -1),
                C.maximum_grad(x, y, d), C.minimum_grad(x, y, d),
                C.maximum_grad(c, r, d), C.minimum_grad(r, x, d),
                C.elementwise_pow_grad(C.abs(x), y, d), C.elementwise_pow_grad(C.abs(r), c, d),
                C.elementwise_pow_grad(x, y, d),
                C.remainder_grad(x, y, d)]

    sets = []
    for i, (n, m) in enumerate([(3, 5), (1, 1), (7, 4), (0, 3), (9, 17)]):
        # ties with x, and pow's special points: y == 0, x == 0 with y >= 0 or y < 0
        x = _plant(rand((n, m), dtype, i), [1.0, 2.0, -1.0, 0.5, 0.0, 0.0, 0.0, 3.0])
        y = _plant(rand((m,), dtype, i + 1), [1.0, 1.0, -1.0, -0.5, 0.0, 2.0, -1.0, 0.0])
        r = _plant(rand((1, m), dtype, i + 2), [2.0, 1.0])
        c = _plant(rand((n, 1), dtype, i + 3), [2.0, -1.0])
        sets.append([x, y, r, c, rand((n, m), dtype, i + 4)])
    spec = [([-1, -1], dtype), ([-1], dtype), ([1, -1], dtype), ([-1, 1], dtype),
            ([-1, -1], dtype)]
    check_ops(build, spec, sets, required=["pd_op.multiply_grad", "pd_op.maximum_grad",
                                           "pd_op.elementwise_pow_grad"])


@pytest.mark.parametrize("dtype", INTS)
def test_binary_grads_int(dtype):
    def build(x, y, d):
        return [C.add_grad(x, y, d, -1), C.subtract_grad(x, y, d, -1),
                _grads(C.multiply, [x, y], d)]

    sets = [[rand((n, m), dtype, n), rand((m,), dtype, m), rand((n, m), dtype, 7)]
            for n, m in [(3, 5), (1, 1), (0, 2), (6, 9)]]
    check_ops(build, [([-1, -1], dtype), ([-1], dtype), ([-1, -1], dtype)], sets,
              required=["pd_op.multiply_grad"])


def test_unread_gradient_is_not_computed():
    """y does not need a gradient: multiply_grad's second result is left unset."""
    def build(x, y, d):
        x.stop_gradient = False
        return paddle.static.gradients([C.multiply(x, y)], [x], target_gradients=[d])

    sets = [[rand((n, 4), "float32", n), rand((4,), "float32", 1), rand((n, 4), "float32", 2)]
            for n in (2, 5)]
    check_ops(build, [([-1, 4], "float32"), ([4], "float32"), ([-1, 4], "float32")], sets)


# -- comparisons and logic -------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + INTS + ["bool"])
def test_compare_and_logic(dtype):
    def build(x, y):
        outs = [C.equal(x, y), C.not_equal(x, y), C.less_than(x, y), C.less_equal(x, y),
                C.greater_than(x, y), C.greater_equal(x, y), C.logical_and(x, y),
                C.logical_or(x, y), C.logical_xor(x, y), C.logical_not(x)]
        if dtype in INTS + ["bool"]:
            outs += [C.bitwise_and(x, y), C.bitwise_or(x, y), C.bitwise_xor(x, y),
                     C.bitwise_not(x)]
        return outs

    sets = []
    for i, (xs, ys) in enumerate(PAIR_SHAPES):
        x, y = rand(xs, dtype, i, -2, 2), rand(ys, dtype, i + 9, -2, 2)
        if dtype in FLOATS:  # halves, so that ties happen
            x, y = np.round(x * 2) / 2, np.round(y * 2) / 2
        sets.append([x, y])
    check_ops(build, [([-1, -1], dtype), ([-1], dtype)], sets)


# -- unary and activations -------------------------------------------------------------

# planted at the start of the wide-range input: bounds of relu6/hardswish/hardsigmoid/clip,
# halves (round half to even), zeros
EDGES = [-3.0, 3.0, 0.0, 6.0, -6.0, 0.5, 1.5, 2.5, -0.5, -2.5, -1.0, 1.0, 7.0, -0.0]


@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_float(dtype):
    # C.round is given its decimals: before 3.3 it has no default (3.0-3.2 read a missing
    # argument and crash or take garbage)
    def build(x, w):
        return [C.exp(x), C.expm1(x), C.log(x), C.log1p(x), C.sqrt(x), C.rsqrt(x),
                C.square(x), C.abs(w), C.sign(w), C.floor(w), C.ceil(w), C.round(w, 0),
                C.reciprocal(x), C.sin(w), C.cos(w), C.tan(x), C.tanh(w), C.sigmoid(w),
                C.erf(x), paddle.pow(x, 2.5), paddle.pow(w, 3.0), paddle.pow(x, -0.5),
                paddle.scale(w, 2.5, 1.5), paddle.scale(w, -0.3, 1.0, bias_after_scale=False),
                paddle.cast(w, "int32"), paddle.cast(w, "int64"), paddle.cast(w, "bool"),
                paddle.cast(x, "float64" if dtype == "float32" else "float32"),
                paddle.clip(w, -1.0, 2.5), paddle.clip(w, min=0.5), C.isnan(x), C.isinf(x),
                C.isfinite(x)]

    sets = []
    for i, n in enumerate([(3, 5), (1, 1), (0, 4), (8, 13)]):
        x = _plant(rand(n, dtype, i, -2, 2), [0.0, -1.0, 1.0])
        w = _plant(rand(n, dtype, i + 5, -8, 8), EDGES)
        sets.append([x, w])
    check_ops(build, [([-1, -1], dtype), ([-1, -1], dtype)], sets,
              required=["pd_op.scale", "pd_op.clip", "pd_op.round", "pd_op.pow"])


@pytest.mark.parametrize("dtype", FLOATS)
def test_activations(dtype):
    def build(w):
        return [F.relu(w), F.gelu(w), F.gelu(w, approximate=True), F.silu(w), F.swish(w),
                F.leaky_relu(w, 0.2), F.elu(w, 0.7), F.elu(w, -0.4), F.relu6(w),
                F.hardswish(w), F.hardsigmoid(w), F.hardsigmoid(w, slope=0.2, offset=0.3),
                F.softplus(w), F.softplus(w, beta=2.0, threshold=5.0), F.mish(w),
                F.log_sigmoid(w), F.tanhshrink(w), F.hardtanh(w, -2.0, 3.0)]

    sets = [[_plant(rand(n, dtype, i, -8, 8), EDGES + [2.5, -40.0, 40.0, 25.0, -25.0])]
            for i, n in enumerate([(3, 5), (1, 1), (0, 4), (8, 13)])]
    check_ops(build, [([-1, -1], dtype)], sets,
              required=["pd_op.gelu", "pd_op.hardswish", "pd_op.mish", "pd_op.softplus"])


@pytest.mark.parametrize("dtype", FLOATS)
def test_special_values(dtype):
    """NaN and infinities: max/min propagate NaN, clip keeps it, the predicates see it."""
    def build(x, y):
        return [C.isnan(x), C.isinf(x), C.isfinite(x), C.maximum(x, y), C.minimum(x, y),
                paddle.clip(x, -1.0, 1.0), C.sign(x), F.relu(x), C.abs(x), C.equal(x, y)]

    special = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, np.nan]
    sets = [[_plant(rand((n, 7), dtype, n), special),
             _plant(rand((7,), dtype, 3), [1.0, np.nan, 2.0, np.inf, np.nan, -np.inf, np.nan])]
            for n in (1, 3, 6)]
    check_ops(build, [([-1, 7], dtype), ([7], dtype)], sets)


@pytest.mark.parametrize("dtype", INTS)
def test_unary_int(dtype):
    """Integer abs/sign/square, scale and clip with truncated float arguments, casts,
    and the float predicates (constant on integers)."""
    def build(x, c):
        return [C.abs(x), C.sign(x), C.square(x), paddle.scale(x, 2.5, 1.5),
                paddle.scale(x, -3.0, 2.0, bias_after_scale=False), paddle.clip(x, -2.5, 3.7),
                paddle.cast(x, "float32"), paddle.cast(x, "float64"), paddle.cast(x, "bool"),
                paddle.cast(x, "int64" if dtype == "int32" else "int32"),
                C.isnan(x), C.isinf(x), C.isfinite(x), C.where(c, x, C.abs(x)),
                paddle.cast(c, dtype)]

    sets = [[_plant(rand(n, dtype, i, -9, 9), [0, -1, 1, -7]), rand(n, "bool", i)]
            for i, n in enumerate([(3, 5), (1, 1), (0, 4), (6, 11)])]
    check_ops(build, [([-1, -1], dtype), ([-1, -1], "bool")], sets,
              required=["pd_op.where", "pd_op.scale", "pd_op.clip"])


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_scale_and_clip_by_tensors(dtype):
    """scale and clip bounds computed at run time (one-element float32 tensors); integer
    inputs use the truncated scale, as Paddle."""
    def build(x, s, lo):
        outs = [C.scale(x, s, 0.5, False), C.scale(x, s, 1.0, True)]
        if dtype in FLOATS:
            outs += [paddle.clip(x, min=lo, max=s), C.clip_grad(x, x, lo, s)]
        return outs

    sets = [[_plant(rand(n, dtype, i, -4, 4), [1.5, 2.7, -1.0]),
             np.array([v], "float32"), np.array([-1.0], "float32")]
            for i, (n, v) in enumerate([((3, 5), 2.7), ((1, 1), -0.5), ((0, 4), 1.0),
                                        ((6, 11), 1.5)])]
    check_ops(build, [([-1, -1], dtype), ([1], "float32"), ([1], "float32")], sets,
              required=["pd_op.scale"])


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "bool"])
def test_cast_from_narrow_types(dtype):
    """Casts take every dtype (uint8 images to float, masks to int)."""
    def build(x):
        return [paddle.cast(x, "float32"), paddle.cast(x, "float64"), paddle.cast(x, "int32"),
                paddle.cast(x, "int64"), paddle.cast(x, "bool"), paddle.cast(x, "uint8")]

    sets = [[rand(n, dtype, i, -100, 100)] for i, n in enumerate([(3, 5), (1, 1), (0, 4),
                                                                  (6, 11)])]
    check_ops(build, [([-1, -1], dtype)], sets, required=["pd_op.cast"])


def test_assign_value():
    """A constant from attributes: float data, and integers that fold with a shape (the
    sum ``shape64(x) + [1, 3]`` is known, then read as data)."""
    def build(x):
        c = C.assign_value([2], paddle.float32, [1.5, -2.25], paddle.CPUPlace())
        k = C.assign_value([2], paddle.int64, [1, 3], paddle.CPUPlace())
        n = paddle.cast(C.add(paddle.shape(x), k), "float32")
        return [C.multiply(x, c), C.multiply(x, n)]

    sets = [[rand((n, 2), "float32", n)] for n in (3, 1, 0, 8)]
    check_ops(build, [([-1, 2], "float32")], sets, required=["pd_op.assign_value"])


# -- where -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
def test_where_and_grad(dtype):
    """Paddle's where takes operands of one shape (its Python API broadcasts first)."""
    def build(c, x, y, d):
        out = C.where(c, x, y)
        return [out, C.where_grad(c, x, y, d), C.where(C.greater_than(x, C.abs(y)), x, y)]

    sets = []
    for i, (n, m) in enumerate([(3, 5), (1, 1), (0, 2), (7, 9)]):
        sets.append([rand((n, m), "bool", i), rand((n, m), dtype, i + 1),
                     rand((n, m), dtype, i + 2), rand((n, m), dtype, i + 3)])
    check_ops(build, [([-1, -1], "bool"), ([-1, -1], dtype), ([-1, -1], dtype),
                      ([-1, -1], dtype)], sets, required=["pd_op.where_grad"])


# -- unary gradients ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_grads(dtype):
    def build(x, w, d):
        return [C.exp_grad(C.exp(x), d), C.log_grad(x, d), C.log1p_grad(x, d),
                C.sqrt_grad(C.sqrt(x), d), C.rsqrt_grad(C.rsqrt(x), d),
                C.square_grad(w, d), C.abs_grad(w, d), C.tanh_grad(C.tanh(w), d),
                C.sigmoid_grad(C.sigmoid(w), d), C.erf_grad(w, d), C.sin_grad(w, d),
                C.cos_grad(w, d), C.reciprocal_grad(C.reciprocal(x), d),
                C.pow_grad(x, d, 2.5), C.pow_grad(w, d, 3.0), C.pow_grad(w, d, 0.0),
                C.pow_grad(w, d, 0.5), C.floor_grad(d),
                C.round_grad(d), C.ceil_grad(d), C.clip_grad(w, d, -1.0, 2.5),
                # the backward of scale and cast is scale and cast
                paddle.scale(d, 2.5, 0.0), paddle.cast(paddle.cast(w, "float64"), dtype)]

    sets = []
    for i, n in enumerate([(3, 5), (1, 1), (0, 4), (8, 13)]):
        x = rand(n, dtype, i, 0.1, 3)  # positive: log, sqrt, fractional powers
        w = _plant(rand(n, dtype, i + 5, -4, 4), EDGES)
        sets.append([x, w, rand(n, dtype, i + 9)])
    spec = [([-1, -1], dtype)] * 3
    check_ops(build, spec, sets, required=["pd_op.clip_grad", "pd_op.pow_grad",
                                           "pd_op.abs_grad"])


@pytest.mark.parametrize("dtype", FLOATS)
def test_activation_grads(dtype):
    """``v`` in [-3, 3] feeds the tanh form of gelu's gradient in float32: further out,
    0.5 * (1 + tanh(..)) cancels, and Paddle's CPU kernel (Eigen's fast float tanh) is the
    less accurate side (at x = -4.03 it is 0.4% off the float64 value, DISC 0.05%; at
    -4.99 it gives 0, the float64 value is -2.3e-6). float64 covers the full range."""
    def build(w, v, d):
        outs = [C.relu_grad(F.relu(w), d), C.gelu_grad(w, d, False), C.gelu_grad(v, d, True),
                C.silu_grad(w, F.silu(w), d), C.swish_grad(w, d),
                C.leaky_relu_grad(w, d, 0.2), C.elu_grad(w, F.elu(w, 0.7), d, 0.7),
                C.elu_grad(w, F.elu(w, -0.4), d, -0.4), C.relu6_grad(F.relu6(w), d),
                C.hardswish_grad(w, d), C.hardsigmoid_grad(F.hardsigmoid(w), d, 1 / 6, 0.5),
                C.softplus_grad(w, d, 1.0, 20.0), C.softplus_grad(w, d, 2.0, 5.0),
                C.mish_grad(w, d, 20.0), C.logsigmoid_grad(w, d), C.tanh_shrink_grad(w, d),
                C.hardtanh_grad(w, d, -2.0, 3.0)]
        return outs + ([C.gelu_grad(w, d, True)] if dtype == "float64" else [])

    sets = [[_plant(rand(n, dtype, i, -8, 8), EDGES + [2.5, -30.0, 30.0, 25.0, -25.0]),
             _plant(rand(n, dtype, i + 1, -3, 3), [-3.0, 3.0, 0.0]), rand(n, dtype, i + 3)]
            for i, n in enumerate([(3, 5), (1, 1), (0, 4), (8, 13)])]
    check_ops(build, [([-1, -1], dtype)] * 3, sets,
              required=["pd_op.gelu_grad", "pd_op.hardswish_grad", "pd_op.mish_grad"])


# -- size arithmetic folds ---------------------------------------------------------------

def test_integer_ops_on_sizes_fold():
    """``shape64(x)[1] // 4``, ``n * 3``, ``n % 3``, ``n - m``, ``-n``, ``max(n, m)`` and an
    integer cast of the shape are known at compile time, as symbolic sizes; read as data
    they are materialized from the input's dims."""
    paddle.enable_static()
    try:
        main = paddle.static.Program()
        with paddle.static.program_guard(main):
            x = paddle.static.data("x", [-1, -1], "float32")
            s = paddle.shape(x)
            outs = [s[1] // 4, s[0] * 3, s[0] % 3, s[0] - s[1], -s[0],
                    paddle.maximum(s[0], s[1]), paddle.cast(s, "int32"), s[0] + s[1] * 2]
        analysis = partition.analyze(main, min_cluster_size=1, outputs=outs)
        assert all(v.supported for v in analysis.verdicts.values())
        n, m = analysis.types[x.id].shape
        got = [analysis.known[o.id] for o in outs]
        assert got[0].item() == floordiv(m, 4)
        assert got[1].item() == n * 3
        assert got[2].item() == mod(n, 3)
        assert got[3].item() == n - m
        assert got[4].item() == -n
        assert got[5].item() == smax(n, m)
        assert list(got[6]) == [n, m]
        assert got[7].item() == n + m * 2
        assert all(isinstance(e, Expr) for e in [g.item() for g in got[:6]])
    finally:
        paddle.disable_static()


def test_folded_sizes_read_as_data():
    """Folded sizes used as tensor data (a scale factor) match Paddle on unseen shapes."""
    def build(x):
        s = paddle.shape(x)
        k = paddle.cast(s[1] // 4 + s[0] % 3 - paddle.maximum(s[0], s[1]) * 2, "float32")
        return [C.multiply(x, k), paddle.cast(-s[0], "float32") + x]

    sets = [[rand((n, m), "float32", n)] for n, m in [(3, 8), (1, 1), (5, 13), (4, 0)]]
    check_ops(build, [([-1, -1], "float32")], sets)


# -- refusals ----------------------------------------------------------------------------

def _verdicts(build, specs):
    paddle.enable_static()
    try:
        main = paddle.static.Program()
        with paddle.static.program_guard(main):
            xs = [paddle.static.data(f"x{i}", s, d) for i, (s, d) in enumerate(specs)]
            outs = [o for out in build(*xs) for o in (out if isinstance(out, tuple) else [out])]
        analysis = partition.analyze(main, min_cluster_size=1, outputs=outs)
        return {n.name: analysis.verdicts[n] for n in analysis.nodes}
    finally:
        paddle.disable_static()


def test_refusals():
    """round to decimals, old-style aligned broadcasting (axis != -1) and an integer
    gradient of pow stay in Paddle, with the reason."""
    v = _verdicts(lambda x, y: [paddle.round(x, decimals=2), C.add_grad(x, y, x, 0)],
                  [([-1, 3], "float32"), ([-1], "float32")])
    assert not v["pd_op.round"].supported and "decimals" in v["pd_op.round"].reason
    assert not v["pd_op.add_grad"].supported and "axis" in v["pd_op.add_grad"].reason
    v = _verdicts(lambda x, y: [C.elementwise_pow_grad(x, y, x)],
                  [([-1, 3], "int32"), ([3], "int32")])
    assert not v["pd_op.elementwise_pow_grad"].supported
