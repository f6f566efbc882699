"""The accuracy guard (``accuracy_check``): on the calls the policy picks, each cluster's
launch compares its module's outputs with the cluster's own Paddle ops, in the forward and
the backward programs; a mismatch hands that cluster to Paddle for good (one warning, an
``accuracy_mismatch`` report entry) and the call returns Paddle's values.

Wrong results come from the launch library's test hook (``inject_wrong_results``: the next
module run adds 1 to its first float output); the no-false-alarm tests train real models
with the guard checking every call and compare with plain Paddle.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import paddle
import pytest

import disc_paddle
from disc_core.bridge.accuracy import AccuracyPolicy
from disc_paddle import custom_op

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
from paddle_train import GPT, SmallCNN  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                        "ignore:Tensor do not have 'place'",
                                        "ignore:When training, we now always track")

#: check every call (the no-false-alarm tests)
EVERY_CALL = "first=1000,every=1"


class MLP(paddle.nn.Layer):
    def __init__(self, d_in: int = 5, hidden: int = 16, d_out: int = 3):
        super().__init__()
        self.l1, self.l2 = paddle.nn.Linear(d_in, hidden), paddle.nn.Linear(hidden, d_out)

    def forward(self, x):
        return self.l2(paddle.nn.functional.tanh(self.l1(x)))


def _pair(seed: int, name: str, base: type = MLP, dtype: str = "float32", **kwargs):
    """A model and its plain-Paddle twin; the model's class is named ``name`` (a subclass
    of ``base``) so that the report's graphs of each test are its own."""
    paddle.seed(seed)
    model, ref = type(name, (base,), {})(**kwargs), base(**kwargs)
    ref.set_state_dict(model.state_dict())
    if dtype != "float32":
        model, ref = model.to(dtype=dtype), ref.to(dtype=dtype)
    return model, ref


def _x(batch: int, d: int = 5, dtype: str = "float32") -> paddle.Tensor:
    rng = np.random.default_rng(batch)
    return paddle.to_tensor(rng.standard_normal((batch, d)).astype(dtype))


def _graphs(name: str):
    return [g for g in disc_paddle.report().graphs if g.name.startswith(name + " (")]


def _reasons(graphs) -> set[str]:
    return {n.reason.value for g in graphs for n in g.nodes if n.reason is not None}


def _squared_mean(model, x):
    return (model(x) ** 2).mean()


