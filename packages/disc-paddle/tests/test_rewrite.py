"""Putting launch ops in place of clusters in a PIR program (disc_paddle.rewrite).

The clusters here are chosen by hand (the bridge's clustering picks them in real use), so
that an op outside the cluster sits between its members: one that the cluster does not
depend on (it stays in place) and one that reads a cluster result (it must move after the
launch). The rewritten program must give what the original gives, on unseen shapes.
"""

from __future__ import annotations

import numpy as np
import paddle
import pytest

from disc_core import Compiler, GraphBuilder
from disc_paddle import custom_op
from disc_paddle.rewrite import Launch, replace_clusters
from disc_runtime.abi import MODULE_FILE

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def module() -> str:
    """t = tanh(x) * x, y = t + b, s = sum(y, axis=1)."""
    custom_op.load_library()
    b = GraphBuilder("rewrite_test")
    n, m = b.symbol("N"), b.symbol("M")
    x, bias = b.input("x", "f32", [n, m]), b.input("b", "f32", [m])
    t = b.mul(b.tanh(x), x)
    y = b.add(t, b.broadcast_to(bias, [n, m]))
    s = b.op("reduce", y, axes=[1], kind="sum")
    exe = Compiler(target="native").compile(b.build(t, y, s))
    return str(exe.artifact.path(MODULE_FILE))


def _program(width: int):
    main = paddle.static.Program()
    with paddle.static.program_guard(main):
        x = paddle.static.data("x", [-1, width], "float32")
        bias = paddle.static.data("b", [width], "float32")
        a = paddle.tanh(x)
        u = paddle.nn.functional.relu(x)  # between the members, independent of them
        t = a * x
        e = paddle.exp(t)  # between the members, reads a cluster result
        y = t + bias
        s = y.sum(axis=1)
        out = [e * 2, u + 1, y * 1, s * 1]  # fetched through ops that read them
    return main, out


def _members(main) -> list:
    wanted = ["pd_op.tanh", "pd_op.multiply", "pd_op.add", "pd_op.full_int_array", "pd_op.sum"]
    ops = list(main.global_block().ops)
    members, taken = [], set()
    for name in wanted:  # the first op of each kind, in program order
        op = next(o for o in ops if o.name() == name and o.id() not in taken)
        taken.add(op.id())
        members.append(op)
    order = {op.id(): i for i, op in enumerate(ops)}
    return sorted(members, key=lambda op: order[op.id()])


def test_clusters_are_replaced_and_results_match(module) -> None:
    paddle.enable_static()
    try:
        width = 6
        main, out = _program(width)
        ref_main, ref_out = _program(width)
        members = _members(main)
        x, bias = (op.result(0) for op in main.global_block().ops
                   if op.name() == "pd_op.data")
        t = next(op for op in members if op.name() == "pd_op.multiply").result(0)
        y = next(op for op in members if op.name() == "pd_op.add").result(0)
        s = next(op for op in members if op.name() == "pd_op.sum").result(0)
        replace_clusters(main, [Launch(members, [x, bias], [t, y, s],
                                       [[-1, width], [-1, width], [-1]], module, "rw")])
        names = [op.name() for op in main.global_block().ops]
        assert "custom_op.disc_launch_3" in names
        assert not {"pd_op.tanh", "pd_op.sum", "pd_op.multiply"} & set(names)
        # exp reads the launch's first result, so it comes after the launch
        assert names.index("pd_op.exp") > names.index("custom_op.disc_launch_3")
        exe = paddle.static.Executor(paddle.CPUPlace())
        for rows in (0, 1, 9, 300):
            rng = np.random.default_rng(rows)
            feed = {"x": rng.standard_normal((rows, width), dtype=np.float32),
                    "b": rng.standard_normal(width, dtype=np.float32)}
            got = exe.run(main, feed=feed, fetch_list=out)
            want = exe.run(ref_main, feed=feed, fetch_list=ref_out)
            for g, w in zip(got, want):
                assert g.shape == w.shape
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    finally:
        paddle.disable_static()
