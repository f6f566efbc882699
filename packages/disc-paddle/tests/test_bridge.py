"""The bridge end to end: ``disc_paddle.compile``, ``to_static`` and ``enable``.

Training must give Paddle's loss and the gradient of every parameter over many sizes the
program never saw, with ONE traced program per role and one DISC compilation per cluster;
every failure (a cluster that does not build, one that fails at run time, an option that
keeps clusters away) must leave Paddle's result, a warning and a report entry.
"""

from __future__ import annotations

import numpy as np
import paddle
import pytest

import disc_paddle
from disc_paddle import backend, custom_op

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                        "ignore:Tensor do not have 'place'")


class MLP(paddle.nn.Layer):
    def __init__(self, d_in: int = 5, hidden: int = 16, d_out: int = 3):
        super().__init__()
        self.l1, self.l2 = paddle.nn.Linear(d_in, hidden), paddle.nn.Linear(hidden, d_out)

    def forward(self, x):
        return self.l2(paddle.nn.functional.relu(self.l1(x)))


def _pair(seed: int = 7, **kw):
    paddle.seed(seed)
    model, ref = MLP(**kw), MLP(**kw)
    ref.set_state_dict(model.state_dict())
    return model, ref


def _x(batch: int, d: int = 5) -> paddle.Tensor:
    rng = np.random.default_rng(batch)
    return paddle.to_tensor(rng.standard_normal((batch, d)).astype(np.float32))


def _assert_grads_match(model, ref, rtol: float = 1e-5) -> None:
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        g, h = p.grad.numpy(), q.grad.numpy()
        assert np.linalg.norm(g - h) <= rtol * max(np.linalg.norm(h), 1e-6), name


def _graphs(name: str):
    return [g for g in disc_paddle.report().graphs if g.name.startswith(name)]


def _compiled_clusters(graphs):
    """Clusters whose nodes ran compiled."""
    out = []
    for g in graphs:
        status = {n.name: n.status.value for n in g.nodes}
        out += [c for c in g.clusters if all(status[n] == "compiled" for n in c.nodes)]
    return out


def _reasons(graphs) -> set[str]:
    return {n.reason.value for g in graphs for n in g.nodes if n.reason is not None}


def test_training_matches_paddle_with_one_program_and_compile_per_role() -> None:
    model, ref = _pair()
    model = disc_paddle.compile(model, min_cluster_size=1)
    opt = paddle.optimizer.SGD(0.05, parameters=model.parameters())
    ref_opt = paddle.optimizer.SGD(0.05, parameters=ref.parameters())
    before = disc_paddle.compile_count()
    sizes = [4, 1, 37, 2, 64, 9] + list(range(10, 24))  # 20 batch sizes
    for batch in sizes:
        x = _x(batch)
        loss = (model(x) ** 2).mean()
        want = (ref(x) ** 2).mean()
        loss.backward()
        want.backward()
        np.testing.assert_allclose(loss.numpy(), want.numpy(), rtol=1e-5)
        _assert_grads_match(model, ref)
        opt.step()
        ref_opt.step()
        opt.clear_grad()
        ref_opt.clear_grad()
    # one traced program per role, rewritten once, for 20 sizes
    assert model.forward.rewrites == {"forward": 1, "backward": 1}
    graphs = _graphs("MLP")
    compiled = _compiled_clusters(graphs)
    assert compiled, "nothing ran through DISC"
    assert disc_paddle.compile_count() - before <= len(compiled)
    for c in compiled:
        assert c.calls == len(sizes), c


def test_inference_uses_the_infer_program() -> None:
    model, ref = _pair(3)
    model.eval()
    ref.eval()
    model = disc_paddle.compile(model, min_cluster_size=1)
    with paddle.no_grad():
        for batch in (3, 1, 50):
            x = _x(batch)
            np.testing.assert_allclose(model(x).numpy(), ref(x).numpy(), rtol=1e-5,
                                       atol=1e-6)
    assert model.forward.rewrites == {"infer": 1}


