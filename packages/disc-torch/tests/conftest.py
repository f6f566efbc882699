"""Every test gets a fresh compile cache, dynamo state and report, so counts are exact."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fresh_disc(tmp_path, monkeypatch):
    monkeypatch.setenv("DISC_CACHE_DIR", str(tmp_path / "disc-cache"))
    import torch._dynamo

    import disc_core.report as report
    from disc_torch.compilers import COMPILERS

    torch._dynamo.reset()
    COMPILERS.clear()
    report.get_collector().clear()
    yield
    torch._dynamo.reset()
