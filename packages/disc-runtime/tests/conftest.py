from __future__ import annotations

import pytest
from disc_runtime_testkit import register_test_engines


@pytest.fixture(autouse=True, scope="session")
def _test_engines() -> None:
    register_test_engines()


@pytest.fixture(autouse=True)
def _own_cache_dir(tmp_path, monkeypatch) -> None:
    """Each test its own DISC cache directory: facts a test measures with stubbed timers
    (disc_runtime.facts) never reach a real cache, nor leak into another test."""
    monkeypatch.setenv("DISC_CACHE_DIR", str(tmp_path / "disc-cache"))
