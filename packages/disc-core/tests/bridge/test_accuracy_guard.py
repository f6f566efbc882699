"""The accuracy guard's policy and comparison, framework-free (the bridges' tests run it
against real framework ops)."""

from __future__ import annotations

import numpy as np
import pytest

from disc_core.bridge.accuracy import (
    ACCURACY_PREFIX,
    AccuracyPolicy,
    compare_outputs,
    failure_reason,
    parse_accuracy_check,
)
from disc_core.report import ReasonCode


@pytest.mark.parametrize("value, want", [
    (False, None), ("off", None), ("0", None), ("", None), (None, None),
    (True, AccuracyPolicy(3, 1000)), ("on", AccuracyPolicy(3, 1000)),
    ("1", AccuracyPolicy(3, 1000)), ("first=5", AccuracyPolicy(5, 1000)),
    ("every=0", AccuracyPolicy(3, 0)), ("first=1, every=7", AccuracyPolicy(1, 7)),
])
def test_the_option_parses(value, want):
    assert parse_accuracy_check(value) == want


@pytest.mark.parametrize("bad", ["5", "first=-1", "last=3", "first=x", "first"])
def test_a_bad_option_names_what_is_expected(bad):
    with pytest.raises(ValueError, match="accuracy_check"):
        parse_accuracy_check(bad)


def test_which_calls_are_checked():
    assert [c for c in range(12) if AccuracyPolicy(2, 4).due(c)] == [0, 1, 5, 9]
    assert [c for c in range(12) if AccuracyPolicy(3, 0).due(c)] == [0, 1, 2]
    assert [c for c in range(5) if AccuracyPolicy(0, 1).due(c)] == [0, 1, 2, 3, 4]


def test_dtype_tolerances_accept_rounding_and_refuse_real_errors():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(1000).astype(np.float32)
    assert compare_outputs([a * (1 + 3e-5)], [a]) is None  # f32 rounding: fine
    worse = a.copy()
    worse[17] += 0.01
    said = compare_outputs([worse], [a])
    assert said and said.startswith("output #0 (f32 [1000]) differs from the framework in 1 of "
                                    "1000 elements, by up to 0.01")
    d = a.astype(np.float64)
    assert compare_outputs([d * (1 + 3e-5)], [d]) is not None  # too loose for float64
    h = a.astype(np.float16)
    assert compare_outputs([h], [(a * (1 + 5e-3)).astype(np.float16)]) is None


def test_large_outputs_scale_the_absolute_tolerance():
    want = np.array([1e6, 0.0], np.float32)  # a sum whose small entry is all rounding
    assert compare_outputs([np.array([1e6, 0.5], np.float32)], [want]) is None
    assert compare_outputs([np.array([1e6, 50.0], np.float32)], [want]) is not None


def test_nan_inf_integers_and_shapes():
    nan = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    assert compare_outputs([nan.copy()], [nan]) is None
    assert compare_outputs([np.array([0.0, np.inf, -np.inf, 1.0], np.float32)], [nan])
    assert compare_outputs([np.array([np.nan, -np.inf, -np.inf, 1.0], np.float32)], [nan])
    assert compare_outputs([np.array([1, 2], np.int64)], [np.array([1, 3], np.int64)]) == \
        "output #0 (int64) differs in 1 of 2 elements"
    assert "the framework gives float32 [3]" in compare_outputs(
        [np.zeros(2, np.float32)], [np.zeros(3, np.float32)])
    assert compare_outputs([np.zeros(0, np.float32)], [np.zeros(0, np.float32)]) is None
    assert compare_outputs([], [np.zeros(1)]) == "0 outputs, the framework gives 1"


def test_launch_records_of_the_guard_become_accuracy_mismatches():
    assert failure_reason(ACCURACY_PREFIX + "output #0 differs") == (
        ReasonCode.ACCURACY_MISMATCH, "accuracy check failed: output #0 differs")
    assert failure_reason("dim check failed") == (ReasonCode.RUNTIME_ERROR, "dim check failed")