def _call(fn, *args):
    """fn(*args) and the DISC fallback warnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args)
    return out, [w for w in caught if issubclass(w.category, disc_paddle.DiscFallbackWarning)]


def test_a_wrong_result_on_a_checked_call_gives_paddles_values() -> None:
    model, ref = _pair(3, "Caught")
    model.eval()
    ref.eval()
    model = disc_paddle.compile(model, min_cluster_size=1, accuracy_check=True)
    assert model.forward.state.config.accuracy_check == AccuracyPolicy(first=3, every=1000)
    with paddle.no_grad():
        got, warned = _call(model, _x(4))  # call 0: checked, right
        assert not warned
        np.testing.assert_allclose(got.numpy(), ref(_x(4)).numpy(), rtol=1e-5, atol=1e-6)
        custom_op.load_library().inject_wrong_results(1)
        got, warned = _call(model, _x(6))  # call 1: checked, the module is wrong
        assert len(warned) == 1 and "accuracy_mismatch" in str(warned[0].message), warned
        assert "output #0" in str(warned[0].message)
        np.testing.assert_allclose(got.numpy(), ref(_x(6)).numpy(), rtol=1e-5, atol=1e-6)
        for batch in (6, 1, 9, 2):  # the cluster stays in Paddle: right, and no warning
            got, warned = _call(model, _x(batch))
            assert not warned
            np.testing.assert_allclose(got.numpy(), ref(_x(batch)).numpy(), rtol=1e-5,
                                       atol=1e-6)
    graphs = _graphs("Caught")
    assert _reasons(graphs) == {"accuracy_mismatch"}
    latest = [g for g in graphs if g.name == "Caught (infer)"][-1]
    assert [c.engine.value for c in latest.clusters] == ["framework"]


def test_only_the_calls_the_policy_picks_are_checked() -> None:
    """first=1,every=2 checks calls 0, 2, 4 ...: a wrong result on call 1 reaches the user
    (the price of checking only some calls), one on call 2 is caught."""
    model, ref = _pair(5, "Due")
    model.eval()
    ref.eval()
    model = disc_paddle.compile(model, min_cluster_size=1, accuracy_check="first=1,every=2")
    lib = custom_op.load_library()
    with paddle.no_grad():
        _, warned = _call(model, _x(3))  # call 0: checked
        assert not warned
        lib.inject_wrong_results(1)
        got, warned = _call(model, _x(4))  # call 1: not checked
        assert not warned
        off = np.abs(got.numpy() - ref(_x(4)).numpy())
        assert np.count_nonzero(off > 0.5) == 1 and np.isclose(off.max(), 1.0), off
        lib.inject_wrong_results(1)
        got, warned = _call(model, _x(5))  # call 2: checked
        assert len(warned) == 1 and "accuracy_mismatch" in str(warned[0].message), warned
        np.testing.assert_allclose(got.numpy(), ref(_x(5)).numpy(), rtol=1e-5, atol=1e-6)
    assert _reasons(_graphs("Due")) == {"accuracy_mismatch"}


def test_switching_reuses_both_program_sets() -> None:
    """The guarded and the plain programs are each built once and swapped in after."""
    model, ref = _pair(7, "Switch")
    model.eval()
    ref.eval()
    model = disc_paddle.compile(model, min_cluster_size=1, accuracy_check="first=1,every=2")
    guarded = []
    with paddle.no_grad():
        for batch in (2, 5, 3, 8, 1, 4, 7):
            got, warned = _call(model, _x(batch))
            assert not warned
            guarded.append(model.forward.state.guarded)
            np.testing.assert_allclose(got.numpy(), ref(_x(batch)).numpy(), rtol=1e-5,
                                       atol=1e-6)
    assert guarded == [True, False, True, False, True, False, True]
    assert model.forward.rewrites == {"infer": 2}
    names = [g.name for g in _graphs("Switch")]
    assert names == ["Switch (infer, guarded)", "Switch (infer)"], names


def test_a_wrong_forward_result_in_training() -> None:
    """A checked training call whose forward launch is wrong: the call is redone without
    that cluster, loss and gradients are Paddle's, and the backward program's clusters
    stay compiled (a value that differs says nothing about them)."""
    model, ref = _pair(8, "Forward")
    model = disc_paddle.compile(model, min_cluster_size=1, accuracy_check=True)
    for step, batch in enumerate((5, 3, 7)):
        x = _x(batch)
        if step == 1:
            custom_op.load_library().inject_wrong_results(1)
        loss, warned = _call(_squared_mean, model, x)
        want = _squared_mean(ref, x)
        assert len(warned) == (step == 1), [str(w.message) for w in warned]
        if warned:
            assert "accuracy_mismatch" in str(warned[0].message)
            assert "(forward)" in str(warned[0].message)
        np.testing.assert_allclose(loss.numpy(), want.numpy(), rtol=1e-5)
        _, warned = _call(loss.backward)
        assert not warned
        want.backward()
        _grads_close(model, ref, 1e-5)
        model.clear_gradients()
        ref.clear_gradients()
    graphs = _graphs("Forward")
    assert _reasons(graphs) == {"accuracy_mismatch"}
    backward = [g for g in graphs if g.name.startswith("Forward (backward")]
    assert backward and all(c.engine.value == "native" for g in backward
                            for c in g.clusters)


def test_a_wrong_backward_result_gives_paddles_gradients() -> None:
    """A checked call whose backward launch is wrong: loss.backward() is redone without
    that cluster, every parameter gets Paddle's gradient; later steps run as before."""
    model, ref = _pair(9, "Backward")
    model = disc_paddle.compile(model, min_cluster_size=1, accuracy_check=True)
    for step, batch in enumerate((4, 6, 3, 5)):
        x = _x(batch)
        loss, want = (model(x) ** 2).mean(), (ref(x) ** 2).mean()
        np.testing.assert_allclose(loss.numpy(), want.numpy(), rtol=1e-5)
        if step == 1:  # the forward ran right; the backward's first launch is wrong
            custom_op.load_library().inject_wrong_results(1)
        _, warned = _call(loss.backward)
        want.backward()
        assert len(warned) == (1 if step == 1 else 0), warned
        if warned:
            assert "accuracy_mismatch" in str(warned[0].message)
            assert "(backward)" in str(warned[0].message)
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6,
                                       err_msg=f"step {step}: {name}")
        model.clear_gradients()
        ref.clear_gradients()
    assert _reasons(_graphs("Backward")) == {"accuracy_mismatch"}
    forward = [g for g in _graphs("Backward") if g.name.startswith("Backward (forward")]
    assert all(c.engine.value == "native" for g in forward for c in g.clusters)


