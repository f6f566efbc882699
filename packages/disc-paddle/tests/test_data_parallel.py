"""``paddle.DataParallel`` with DISC, in one process (the 2-rank job is
tests-integration/distributed/test_paddle_distributed.py).

``DataParallel.forward`` calls its layer and then prepares its gradient reducer eagerly, so
DISC compiles the wrapped layer, never the wrapper (Paddle's own ``to_static`` refuses a
``DataParallel``: its ``forward(*inputs)`` has no named arguments). Whichever way round the
user wraps, ``disc_paddle.compile``, ``disc_paddle.to_static`` and an ``enable()``-routed
``paddle.jit.to_static``, the model must train with Paddle's loss and gradients on sizes
never seen, one traced program per role.
"""

from __future__ import annotations

import warnings

import numpy as np
import paddle
import pytest

import disc_paddle

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                        "ignore:Tensor do not have 'place'",
                                        "ignore:The program will return to single-card")


class Net(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.norm = paddle.nn.LayerNorm(6)
        self.l1, self.l2 = paddle.nn.Linear(6, 12), paddle.nn.Linear(12, 3)

    def forward(self, x):
        return self.l2(paddle.nn.functional.gelu(self.l1(self.norm(x))))


def _data_parallel(layer):
    with warnings.catch_warnings():  # one process: Paddle says it runs single-card
        warnings.simplefilter("ignore")
        return paddle.DataParallel(layer)


def _wrap(how: str, net: Net):
    if how == "compile-outer":
        return disc_paddle.compile(_data_parallel(net), min_cluster_size=1)
    if how == "compile-inner":
        return _data_parallel(disc_paddle.compile(net, min_cluster_size=1))
    if how == "to_static-outer":
        return disc_paddle.to_static(_data_parallel(net), min_cluster_size=1)
    disc_paddle.enable(min_cluster_size=1)  # "enable-outer": a script's own to_static call
    try:
        return paddle.jit.to_static(_data_parallel(net))
    finally:
        disc_paddle.disable()


def step_matches(model, net, ref, rows: int) -> None:
    """One loss and backward of ``model`` (wrapping ``net``) and of the plain ``ref`` on a
    batch of ``rows``: the losses and every parameter's gradient agree within 1e-5."""
    rng = np.random.default_rng(rows)
    x = paddle.to_tensor(rng.standard_normal((rows, 6)).astype(np.float32))
    loss, want = (model(x) ** 2).mean(), (ref(x) ** 2).mean()
    loss.backward()
    want.backward()
    np.testing.assert_allclose(loss.numpy(), want.numpy(), rtol=1e-5)
    for (name, p), q in zip(net.named_parameters(), ref.parameters()):
        g, h = p.grad.numpy(), q.grad.numpy()
        assert np.linalg.norm(g - h) <= 1e-5 * max(np.linalg.norm(h), 1e-6), name


@pytest.mark.parametrize("how", ["compile-outer", "compile-inner", "to_static-outer",
                                 "enable-outer"])
def test_data_parallel_model_trains_like_paddle(how: str) -> None:
    paddle.seed(11)
    net, ref = Net(), Net()
    ref.set_state_dict(net.state_dict())
    model = _wrap(how, net)
    assert isinstance(model, paddle.DataParallel)
    assert isinstance(net.forward, disc_paddle.api.DiscFunction)  # the layer, not the wrapper
    opt = paddle.optimizer.SGD(0.1, parameters=model.parameters())
    ref_opt = paddle.optimizer.SGD(0.1, parameters=ref.parameters())
    for rows in (5, 1, 17, 2, 64):
        step_matches(model, net, ref, rows)
        opt.step()
        ref_opt.step()
        opt.clear_grad()
        ref_opt.clear_grad()
    assert net.forward.rewrites == {"forward": 1, "backward": 1}
    graphs = [g for g in disc_paddle.report().graphs if g.name.startswith("Net")]
    assert any(n.status.value == "compiled" for g in graphs for n in g.nodes)


def test_compiling_twice_keeps_one_wrapper() -> None:
    net = Net()
    model = disc_paddle.compile(_data_parallel(net))
    forward = net.forward
    assert disc_paddle.compile(model) is model and net.forward is forward


def test_sot_capture_under_data_parallel(monkeypatch) -> None:
    """``full_graph=False`` (Paddle's SOT bytecode capture) of the wrapped layer: SOT
    specializes on the first shapes, then retraces with dynamic dims (two programs per
    role, see docs/paddle.md); gradients stay Paddle's."""
    monkeypatch.setenv("MIN_GRAPH_SIZE", "0")  # SOT runs subgraphs under 10 ops eagerly
    paddle.seed(12)
    net, ref = Net(), Net()
    ref.set_state_dict(net.state_dict())
    model = disc_paddle.compile(_data_parallel(net), full_graph=False, min_cluster_size=1)
    before = len([g for g in disc_paddle.report().graphs if g.name.startswith("Net")])
    for rows in (5, 1, 17, 2):
        step_matches(model, net, ref, rows)
        for p, q in zip(net.parameters(), ref.parameters()):
            p.clear_gradient()
            q.clear_gradient()
    graphs = [g for g in disc_paddle.report().graphs if g.name.startswith("Net")][before:]
    assert graphs and any(n.status.value == "compiled" for g in graphs for n in g.nodes)
    assert net.forward.rewrites.get("forward", 0) <= 2  # not one per size
