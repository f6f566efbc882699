from __future__ import annotations

import pytest
from disc_runtime_testkit import register_test_engines


@pytest.fixture(autouse=True, scope="session")
def _test_engines() -> None:
    register_test_engines()
