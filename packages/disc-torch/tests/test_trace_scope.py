"""DISC's tracing settings are in force while dynamo compiles a call of an optimized
callable, and only then: not between calls, not in another backend's compiles, and again
after ``torch._dynamo.reset()`` drops the callbacks that apply them."""

from __future__ import annotations

import torch
import torch._dynamo.config as dynamo_config
import torch._functorch.config as functorch_config
import torch.fx.experimental._config as fx_config

import disc_torch
import disc_torch.backend as backend
import disc_torch.trace_scope as trace_scope
from disc_torch.precompile import caching_active


def _settings() -> dict[str, object]:
    return {"backed_size_oblivious": fx_config.backed_size_oblivious,
            "use_duck_shape": fx_config.use_duck_shape,
            "specialize_float": dynamo_config.specialize_float,
            "fake_tensor_cache_enabled": dynamo_config.fake_tensor_cache_enabled,
            "bundled_autograd_cache": functorch_config.bundled_autograd_cache,
            "caching_active": caching_active()}


def _spy(monkeypatch) -> list[dict[str, object]]:
    seen: list[dict[str, object]] = []
    real = backend.disc_backend

    def spy(gm, example_inputs, **kwargs):
        seen.append(_settings())
        return real(gm, example_inputs, **kwargs)

    monkeypatch.setattr(backend, "disc_backend", spy)
    return seen


def test_settings_hold_while_dynamo_compiles_and_only_then(monkeypatch):
    outside = _settings()
    seen = _spy(monkeypatch)
    fn = lambda x, s: torch.relu(x) * s + 1  # noqa: E731
    packaged = disc_torch.optimize(fn, min_cluster_size=1, specialize_floats=True)
    plain = disc_torch.optimize(fn, min_cluster_size=1, cache_graphs=False,
                                specialize_floats=True)
    for compiled in (packaged, plain):
        for n in (1, 5, 2, 9):  # one trace per callable: size 1 like any other
            x = torch.randn(3, n)
            torch.testing.assert_close(compiled(x, 0.5), fn(x, 0.5))
            assert _settings() == outside  # restored after compiling and after cached calls
    assert len(seen) == 2, seen
    for during, caching in zip(seen, (True, False)):
        assert during["backed_size_oblivious"] is True
        assert during["use_duck_shape"] is False
        assert during["specialize_float"] is True
        assert during["fake_tensor_cache_enabled"] is False
        assert during["caching_active"] is caching
        assert during["bundled_autograd_cache"] is (caching or outside["bundled_autograd_cache"])


def test_other_backends_compile_with_torchs_own_settings(monkeypatch):
    seen: list[dict[str, object]] = []

    def other(gm, example_inputs):
        seen.append(_settings())
        return gm.forward

    disc_torch.optimize(lambda x: x * 2, min_cluster_size=1)(torch.randn(4))
    x = torch.randn(4)
    torch.compile(lambda t: t + 3, backend=other, dynamic=True)(x)
    assert seen and seen[0]["backed_size_oblivious"] is False
    assert seen[0]["use_duck_shape"] == fx_config.use_duck_shape
    assert seen[0]["fake_tensor_cache_enabled"] == dynamo_config.fake_tensor_cache_enabled


def test_settings_come_back_after_dynamo_reset(monkeypatch):
    seen = _spy(monkeypatch)
    disc_torch.optimize(lambda x: x - 1, min_cluster_size=1)(torch.randn(2, 3))
    torch._dynamo.reset()  # clears dynamo's compile callbacks
    disc_torch.optimize(lambda x: x + 1, min_cluster_size=1)(torch.randn(2, 3))
    assert [s["backed_size_oblivious"] for s in seen] == [True, True]


def test_without_dynamos_callback_api_the_settings_wrap_the_call(monkeypatch):
    """Where torch has no usable ``torch._dynamo.callback_handler`` (``_register`` says
    so), the settings are written around the whole call, as before, and still hold during
    the compile."""
    seen = _spy(monkeypatch)
    outside = _settings()
    monkeypatch.setattr(trace_scope, "_register", lambda: False)
    fn = lambda x: x * 3  # noqa: E731
    compiled = disc_torch.optimize(fn, min_cluster_size=1, cache_graphs=False)
    x = torch.randn(2, 5)
    torch.testing.assert_close(compiled(x), fn(x))
    assert _settings() == outside
    assert [s["backed_size_oblivious"] for s in seen] == [True]


def test_dims_equal_in_the_first_call_are_not_tied_together():
    """A square first input (or a batch as long as the sequence) must not specialize the
    graph to equal dims: torch's duck sizing would give both one symbol and guard their
    equality, and the first unequal call would trace and compile everything again."""
    from disc_core.report import get_collector

    get_collector().clear()
    fn = lambda x, y: (x * 2 + y.sum(0)).relu() @ y.t()  # noqa: E731
    compiled = disc_torch.optimize(fn, min_cluster_size=1)
    before = disc_torch.compile_count()
    for rows, cols in ((4, 4), (3, 5), (6, 2), (7, 7), (1, 9)):
        x, y = torch.randn(rows, cols), torch.randn(rows + 1, cols)
        torch.testing.assert_close(compiled(x, y), fn(x, y))
    assert disc_torch.compile_count() - before == 1
    assert len(disc_torch.report().graphs) == 1