def test_the_guard_through_sot_capture_and_enable() -> None:
    """full_graph=False (SOT traces the subgraphs it captures as functions of their own;
    it leaves graphs of a few ops to dygraph, hence a GPT) and ``enable`` (every
    to_static function) take the guard too."""
    model, ref = _pair(15, "SotGPT", GPT, vocab=61, hidden=32, heads=4, layers=1)
    model.eval()
    ref.eval()
    model = disc_paddle.compile(model, full_graph=False, accuracy_check="first=3,every=0")
    rng = np.random.default_rng(1)
    with paddle.no_grad():
        for call, s in enumerate((6, 9, 4, 7)):
            idx = paddle.to_tensor(rng.integers(0, 61, (2, s + 1)))
            x, y = idx[:, :-1], idx[:, 1:]
            if call == 2:
                custom_op.load_library().inject_wrong_results(1)
            got, warned = _call(model, x, y)
            assert len(warned) == (call == 2), [str(w.message) for w in warned]
            if warned:
                assert "accuracy_mismatch" in str(warned[0].message)
            np.testing.assert_allclose(got.numpy(), ref(x, y).numpy(), rtol=1e-5)
    assert model.forward.rewrites.get("infer", 0) >= 2, model.forward.rewrites
    assert _reasons(_graphs("SotGPT")) == {"accuracy_mismatch"}
    disc_paddle.enable(min_cluster_size=1, accuracy_check="first=1,every=0")
    try:
        static = paddle.jit.to_static(MLP())
    finally:
        disc_paddle.disable()
    assert static.forward.state.config.accuracy_check == AccuracyPolicy(first=1, every=0)


def _grads_close(model, ref, rtol: float) -> None:
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        if q.grad is None:
            assert p.grad is None, name
            continue
        g, h = p.grad.numpy(), q.grad.numpy()
        assert np.linalg.norm(g - h) <= rtol * max(np.linalg.norm(h), 1e-6), name


def _assert_checked_and_native(name: str) -> None:
    """The guarded forward and backward programs ran, and every cluster of every program
    of ``name`` is still native: nothing was called a mismatch."""
    graphs = _graphs(name)
    roles = {g.name for g in graphs}
    assert {f"{name} (forward, guarded)", f"{name} (backward, guarded)"} <= roles, roles
    clusters = [c for g in graphs for c in g.clusters]
    assert clusters and all(c.engine.value == "native" for c in clusters), \
        [(g.name, c.id, c.engine.value) for g in graphs for c in g.clusters]
    assert not _reasons(graphs) & {"accuracy_mismatch", "runtime_error"}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_no_false_alarm_training_an_mlp(dtype: str) -> None:
    model, ref = _pair(11, f"Mlp_{dtype}", dtype=dtype)
    model = disc_paddle.compile(model, min_cluster_size=1, accuracy_check=EVERY_CALL)
    opt = paddle.optimizer.SGD(0.05, parameters=model.parameters())
    ref_opt = paddle.optimizer.SGD(0.05, parameters=ref.parameters())
    for batch in (4, 1, 9, 16, 3):
        x = _x(batch, dtype=dtype)
        loss, warned = _call(_squared_mean, model, x)
        want = (ref(x) ** 2).mean()
        _, warned_back = _call(loss.backward)
        assert not warned and not warned_back, [str(w.message) for w in warned + warned_back]
        assert model.forward.state.guarded
        want.backward()
        np.testing.assert_allclose(loss.numpy(), want.numpy(), rtol=1e-5)
        _grads_close(model, ref, 1e-5)
        opt.step()
        ref_opt.step()
        opt.clear_grad()
        ref_opt.clear_grad()
    _assert_checked_and_native(f"Mlp_{dtype}")