def test_a_new_rank_is_a_new_signature() -> None:
    def double_relu(x):
        return paddle.nn.functional.relu(x + x)

    fn = disc_paddle.compile(double_relu, min_cluster_size=1)
    for shape in ([3], [5], [2, 3], [4, 1]):
        x = paddle.randn(shape)
        np.testing.assert_allclose(fn(x).numpy(), paddle.nn.functional.relu(x + x).numpy())
    assert len(fn.statics()) == 2  # rank 1 and rank 2
    assert fn.rewrites == {"forward": 2, "backward": 2}  # a function trains by default


def test_runtime_failure_falls_back_to_paddle_and_is_reported() -> None:
    model, ref = _pair(11)
    model.eval()
    ref.eval()
    model = disc_paddle.compile(model, min_cluster_size=1)
    x = _x(6)
    with paddle.no_grad():
        model(x)  # built and rewritten
        custom_op.load_library().inject_failures(1)
        with pytest.warns(disc_paddle.DiscFallbackWarning, match="runtime_error"):
            got = model(x)
        np.testing.assert_allclose(got.numpy(), ref(x).numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(model(_x(7)).numpy(), ref(_x(7)).numpy(), rtol=1e-5,
                                   atol=1e-6)
    assert model.forward.rewrites == {"infer": 2}  # rebuilt once, without the cluster
    assert "runtime_error" in _reasons(_graphs("MLP"))


def test_compile_failure_keeps_the_cluster_in_paddle(monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("injected compile failure")

    monkeypatch.setattr(backend, "compile_clusters", _failing_compile(broken))
    model, ref = _pair(5)
    model.eval()
    ref.eval()
    model = disc_paddle.compile(model, min_cluster_size=1)
    with pytest.warns(disc_paddle.DiscFallbackWarning, match="injected compile failure"):
        with paddle.no_grad():
            got = model(_x(3))
    np.testing.assert_allclose(got.numpy(), ref(_x(3)).numpy(), rtol=1e-5, atol=1e-6)
    assert "compile_error" in _reasons(_graphs("MLP"))


def _failing_compile(raise_fn):
    from disc_core.bridge import attempts

    def compile_clusters(clusters, lower, compiler, **kwargs):
        class Broken:
            def compile_traced(self, graph):
                raise_fn()

        return attempts.compile_clusters(clusters, lower, Broken(), **kwargs)

    return compile_clusters


def test_options_keep_ops_in_paddle() -> None:
    model, ref = _pair(9)
    model.eval()
    model = disc_paddle.compile(model, min_cluster_size=1,
                                excluded_ops="pd_op.relu,matmul")
    with paddle.no_grad():
        np.testing.assert_allclose(model(_x(4)).numpy(), ref(_x(4)).numpy(), rtol=1e-5,
                                   atol=1e-6)
    graph = _graphs("MLP")[-1]
    status = {n.op: (n.status.value, n.reason.value if n.reason else None)
              for n in graph.nodes}
    assert status["pd_op.relu"] == ("fallback", "excluded_by_user")
    assert status["pd_op.matmul"] == ("fallback", "excluded_by_user")
    with pytest.raises(ValueError, match="min_cluster_size"):
        disc_paddle.compile(MLP(), min_cluster_size=0)
    with pytest.raises(TypeError, match="Layer or a function"):
        disc_paddle.compile(42)


def test_enable_routes_paddle_to_static_through_disc() -> None:
    model, ref = _pair(13)
    model.eval()
    disc_paddle.enable(min_cluster_size=1)
    try:
        assert disc_paddle.is_enabled()
        static = paddle.jit.to_static(model)
        assert isinstance(static.forward, disc_paddle.api.DiscFunction)
    finally:
        disc_paddle.disable()
    assert not disc_paddle.is_enabled()
    with paddle.no_grad():
        for batch in (2, 5):
            np.testing.assert_allclose(static(_x(batch)).numpy(), ref(_x(batch)).numpy(),
                                       rtol=1e-5, atol=1e-6)
    assert static.forward.rewrites == {"infer": 1}
    plain = paddle.jit.to_static(MLP())
    assert not isinstance(plain.forward, disc_paddle.api.DiscFunction)


def test_decorated_function_and_pinned_spec() -> None:
    from paddle.static import InputSpec

    @disc_paddle.to_static(input_spec=[InputSpec([None, 4], "float32")], min_cluster_size=1)
    def f(x):
        return paddle.nn.functional.relu(x) + x

    for batch in (1, 3, 8):
        x = paddle.randn([batch, 4])
        np.testing.assert_allclose(f(x).numpy(), (paddle.nn.functional.relu(x) + x).numpy())
    assert len(f.statics()) == 1 and f.rewrites == {"forward": 1, "backward": 1}


def test_backward_failure_gives_paddles_gradients() -> None:
    """A backward cluster that fails inside loss.backward(): the call is redone without it
    and differentiated from the gradient that reached its output, so every parameter gets
    Paddle's gradient once, ops around the call included (an eager layer before it, a loss
    after it)."""
    model, ref = _pair(17)
    pre, ref_pre = paddle.nn.Linear(5, 5), paddle.nn.Linear(5, 5)
    ref_pre.set_state_dict(pre.state_dict())
    model = disc_paddle.compile(model, min_cluster_size=1)
    for batch, fail in ((4, False), (6, True), (9, False)):
        x = _x(batch)
        loss = (model(pre(x)) ** 2).mean()
        want = (ref(ref_pre(x)) ** 2).mean()
        if fail:
            custom_op.load_library().inject_failures(1)  # the backward's first launch
            with pytest.warns(disc_paddle.DiscFallbackWarning, match="runtime_error"):
                loss.backward()
        else:
            loss.backward()
        want.backward()
        _assert_grads_match(model, ref)
        _assert_grads_match(pre, ref_pre)
        for layer in (model, ref, pre, ref_pre):
            layer.clear_gradients()
    assert "runtime_error" in _reasons(_graphs("MLP"))


@pytest.mark.parametrize("which", ["paddle", "disc"])
def test_gemm_library_choice(which: str) -> None:
    """DISC's GEMMs inside Paddle run Paddle's own MKL by default (DISC_PADDLE_BLAS=paddle:
    the same library as eager, through its LP64 cblas_sgemm) or disc-runtime's choice;
    both give Paddle's results, batched and transposed products included."""
    if which == "paddle" and custom_op.paddle_blas_library() is None:
        pytest.skip("this Paddle wheel bundles no MKL")  # a CPU wheel without mklml

    def attention(q, k, v):
        att = paddle.nn.functional.softmax(paddle.matmul(q, k, transpose_y=True), -1)
        return paddle.matmul(att, v)

    fn = disc_paddle.compile(attention)
    described = custom_op.use_gemm(which)
    try:
        assert described.startswith(which + ":"), described
        assert custom_op.gemm_library() == described
        rng = np.random.default_rng(0)
        for b, s in ((2, 5), (1, 33), (3, 1)):
            q, k, v = (paddle.to_tensor(rng.standard_normal((b, 4, s, 8)).astype("float32"))
                       for _ in range(3))
            with paddle.no_grad():
                np.testing.assert_allclose(fn(q, k, v).numpy(), attention(q, k, v).numpy(),
                                           rtol=1e-5, atol=1e-6)
    finally:
        custom_op.use_gemm("paddle")


def many_outputs(x):
    return [paddle.tanh(x * float(i)) + float(i) for i in range(70)]


def test_a_cluster_with_more_outputs_than_a_launch_op_has_is_split() -> None:
    """A launch op has at most MAX_OUTPUTS outputs: a cluster with more is halved and each
    half compiled (native, in the report), rather than the program left to Paddle while
    the report claimed the cluster compiled."""
    import warnings

    assert custom_op.MAX_OUTPUTS < 70 * 1
    fn = disc_paddle.compile(many_outputs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", disc_paddle.DiscFallbackWarning)
        for n in (3, 1, 6):
            x = paddle.randn([n, 4])
            with paddle.no_grad():
                for got, want in zip(fn(x), many_outputs(x)):
                    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6,
                                               atol=1e-6)
    graphs = _graphs("many_outputs")
    clusters = [c for g in graphs for c in g.clusters]
    assert len(clusters) >= 2 and {c.engine.value for c in clusters} == {"native"}, clusters
    assert not _reasons(graphs)
    assert sum(c.calls for c in clusters) >= 3 * len(clusters)
