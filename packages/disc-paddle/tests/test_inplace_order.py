"""Ops that work in place (``all_reduce_``, ``assign_out_``, ``relu_``) order a PIR block
beyond its data flow, and DISC must keep that order.

In PIR an in-place op writes its operand's buffer: ops after it that read the operand by
its old name see the new contents, ops before it the old ones. A cluster that took the
value's producer and a later reader (skipping the write), or a launch that moved an early
reader past the write, would compute from the wrong contents: a data-parallel function
with an ``all_reduce_`` in it would silently lose its all-reduce. These tests check the
ordering edges (:func:`disc_paddle.program.inplace_order`), that clustering and the
rewrite honour them, that DISC's results equal Paddle's on functions that write in
place, and that collectives are reported as Paddle's by design.
"""

from __future__ import annotations

import numpy as np
import paddle
import pytest

import disc_paddle
from disc_core import Compiler, GraphBuilder
from disc_paddle import custom_op
from disc_paddle.partition import analyze
from disc_paddle.program import ProgramView, inplace_order
from disc_paddle.rewrite import Launch, replace_clusters
from disc_runtime.abi import MODULE_FILE

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                        "ignore:Tensor do not have 'place'")

SIZES = (0, 1, 7, 33, 300)  # rows: empty, one, odd, and sizes the first call never saw


def _static(build):
    """A PIR program built by ``build()`` in static mode (returns (program, fetches))."""
    paddle.enable_static()
    try:
        main = paddle.static.Program()
        with paddle.static.program_guard(main):
            fetch = build()
        return main, fetch
    finally:
        paddle.disable_static()


def _op(program, name: str, nth: int = 0):
    return [op for op in program.global_block().ops if op.name() == name][nth]


def test_ordering_edges_put_the_write_between_earlier_and_later_readers() -> None:
    def build():
        x = paddle.static.data("x", [-1, 4], "float32")
        y = paddle.tanh(x)
        early = paddle.exp(y)  # reads y before the write
        w = paddle._C_ops.relu_(y)
        late = paddle.sin(y)  # reads y (by its old name) after the write
        also = paddle.cos(w)  # reads the write's result: a data edge already
        return [early, late, also]

    main, _ = _static(build)
    edges = {(a.name(), b.name()) for a, b in inplace_order(list(main.global_block().ops))}
    assert edges == {("pd_op.exp", "pd_op.relu_"), ("pd_op.relu_", "pd_op.sin"),
                     ("pd_op.relu_", "pd_op.cos")}
    # nothing in place, nothing extra
    plain, _ = _static(lambda: paddle.sin(paddle.tanh(paddle.static.data("x", [3]))))
    assert inplace_order(list(plain.global_block().ops)) == []


def test_clusters_never_span_an_in_place_write() -> None:
    """tanh, then a write of its result, then a reader of the old name: without the
    ordering edge all three scales and the tanh would form one cluster that skips the
    write. A collective (all_reduce_) stays in Paddle, reported as Paddle's by design."""

    def build():
        x = paddle.static.data("x", [-1, 4], "float32")
        y = paddle.tanh(x * 2.0 + 1.0)
        paddle._C_ops.all_reduce_(y, 0, 0)  # ring 0, sum: what dist.all_reduce traces
        return (y * 3.0 - 1.0).sum(axis=-1)

    main, total = _static(build)
    analysis = analyze(main, min_cluster_size=1, outputs=[total])
    verdicts = {n.name: v for n, v in analysis.verdicts.items()}
    assert verdicts["pd_op.all_reduce_"].code.value == "framework_op"
    assert "collective" in verdicts["pd_op.all_reduce_"].reason
    cluster_of = {}
    for c in analysis.clustering.clusters:
        for n in c.nodes:
            cluster_of[n.op.id()] = c.id
    tanh = _op(main, "pd_op.tanh").id()
    total = _op(main, "pd_op.sum").id()
    assert tanh in cluster_of and total in cluster_of
    assert cluster_of[tanh] != cluster_of[total]
    # reported (as Paddle's by design) though nothing reads its result: it is not dead
    assert any(n.name == "pd_op.all_reduce_" for n in analysis.nodes)
    # the edge that separates them exists between the nodes
    by_name = {(a.name, b.name) for a, b in ProgramView(main).edges()}
    assert ("pd_op.all_reduce_", "pd_op.scale") in by_name


