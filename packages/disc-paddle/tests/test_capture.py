"""DISC's entry into paddle.jit.to_static (disc_paddle.capture).

A hand-written rewriter stands in for the bridge's converters and clustering: it puts
DISC-compiled ReLU kernels in place of ``pd_op.relu`` (forward and inference programs)
and ``pd_op.relu_grad`` (backward program). Training through them must give Paddle's own
loss and the gradient of every parameter, over batch sizes the program never saw, with
one traced program and one rewrite per program role.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import paddle
import pytest
from paddle.static import InputSpec

from disc_core import Compiler, GraphBuilder
from disc_paddle import capture, custom_op
from disc_paddle.rewrite import Launch, replace_clusters
from disc_runtime.abi import MODULE_FILE

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _module(name: str, build) -> str:
    b = GraphBuilder(name)
    n, m = b.symbol("N"), b.symbol("M")
    exe = Compiler(target="native").compile(build(b, n, m))
    assert exe.artifact.engine == "native"
    return str(exe.artifact.path(MODULE_FILE))


@pytest.fixture(scope="module")
def relu_modules() -> dict[str, str]:
    custom_op.load_library()

    def forward(b, n, m):
        x = b.input("x", "f32", [n, m])
        return b.build(b.op("max", x, b.full(0.0, "f32", [n, m])))

    def backward(b, n, m):
        out, dout = b.input("out", "f32", [n, m]), b.input("dout", "f32", [n, m])
        zero = b.full(0.0, "f32", [n, m])
        return b.build(b.op("select", b.op("compare", out, zero, direction="gt"), dout, zero))

    return {"pd_op.relu": _module("relu_fwd", forward),
            "pd_op.relu_grad": _module("relu_bwd", backward)}


class _Rewriter:
    def __init__(self, modules: dict[str, str]):
        self.modules = modules
        self.calls: Counter[str] = Counter()

    def __call__(self, program, role: str, owner) -> None:
        assert owner is not None
        self.calls[role] += 1
        launches = []
        for op in program.global_block().ops:
            if op.name() in self.modules:
                ins = [op.operand_source(i) for i in range(op.num_operands())]
                out = op.result(0)
                launches.append(Launch([op], ins, [out], [list(out.shape)],
                                       self.modules[op.name()], f"{op.name()}-{role}"))
        replace_clusters(program, launches)


class _MLP(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = paddle.nn.Linear(5, 16), paddle.nn.Linear(16, 3)

    def forward(self, x):
        return self.l2(paddle.nn.functional.relu(self.l1(x)))


def _pair():
    paddle.seed(7)
    model, ref = _MLP(), _MLP()
    ref.set_state_dict(model.state_dict())
    return model, ref


def test_training_through_rewritten_programs_matches_paddle(relu_modules) -> None:
    rewriter = _Rewriter(relu_modules)
    capture.install(rewriter)
    model, ref = _pair()
    static = capture.manage(paddle.jit.to_static(
        model, input_spec=[InputSpec([None, 5], "float32")], full_graph=True))
    # no batch of 0: plain to_static of this model fails on it too (paddlepaddle 3.3.1,
    # "Required tensor shall not be nullptr" in a matmul)
    for batch in (4, 1, 37):
        x = paddle.to_tensor(np.random.default_rng(batch).standard_normal((batch, 5),
                                                                         dtype=np.float32))
        loss = (static(x) ** 2).sum()
        want = (ref(x) ** 2).sum()
        loss.backward()
        want.backward()
        np.testing.assert_allclose(loss.numpy(), want.numpy(), rtol=1e-5)
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            g, h = p.grad.numpy(), q.grad.numpy()
            assert np.linalg.norm(g - h) <= 1e-5 * max(np.linalg.norm(h), 1e-6), name
        model.clear_gradients()
        ref.clear_gradients()
    assert rewriter.calls == {"forward": 1, "backward": 1}
    names = [k for k, _ in custom_op.load_library().take_failures()]
    assert names == []
    for key in ("pd_op.relu-forward", "pd_op.relu_grad-backward"):
        calls, _, _ = custom_op.load_library().stats(key)
        assert calls == 3, key  # DISC's kernels ran on every step


def test_inference_and_unmanaged_functions(relu_modules) -> None:
    rewriter = _Rewriter(relu_modules)
    capture.install(rewriter)
    model, ref = _pair()
    model.eval()
    plain = paddle.jit.to_static(_MLP(), input_spec=[InputSpec([None, 5], "float32")],
                                 full_graph=True)
    static = capture.manage(paddle.jit.to_static(
        model, input_spec=[InputSpec([None, 5], "float32")], full_graph=True))
    with paddle.no_grad():
        for batch in (3, 64):
            x = paddle.randn([batch, 5])
            np.testing.assert_allclose(static(x).numpy(), ref(x).numpy(), rtol=1e-5,
                                       atol=1e-6)
            plain(x)
    assert rewriter.calls == {"infer": 1}  # the unmanaged function was not rewritten
    calls, _, _ = custom_op.load_library().stats("pd_op.relu-infer")
    assert calls == 2


def test_enabled_rewrites_every_function_traced_while_on(relu_modules) -> None:
    rewriter = _Rewriter(relu_modules)
    capture.install(rewriter)
    model, ref = _pair()
    model.eval()
    capture.set_enabled(lambda cache: "enabled")
    try:
        static = paddle.jit.to_static(model, input_spec=[InputSpec([None, 5], "float32")],
                                      full_graph=True)
        with paddle.no_grad():
            x = paddle.randn([6, 5])
            np.testing.assert_allclose(static(x).numpy(), ref(x).numpy(), rtol=1e-5,
                                       atol=1e-6)
    finally:
        capture.set_enabled(None)
    assert rewriter.calls == {"infer": 1}
    with pytest.raises(TypeError, match="paddle.jit.to_static"):
        capture.manage(object())
