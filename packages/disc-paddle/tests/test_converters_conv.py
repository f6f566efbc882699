"""Convolutions, batch normalization and pooling, forward and gradient, against Paddle.

Every program has dynamic batch and spatial dims (-1) and is compiled once, then run on
sizes it never saw: odd, batch 1, a plane smaller than the window, larger ones.
Convolution and batch-norm data are kept in [-1, 1]: Paddle accumulates float32 sums
sequentially in float32, and its own rounding over hundreds of terms of magnitude 4 would
exceed the default tolerance.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import paddle
import pytest
from op_parity import check_ops, rand

from disc_paddle import partition
from disc_paddle.converters.registry import INPLACE
from disc_paddle.versions import paddle_version

SIZES = [(2, 7, 9), (1, 5, 5), (3, 12, 8), (1, 1, 2), (4, 16, 11), (0, 5, 6)]


def _shape(fmt: str, n: int, c: int, h: int, w: int) -> list[int]:
    return [n, c, h, w] if fmt == "NCHW" else [n, h, w, c]


def _dyn(fmt: str, c: int) -> list[int]:
    return _shape(fmt, -1, c, -1, -1)


def _eager(fn: Any, *arrays: np.ndarray) -> Any:
    """Paddle's eager result (to size the output gradients), or None where an older Paddle
    (3.0) refuses an empty input, or a pooling window that leaves an empty output, which
    later ones accept: as in op_parity.check_ops, with no reference the set says nothing
    and is left out; other failures are the test's."""
    paddle.disable_static()
    try:
        return fn(*[paddle.to_tensor(a) for a in arrays])
    except (ValueError, RuntimeError) as e:
        if any(a.size == 0 for a in arrays) or (
                paddle_version() < (3, 1) and "output_size = 0" in str(e)):
            return None
        raise


# -- convolution ------------------------------------------------------------------------------

CONV_CASES = [
    # strides, paddings, padding_algorithm, dilations, groups, data_format, dtype, C, O, k
    ([1, 1], [1, 1], "EXPLICIT", [1, 1], 1, "NCHW", "float32", 3, 4, (3, 3)),
    ([2, 1], [1, 0, 2, 1], "EXPLICIT", [1, 2], 2, "NCHW", "float64", 4, 6, (3, 2)),
    ([2, 2], [0, 0], "SAME", [1, 1], 1, "NHWC", "float32", 3, 5, (3, 3)),  # run-time pads
    ([3, 2], [0, 0], "SAME", [2, 2], 1, "NCHW", "float64", 2, 3, (2, 1)),  # k < s: a crop
    ([1, 1], [0, 0], "VALID", [2, 1], 4, "NHWC", "float64", 4, 8, (2, 2)),
    ([2, 2], [2, 2], "EXPLICIT", [1, 1], 3, "NHWC", "float32", 3, 3, (1, 1)),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[2]}-{c[5]}-{c[6]}-g{c[4]}")
