"""Fuzzing: random core graphs compiled once natively and run on shapes the compiler never
saw, against the reference interpreter (fuzz_graphs.py says what is generated, and
fuzz_check.py how results are judged).

``DISC_FUZZ_EXAMPLES`` graphs are drawn (4 shape bindings each). The default is the slice
the ``core`` env runs (30 graphs, a fixed seed: CI is deterministic); the ``fuzz`` env runs
2,750 graphs (11,000 cases) with a fresh seed, or ``DISC_FUZZ_SEED``'s.
"""

from __future__ import annotations

import os

import pytest
from fuzz_check import check_case
from fuzz_graphs import FuzzCase, fuzz_cases
from hypothesis import HealthCheck, given, seed, settings

from disc_core import Compiler
from disc_runtime import CompileCache

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

EXAMPLES = int(os.environ.get("DISC_FUZZ_EXAMPLES", "30"))
SEED = os.environ.get("DISC_FUZZ_SEED")
LONG = "DISC_FUZZ_EXAMPLES" in os.environ

@pytest.fixture(scope="module")
def compiler(tmp_path_factory) -> Compiler:
    """One compiler and cache for all examples (hypothesis calls the test many times), in
    pytest's temporary directory (removed with old sessions: a fuzz run writes ~75 MB)."""
    return Compiler(CompileCache(tmp_path_factory.mktemp("fuzz-cache")), target="native")


def _settings(test):
    """The core slice: a fixed seed and no example database, so every run draws the same
    graphs (derandomize=True drew mostly half-precision ones, which only check the
    fallback). The fuzz env: a fresh seed unless DISC_FUZZ_SEED, failures replayed first."""
    test = settings(max_examples=EXAMPLES, deadline=None,
                    database=None if not LONG else settings.default.database,
                    suppress_health_check=list(HealthCheck), report_multiple_bugs=True,
                    print_blob=True)(test)
    if SEED or not LONG:
        test = seed(int(SEED or 0))(test)
    return test


@_settings
@given(case=fuzz_cases())
def test_native_matches_the_interpreter(compiler: Compiler, case: FuzzCase) -> None:
    check_case(compiler, case)