def test_no_false_alarm_training_a_gpt() -> None:
    model, ref = _pair(0, "GuardGPT", GPT, vocab=61, hidden=32, heads=4, layers=1)
    model = disc_paddle.compile(model, accuracy_check=EVERY_CALL)
    opt = paddle.optimizer.AdamW(1e-3, parameters=model.parameters())
    ref_opt = paddle.optimizer.AdamW(1e-3, parameters=ref.parameters())
    rng = np.random.default_rng(0)
    for s in (7, 1, 12, 5):
        idx = paddle.to_tensor(rng.integers(0, 61, (2, s + 1)))
        x, y = idx[:, :-1], idx[:, 1:]
        loss, warned = _call(model, x, y)
        _, warned_back = _call(loss.backward)
        assert not warned and not warned_back, [str(w.message) for w in warned + warned_back]
        want = ref(x, y)
        want.backward()
        np.testing.assert_allclose(loss.numpy(), want.numpy(), rtol=1e-5)
        _grads_close(model, ref, 1e-4)
        opt.step()
        ref_opt.step()
        opt.clear_grad()
        ref_opt.clear_grad()
    assert model.forward.rewrites == {"forward": 1, "backward": 1}  # the guarded ones only
    _assert_checked_and_native("GuardGPT")


def test_no_false_alarm_with_batch_norm_updating_in_place() -> None:
    """batch_norm_ updates its running statistics in place: the guarded program keeps
    Paddle's update and feeds the launch a copy taken before it, so the statistics are
    updated once and the module sees the values Paddle saw."""
    model, ref = _pair(2, "GuardCNN", SmallCNN, width=4)
    model = disc_paddle.compile(model, accuracy_check=EVERY_CALL)
    rng = np.random.default_rng(2)
    for n, hw in ((2, 8), (1, 11), (3, 16)):
        x = paddle.to_tensor(rng.standard_normal((n, 3, hw, hw)).astype("float32"))
        loss, warned = _call(_squared_mean, model, x)
        _, warned_back = _call(loss.backward)
        assert not warned and not warned_back, [str(w.message) for w in warned + warned_back]
        want = (ref(x) ** 2).mean()
        want.backward()
        np.testing.assert_allclose(loss.numpy(), want.numpy(), rtol=1e-4)
        model.clear_gradients()
        ref.clear_gradients()
    for (name, b), c in zip(model.named_buffers(), ref.buffers()):
        np.testing.assert_allclose(b.numpy(), c.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    bn = [n for g in _graphs("GuardCNN") if "guarded" in g.name for n in g.nodes
          if n.op == "pd_op.batch_norm_"]
    assert bn and all(n.status.value == "compiled" for n in bn), bn
    _assert_checked_and_native("GuardCNN")


def test_the_environment_variable_turns_the_guard_on(monkeypatch) -> None:
    monkeypatch.setenv("DISC_ACCURACY_CHECK", "first=2,every=0")
    model, ref = _pair(13, "FromEnv")
    model.eval()
    ref.eval()
    model = disc_paddle.compile(model, min_cluster_size=1)
    assert model.forward.state.config.accuracy_check == AccuracyPolicy(first=2, every=0)
    with paddle.no_grad():
        custom_op.load_library().inject_wrong_results(1)
        got, warned = _call(model, _x(3))
        assert len(warned) == 1 and "accuracy_mismatch" in str(warned[0].message), warned
        np.testing.assert_allclose(got.numpy(), ref(_x(3)).numpy(), rtol=1e-5, atol=1e-6)
    monkeypatch.setenv("DISC_ACCURACY_CHECK", "off")
    assert disc_paddle.compile(MLP()).forward.state.config.accuracy_check is None
    monkeypatch.delenv("DISC_ACCURACY_CHECK")
    assert disc_paddle.compile(MLP()).forward.state.config.accuracy_check is None
    with pytest.raises(ValueError, match="accuracy_check"):
        disc_paddle.compile(MLP(), accuracy_check="sometimes")