@pytest.fixture(scope="module")
def module() -> str:
    """t = tanh(x) * x, y = t + b, s = sum(y, axis=1) (as test_rewrite's)."""
    custom_op.load_library()
    b = GraphBuilder("inplace_rewrite_test")
    n, m = b.symbol("N"), b.symbol("M")
    x, bias = b.input("x", "f32", [n, m]), b.input("b", "f32", [m])
    t = b.mul(b.tanh(x), x)
    y = b.add(t, b.broadcast_to(bias, [n, m]))
    s = b.op("reduce", y, axes=[1], kind="sum")
    exe = Compiler(target="native").compile(b.build(t, y, s))
    return str(exe.artifact.path(MODULE_FILE))


def _rewrite_program(width: int):
    """The members read ``x``, then an op outside them writes ``x`` in place, then the
    last members run: the launch (at the last member's place) must still read ``x`` as it
    was, so the write moves after it."""

    def build():
        x = paddle.static.data("x", [-1, width], "float32")
        bias = paddle.static.data("b", [width], "float32")
        t = paddle.tanh(x) * x
        paddle._C_ops.relu_(x)  # between the members; reads none of their results
        y = t + bias
        s = y.sum(axis=1)
        return [y * 1, s * 1, x * 1]  # x * 1: the written x

    return _static(build)


@pytest.mark.parametrize("checking", [False, True], ids=["plain", "accuracy-guard"])
def test_rewrite_moves_an_in_place_write_after_the_launch(module, checking: bool) -> None:
    width = 6
    main, out = _rewrite_program(width)
    ref_main, ref_out = _rewrite_program(width)
    ops = list(main.global_block().ops)
    members = [op for op in ops if op.name() in ("pd_op.tanh", "pd_op.multiply", "pd_op.add",
                                                 "pd_op.full_int_array", "pd_op.sum")]
    x, bias = (op.result(0) for op in ops if op.name() == "pd_op.data")
    t = _op(main, "pd_op.multiply").result(0)
    y = _op(main, "pd_op.add").result(0)
    s = _op(main, "pd_op.sum").result(0)
    check = [(1e-4, 1e-5)] * 3 if checking else None
    paddle.enable_static()
    try:
        with paddle.static.program_guard(main):
            replace_clusters(main, [Launch(members, [x, bias], [t, y, s],
                                           [[-1, width], [-1, width], [-1]], module,
                                           "inplace-rw", check=check)])
        names = [op.name() for op in main.global_block().ops]
        launch = next(i for i, n in enumerate(names) if n.startswith("custom_op.disc_launch"))
        assert names.index("pd_op.relu_") > launch
        exe = paddle.static.Executor(paddle.CPUPlace())
        for rows in SIZES:
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


def assign_into(x):
    """paddle.assign(..., output=y) is assign_out_: y's later readers see the new value."""
    y = paddle.tanh(x * 2.0 + 1.0)
    z = y * 0.5
    paddle.assign(z * 3.0 + x, output=y)
    return y * 3.0 - 1.0


def relu_in_place(x):
    y = paddle.tanh(x * 2.0 - 0.5)
    early = paddle.exp(y) * 2.0  # reads y before the write
    paddle._C_ops.relu_(y)
    return (y * 3.0 - 1.0) + early.sum(axis=-1, keepdim=True)


@pytest.mark.parametrize("fn", [assign_into, relu_in_place])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_functions_writing_in_place_match_paddle(fn, dtype: str) -> None:
    compiled = disc_paddle.compile(fn, min_cluster_size=1)
    before = disc_paddle.compile_count()
    tol = 1e-5 if dtype == "float32" else 1e-12
    for rows in SIZES:
        rng = np.random.default_rng(rows)
        x = rng.standard_normal((rows, 5)).astype(dtype)
        got = compiled(paddle.to_tensor(x))
        want = fn(paddle.to_tensor(x))  # eager Paddle
        assert got.shape == want.shape
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=tol, atol=tol)
    graphs = [g for g in disc_paddle.report().graphs if g.name.startswith(fn.__name__)]
    compiled_nodes = [n for g in graphs for n in g.nodes if n.status.value == "compiled"]
    assert compiled_nodes, "nothing ran through DISC: the test would prove nothing"
    # one compilation per cluster for all sizes (forward and backward programs)
    clusters = {c.key for g in graphs for c in g.clusters if c.key}
    assert disc_paddle.compile_count() - before <= len(clusters)
