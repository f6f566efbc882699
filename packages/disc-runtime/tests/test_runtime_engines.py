from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest
from disc_runtime_testkit import AFFINE, load_affine

from disc_runtime import (
    EngineNotFoundError,
    available_engines,
    engines,
    get_engine,
    register_engine,
    unregister_engine,
)


@pytest.fixture
def no_entry_points(monkeypatch: pytest.MonkeyPatch) -> list[EntryPoint]:
    eps: list[EntryPoint] = []
    monkeypatch.setattr(engines, "_entry_points", lambda: list(eps))
    return eps


def test_registered_engine_found() -> None:
    assert get_engine(AFFINE) is load_affine
    assert AFFINE in available_engines()


def test_register_conflict_and_replace() -> None:
    register_engine(AFFINE, load_affine)  # same loader again: no-op
    with pytest.raises(ValueError, match="already registered"):
        register_engine(AFFINE, lambda a: None)
    other = lambda a: None  # noqa: E731
    register_engine(AFFINE, other, replace=True)
    try:
        assert get_engine(AFFINE) is other
    finally:
        register_engine(AFFINE, load_affine, replace=True)


def test_missing_known_engine_hint(no_entry_points: list) -> None:
    unregister_engine("reference")
    with pytest.raises(EngineNotFoundError) as e:
        get_engine("reference")
    assert str(e.value) == (
        "artifact needs engine 'reference', which no installed package provides "
        "(it comes with disc-core: pip install disc-core)"
    )


def test_missing_unknown_engine_lists_available(no_entry_points: list) -> None:
    pattern = r"'warp-drive'.*available engines: .*test-affine"
    with pytest.raises(EngineNotFoundError, match=pattern):
        get_engine("warp-drive")
    with pytest.raises(LookupError):
        get_engine("warp-drive")


def test_entry_point_fallback_and_caching(no_entry_points: list) -> None:
    no_entry_points.append(
        EntryPoint(name="ep-affine", value="disc_runtime_testkit:load_affine", group="g")
    )
    try:
        assert "ep-affine" in available_engines()
        assert get_engine("ep-affine") is load_affine
        no_entry_points.clear()
        assert get_engine("ep-affine") is load_affine  # cached in the registry
    finally:
        unregister_engine("ep-affine")


def test_broken_entry_point(no_entry_points: list) -> None:
    no_entry_points.append(EntryPoint(name="broken", value="no_such_module_xyz:load", group="g"))
    with pytest.raises(EngineNotFoundError, match=r"engine 'broken' is declared by .* failed"):
        get_engine("broken")
