"""The disc_launch_<N> Paddle operators: a DISC module run inside Paddle's executor.

Each test compiles a small core graph natively, puts a launch op into a PIR program the
way the bridge's program rewrite does, runs it on shapes the module never saw, and checks
the results against Paddle's own ops on the same inputs.
"""

from __future__ import annotations

import numpy as np
import paddle
import pytest

from disc_core import Compiler, GraphBuilder
from disc_paddle import custom_op
from disc_runtime.abi import ABI_VERSION, MODULE_FILE

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

F32 = int(paddle.base.core.DataType.FLOAT32)


@pytest.fixture(scope="module")
def lib() -> custom_op.OpLibrary:
    try:
        return custom_op.load_library()
    except custom_op.CustomOpUnavailable as exc:  # no C++ compiler on this machine
        pytest.fail(f"the launch operators must build where the tests run: {exc}")


@pytest.fixture(scope="module")
def gelu_and_rowsum(tmp_path_factory) -> tuple[str, str]:
    """(module path, cluster key) of y = tanh(x) * x + b, s = sum(y, axis=1)."""
    b = GraphBuilder("launch_test")
    n, m = b.symbol("N"), b.symbol("M")
    x, bias = b.input("x", "f32", [n, m]), b.input("b", "f32", [m])
    y = b.add(b.mul(b.tanh(x), x), b.broadcast_to(bias, [n, m]))
    s = b.op("reduce", y, axes=[1], kind="sum")
    exe = Compiler(target="native").compile(b.build(y, s))
    assert exe.artifact.engine == "native"
    return str(exe.artifact.path(MODULE_FILE)), "launch_test"


def _program(lib, module: str, key: str, width: int, check: bool = False):
    """The launch and Paddle's ops on the same inputs; ``check``: a checking launch (the
    accuracy guard's), which takes Paddle's results as its expected values."""
    main = paddle.static.Program()
    with paddle.static.program_guard(main):
        x = paddle.static.data("x", [-1, width], "float32")
        bias = paddle.static.data("b", [width], "float32")
        ref_y = paddle.tanh(x) * x + bias
        ref_s = ref_y.sum(axis=1)
        tolerances = [1e-4, 1e-4] if check else []
        y, s = paddle._C_ops._run_custom_op(
            custom_op.op_name(2), [x, bias] + ([ref_y, ref_s] if check else []), module, key,
            ABI_VERSION, [2, 1], [2, 1], [F32, F32], [-1, width, -1], tolerances,
            tolerances)
    return main, [y, s, ref_y, ref_s]


def test_launch_runs_a_module_on_unseen_shapes(lib, gelu_and_rowsum) -> None:
    module, key = gelu_and_rowsum
    paddle.enable_static()
    try:
        for width in (7, 1, 33):
            main, fetch = _program(lib, module, key, width)
            exe = paddle.static.Executor(paddle.CPUPlace())
            for rows in (0, 1, 5, 130):
                rng = np.random.default_rng(rows + width)
                feed = {"x": rng.standard_normal((rows, width), dtype=np.float32),
                        "b": rng.standard_normal(width, dtype=np.float32)}
                y, s, ref_y, ref_s = exe.run(main, feed=feed, fetch_list=fetch)
                assert y.shape == (rows, width) and s.shape == (rows,)
                np.testing.assert_allclose(y, ref_y, rtol=1e-6, atol=1e-6)
                np.testing.assert_allclose(s, ref_s, rtol=1e-5, atol=1e-5)
    finally:
        paddle.disable_static()
    calls, fallback_calls, seconds = lib.stats(key)
    assert calls == 12 and fallback_calls == 0 and seconds > 0
    assert lib.take_failures() == []


def test_a_failing_module_raises_a_marked_error_and_is_queued(lib, gelu_and_rowsum) -> None:
    module, key = gelu_and_rowsum
    paddle.enable_static()
    try:
        main, fetch = _program(lib, module, key, 4)
        exe = paddle.static.Executor(paddle.CPUPlace())
        feed = {"x": np.ones((3, 4), np.float32), "b": np.ones(4, np.float32)}
        lib.inject_failures(1)
        # Paddle's executor reports a custom op's exception as "std::exception": the
        # queue, not the message, tells the bridge which cluster failed and why
        with pytest.raises(Exception):  # noqa: B017 (whatever Paddle wraps it in)
            exe.run(main, feed=feed, fetch_list=fetch)
        assert lib.take_failures() == [(key, "injected runtime failure (test hook)")]
        y, s, ref_y, ref_s = exe.run(main, feed=feed, fetch_list=fetch)  # the next call runs
        np.testing.assert_allclose(y, ref_y, rtol=1e-6, atol=1e-6)
    finally:
        paddle.disable_static()


def test_a_checking_launch_compares_with_the_expected_values(lib, gelu_and_rowsum) -> None:
    """The accuracy guard's launch: right results pass through; a wrong one (the test
    hook) fails the op with an "accuracy check: " record naming the output."""
    module, _ = gelu_and_rowsum
    key = "launch_check_test"
    paddle.enable_static()
    try:
        main, fetch = _program(lib, module, key, 6, check=True)
        exe = paddle.static.Executor(paddle.CPUPlace())
        rng = np.random.default_rng(0)
        feed = {"x": rng.standard_normal((5, 6), dtype=np.float32),
                "b": rng.standard_normal(6, dtype=np.float32)}
        y, s, ref_y, ref_s = exe.run(main, feed=feed, fetch_list=fetch)
        np.testing.assert_allclose(y, ref_y, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(s, ref_s, rtol=1e-5, atol=1e-5)
        assert lib.take_failures() == []
        lib.inject_wrong_results(1)
        with pytest.raises(Exception):  # noqa: B017 (whatever Paddle wraps it in)
            exe.run(main, feed=feed, fetch_list=fetch)
        [(failed, message)] = lib.take_failures()
        assert failed == key
        assert message.startswith("accuracy check: output #0 (float32 [5, 6]) differs from "
                                  "the framework in 1 of 30 elements"), message
    finally:
        paddle.disable_static()


def test_a_missing_module_names_the_path(lib) -> None:
    paddle.enable_static()
    try:
        main, fetch = _program(lib, "/nonexistent/module.so", "missing", 3)
        exe = paddle.static.Executor(paddle.CPUPlace())
        feed = {"x": np.ones((2, 3), np.float32), "b": np.ones(3, np.float32)}
        with pytest.raises(Exception):  # noqa: B017
            exe.run(main, feed=feed, fetch_list=fetch)
        [(key, message)] = lib.take_failures()
        assert key == "missing" and message.startswith("cannot load /nonexistent/module.so")
    finally:
        paddle.disable_static()


def test_op_names_cover_one_to_max_outputs() -> None:
    assert custom_op.op_name(1) == "disc_launch_1"
    assert custom_op.op_name(custom_op.MAX_OUTPUTS) == f"disc_launch_{custom_op.MAX_OUTPUTS}"
    with pytest.raises(ValueError, match="1 to"):
        custom_op.op_name(0)
