"""Every test gets a fresh compile cache, dynamo state and report, so counts are exact,
and a random stream of its own."""

from __future__ import annotations

import zlib

import pytest


@pytest.fixture(autouse=True)
def _fresh_disc(tmp_path, monkeypatch, request):
    monkeypatch.setenv("DISC_CACHE_DIR", str(tmp_path / "disc-cache"))
    import torch
    import torch._dynamo

    # torch's global generator seeded from the test's own name: what a test draws does not
    # depend on which tests ran before it and how much they drew (a gradient check whose
    # sums cancel failed once when an unrelated test changed its number of draws)
    torch.manual_seed(zlib.crc32(f"{request.node.module.__name__}::{request.node.name}"
                                 .encode()))

    import disc_core.report as report
    from disc_torch.compilers import COMPILERS

    torch._dynamo.reset()
    COMPILERS.clear()
    report.get_collector().clear()
    yield
    torch._dynamo.reset()