def test_conv2d_and_grad(case: tuple) -> None:
    strides, pads, algo, dil, groups, fmt, dtype, c, o, k = case

    def fwd(x: Any, w: Any) -> Any:
        return paddle._C_ops.conv2d(x, w, strides, pads, algo, dil, groups, fmt)

    def build(x: Any, w: Any, g: Any) -> Any:
        x.stop_gradient = w.stop_gradient = False
        y = fwd(x, w)
        return [y, *paddle.static.gradients([y], [x, w], [g])]

    wshape = [o, c // groups, *k]
    sets = []
    for n, h, w in SIZES:
        if algo != "SAME" and (h + sum(pads[:2]) < k[0] * dil[0] or w < k[1] * dil[1]):
            continue  # Paddle refuses a window larger than the padded input
        x = rand(_shape(fmt, n, c, h, w), dtype, seed=h, low=-1, high=1)
        wt = rand(wshape, dtype, seed=1, low=-1, high=1)
        y = _eager(fwd, x, wt)
        if y is None:
            continue
        sets.append([x, wt, rand(list(y.shape), dtype, seed=w, low=-1, high=1)])
    check_ops(build, [(_dyn(fmt, c), dtype), (wshape, dtype), (_dyn(fmt, o), dtype)], sets,
              required=["pd_op.conv2d", "pd_op.conv2d_grad"])


@pytest.mark.parametrize("wrt", ["filter", "input"])
def test_conv2d_grad_one_result(wrt: str) -> None:
    """A gradient op with one result unset (the other operand needs no gradient)."""

    def build(x: Any, w: Any, g: Any) -> Any:
        target = w if wrt == "filter" else x
        target.stop_gradient = False
        y = paddle._C_ops.conv2d(x, w, [2, 2], [1, 1], "EXPLICIT", [1, 1], 1, "NCHW")
        return paddle.static.gradients([y], [target], [g])

    sets = []
    for n, h, w in [(2, 7, 9), (1, 4, 4), (3, 2, 5)]:
        x = rand([n, 3, h, w], "float32", seed=h, low=-1, high=1)
        wt = rand([4, 3, 3, 3], "float32", seed=2, low=-1, high=1)
        gshape = [n, 4, (h - 1) // 2 + 1, (w - 1) // 2 + 1]
        sets.append([x, wt, rand(gshape, "float32", seed=w, low=-1, high=1)])
    check_ops(build, [([-1, 3, -1, -1], "float32"), ([4, 3, 3, 3], "float32"),
                      ([-1, 4, -1, -1], "float32")], sets, required=["pd_op.conv2d_grad"])


@pytest.mark.parametrize("dtype,fmt", [("float32", "NCHW"), ("float64", "NHWC")])
def test_depthwise_conv2d_and_grad(dtype: str, fmt: str) -> None:
    c, mult = 4, 2

    def fwd(x: Any, w: Any) -> Any:
        return paddle._C_ops.depthwise_conv2d(x, w, [2, 1], [1, 1], "EXPLICIT", c, [1, 1], fmt)

    def build(x: Any, w: Any, g: Any) -> Any:
        x.stop_gradient = w.stop_gradient = False
        y = fwd(x, w)
        return [y, *paddle.static.gradients([y], [x, w], [g])]

    wshape = [c * mult, 1, 3, 3]
    sets = []
    for n, h, w in SIZES:
        x = rand(_shape(fmt, n, c, h, w), dtype, seed=h, low=-1, high=1)
        wt = rand(wshape, dtype, seed=3, low=-1, high=1)
        y = _eager(fwd, x, wt)
        if y is None:
            continue
        sets.append([x, wt, rand(list(y.shape), dtype, seed=w, low=-1, high=1)])
    check_ops(build, [(_dyn(fmt, c), dtype), (wshape, dtype), (_dyn(fmt, c * mult), dtype)],
              sets, required=["pd_op.depthwise_conv2d", "pd_op.depthwise_conv2d_grad"])


# -- batch normalization ----------------------------------------------------------------------

BN_CASES = [
    # is_test, use_global_stats, trainable_statistics, data_format, dtype, rank
    (False, False, False, "NCHW", "float32", 4),
    (False, False, False, "NHWC", "float64", 4),
    (True, False, False, "NCHW", "float64", 4),
    (False, True, False, "NHWC", "float32", 4),
    (True, False, True, "NCHW", "float32", 4),  # test mode with batch statistics
    (False, False, False, "NCHW", "float64", 2),
    (True, False, False, "NCHW", "float32", 3),
]


@pytest.mark.parametrize("case", BN_CASES, ids=lambda c: f"test{c[0]:d}-global{c[1]:d}-"
                         f"trainable{c[2]:d}-{c[3]}-{c[4]}-rank{c[5]}")
def test_batch_norm_and_grad(case: tuple) -> None:
    """All results that Paddle defines: in test mode (or with global statistics) the saved
    statistics are left uninitialized by Paddle's CPU kernel, so they are not compared.
    The sizes include one element per channel (N*H*W == 1), which Paddle passes through."""
    is_test, ugs, trainable, fmt, dtype, rank = case
    c = 3
    glob = (is_test and not trainable) or ugs

    def build(x: Any, m: Any, v: Any, s: Any, b: Any, g: Any) -> Any:
        o = paddle._C_ops.batch_norm(x, m, v, s, b, is_test, 0.9, 1e-5, fmt, ugs, trainable)
        grads = paddle._C_ops.batch_norm_grad(x, s, b, o[1], o[2], o[3], o[4], o[5], g, 0.9,
                                              1e-5, fmt, is_test, ugs, trainable)
        return [*o[:3 if glob else 5], *grads]

    def shape(n: int, h: int, w: int) -> list[int]:
        if rank == 4:
            return _shape(fmt, n, c, h, w)
        return [n * h, c] if rank == 2 else [n, c, h * w]

    dyn = _dyn(fmt, c) if rank == 4 else [-1, c] if rank == 2 else [-1, c, -1]
    sets = []
    # not the empty batch: Paddle leaves the saved statistics (and from them the scale and
    # bias gradients) uninitialized there
    for n, h, w in [*(s for s in SIZES if s[0]), (1, 1, 1)]:
        sh = shape(n, h, w)
        sets.append([rand(sh, dtype, seed=h, low=-1, high=1), rand([c], dtype, seed=1),
                     rand([c], dtype, seed=2, low=0.5, high=2), rand([c], dtype, seed=3),
                     rand([c], dtype, seed=4), rand(sh, dtype, seed=w, low=-1, high=1)])
    vec = ([c], dtype)
    check_ops(build, [(dyn, dtype), vec, vec, vec, vec, (dyn, dtype)], sets,
              required=["pd_op.batch_norm", "pd_op.batch_norm_grad"])


def test_batch_norm_without_scale_and_bias() -> None:
    """``scale`` and ``bias`` are optional (1 and 0). The empty batch keeps the running
    statistics (its saved ones are left uninitialized by Paddle, not compared)."""

    def build(x: Any, m: Any, v: Any) -> Any:
        return paddle._C_ops.batch_norm(x, m, v, None, None, False, 0.9, 1e-5, "NCHW", False,
                                        False)[:3]

    sets = [[rand([n, 2, h, w], "float32", seed=h), rand([2], "float32", seed=1),
             rand([2], "float32", seed=2, low=0.5, high=2)] for n, h, w in SIZES]
    check_ops(build, [([-1, 2, -1, -1], "float32"), ([2], "float32"), ([2], "float32")], sets)


def _cnn_program(train: bool) -> Any:
    class Net(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.conv = paddle.nn.Conv2D(3, 4, 3, padding=1)
            self.bn = paddle.nn.BatchNorm2D(4)

        def forward(self, x: Any) -> Any:
            return self.bn(self.conv(x))

    paddle.disable_static()
    net = Net()
    net.train() if train else net.eval()
    spec = [paddle.static.InputSpec([None, 3, None, None], "float32")]
    st = paddle.jit.to_static(net, input_spec=spec, full_graph=True)
    return st.forward.concrete_program_specify_input_spec(input_spec=spec).main_program


@pytest.mark.parametrize("train", [True, False])
def test_layer_batch_norm_is_in_place(train: bool) -> None:
    """``paddle.nn.BatchNorm2D`` in a to_static program (training and eval) is
    ``pd_op.batch_norm_``, which updates the running statistics in place. It converts in
    both: in eval nothing is written (the statistics pass through); in training its
    ``INPLACE`` entry makes the launch write the updated statistics back."""
    main = _cnn_program(train)
    ops = main.global_block().ops
    names = [op.name() for op in ops]
    assert "pd_op.batch_norm_" in names and "pd_op.batch_norm" not in names
    bn = ops[names.index("pd_op.batch_norm_")]
    analysis = partition.analyze(main, min_cluster_size=1, outputs=[bn.result(0)])
    verdicts = {n.name: analysis.verdicts[n] for n in analysis.nodes}
    assert verdicts["pd_op.conv2d"].supported
    assert verdicts["pd_op.batch_norm_"].supported, verdicts["pd_op.batch_norm_"]
    assert INPLACE["pd_op.batch_norm_"] == {1: 1, 2: 2}


# -- pooling ----------------------------------------------------------------------------------

POOL_CASES = [
    # type, kernel, strides, paddings, ceil, exclusive, format, global, adaptive, algo, dtype
    ("max", [2, 2], [2, 2], [0, 0], False, True, "NCHW", False, False, "EXPLICIT", "float32"),
    ("max", [3, 3], [2, 2], [1, 1], True, True, "NHWC", False, False, "EXPLICIT", "float64"),
    ("max", [2, 3], [3, 2], [0, 0], False, True, "NHWC", False, False, "SAME", "float32"),
    ("avg", [3, 3], [2, 2], [1, 1], True, True, "NHWC", False, False, "EXPLICIT", "float32"),
    ("avg", [3, 2], [2, 1], [1, 0, 0, 1], True, False, "NCHW", False, False, "EXPLICIT",
     "float64"),
    ("avg", [3, 3], [2, 2], [0, 0], False, True, "NCHW", False, False, "SAME", "float64"),
    ("avg", [2, 2], [1, 1], [0, 0], False, False, "NCHW", False, False, "VALID", "float32"),
    ("avg", [1, 1], [1, 1], [0, 0], False, True, "NCHW", False, True, "EXPLICIT", "float32"),
    ("avg", [1, 1], [1, 1], [0, 0], False, True, "NHWC", False, True, "EXPLICIT", "float64"),
    ("max", [1, 1], [1, 1], [0, 0], False, True, "NHWC", True, False, "EXPLICIT", "float64"),
    ("avg", [5, 5], [1, 1], [0, 0], False, True, "NCHW", True, False, "EXPLICIT", "float32"),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: f"{c[0]}-k{c[1][0]}{c[1][1]}-"
                         f"{c[9]}-{c[6]}-{c[10]}-g{c[7]:d}a{c[8]:d}c{c[4]:d}e{c[5]:d}")
def test_pool2d_and_grad(case: tuple) -> None:
    """Max inputs are rounded so windows hold ties (the gradient's first-maximum rule)."""
    kind, k, s, p, ceil, excl, fmt, glob, adapt, algo, dtype = case
    c = 3

    def fwd(x: Any) -> Any:
        return paddle._C_ops.pool2d(x, k, s, p, ceil, excl, fmt, kind, glob, adapt, algo)

    def build(x: Any, g: Any) -> Any:
        y = fwd(x)
        return y, paddle._C_ops.pool2d_grad(x, y, g, k, s, p, ceil, excl, fmt, kind, glob,
                                            adapt, algo)

    sets = []
    for n, h, w in SIZES:
        x = rand(_shape(fmt, n, c, h, w), dtype, seed=h)
        if kind == "max":
            x = np.round(x).astype(dtype)
        y = _eager(fwd, x)
        if y is None:
            continue
        sets.append([x, rand(list(y.shape), dtype, seed=w)])
    check_ops(build, [(_dyn(fmt, c), dtype), (_dyn(fmt, c), dtype)], sets,
              required=["pd_op.pool2d", "pd_op.pool2d_grad"])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pool2d_adaptive_dividing_static_plane(dtype: str) -> None:
    """Adaptive pooling to a size dividing a static plane is a regular pooling."""

    def build(x: Any, g: Any) -> Any:
        y = paddle._C_ops.pool2d(x, [3, 2], [1, 1], [0, 0], False, True, "NCHW", "avg", False,
                                 True, "EXPLICIT")
        return y, paddle._C_ops.pool2d_grad(x, y, g, [3, 2], [1, 1], [0, 0], False, True,
                                            "NCHW", "avg", False, True, "EXPLICIT")

    sets = [[rand([n, 2, 6, 8], dtype, seed=n), rand([n, 2, 3, 2], dtype, seed=n + 1)]
            for n in (2, 1, 5)]
    check_ops(build, [([-1, 2, 6, 8], dtype), ([-1, 2, 3, 2], dtype)], sets)


WITH_INDEX_CASES = [
    # kernel, strides, paddings, global, adaptive, ceil, dtype
    ([2, 2], [2, 2], [0, 0], False, False, False, "float32"),
    ([3, 3], [2, 2], [1, 1], False, False, True, "float64"),
    ([1, 1], [1, 1], [0, 0], False, True, False, "float32"),
    ([3, 3], [1, 1], [0, 0], True, False, False, "float64"),
]


@pytest.mark.parametrize("case", WITH_INDEX_CASES, ids=lambda c: f"k{c[0][0]}-s{c[1][0]}-"
                         f"p{c[2][0]}-g{c[3]:d}a{c[4]:d}c{c[5]:d}-{c[6]}")
def test_max_pool2d_with_index_and_grad(case: tuple) -> None:
    """``paddle.nn.functional.max_pool2d(return_mask=True)`` and adaptive max pooling."""
    k, s, p, glob, adapt, ceil, dtype = case

    def build(x: Any, g: Any) -> Any:
        y, mask = paddle._C_ops.max_pool2d_with_index(x, k, s, p, glob, adapt, ceil)
        return y, mask, paddle._C_ops.max_pool2d_with_index_grad(x, mask, g, k, s, p, glob,
                                                                  adapt, ceil)

    sets = []
    for n, h, w in SIZES:
        x = np.round(rand([n, 3, h, w], dtype, seed=h)).astype(dtype)
        res = _eager(lambda t: paddle._C_ops.max_pool2d_with_index(t, k, s, p, glob, adapt,
                                                                    ceil), x)
        if res is None:
            continue
        y = res[0]
        sets.append([x, rand(list(y.shape), dtype, seed=w)])
    check_ops(build, [([-1, 3, -1, -1], dtype), ([-1, 3, -1, -1], dtype)], sets,
              required=["pd_op.max_pool2d_with_index", "pd_op.max_pool2d_with_index_grad"])


def test_functional_pooling_api() -> None:
    """What ``paddle.nn.functional`` emits: max_pool2d (pool2d), return_mask
    (max_pool2d_with_index), adaptive avg and max to 1x1, avg_pool2d with ceil_mode."""
    F = paddle.nn.functional

    def build(x: Any) -> Any:
        return (F.max_pool2d(x, 2), F.max_pool2d(x, 3, 2, 1, return_mask=True)[0],
                F.adaptive_avg_pool2d(x, 1), F.adaptive_max_pool2d(x, 1),
                F.avg_pool2d(x, 3, 2, 1, ceil_mode=True))

    sets = [[rand([n, 2, h, w], "float32", seed=h)] for n, h, w in SIZES]
    check_ops(build, [([-1, 2, -1, -1], "float32")], sets,
              required=["pd_op.pool2d", "pd_op.max_pool2d_with_index"])


# -- refusals ---------------------------------------------------------------------------------

def _verdicts(build: Any, specs: list[tuple[list[int], str]]) -> list[tuple[str, Any]]:
    paddle.enable_static()
    try:
        main = paddle.static.Program()
        with paddle.static.program_guard(main):
            xs = [paddle.static.data(f"x{i}", s, d) for i, (s, d) in enumerate(specs)]
            outs = build(*xs)
        analysis = partition.analyze(main, min_cluster_size=1, outputs=list(outs))
        return [(n.name, analysis.verdicts[n]) for n in analysis.nodes]
    finally:
        paddle.disable_static()


def test_refusals() -> None:
    """Adaptive pooling to a size that does not divide a dynamic plane; the max gradient of
    pool2d's adaptive mode (Paddle's kernel walks plain windows there)."""

    def build(x: Any, g: Any) -> Any:
        y = paddle._C_ops.pool2d(x, [3, 3], [1, 1], [0, 0], False, True, "NCHW", "avg",
                                 False, True, "EXPLICIT")
        z = paddle._C_ops.pool2d(x, [2, 2], [1, 1], [0, 0], False, True, "NCHW", "max",
                                 False, True, "EXPLICIT")
        dz = paddle._C_ops.pool2d_grad(x, z, g, [2, 2], [1, 1], [0, 0], False, True, "NCHW",
                                       "max", False, True, "EXPLICIT")
        return y, dz

    v = _verdicts(build, [([-1, 3, -1, -1], "float32"), ([-1, 3, 2, 2], "float32")])
    bad = [(n, s.reason) for n, s in v if not s.supported]
    assert [n for n, _ in bad] == ["pd_op.pool2d"] * 2 + ["pd_op.pool2d_grad"], v
    assert all("adaptive" in r for _, r in bad), bad
    assert "plain windows" in bad[2][1]
