"""Comparing two runs' named results: tolerances, NaN, shapes, names, dtypes."""

from __future__ import annotations

import numpy as np
import pytest

from disc_core.bisect import compare_outputs, load_outputs


def cmp(ref, got, rtol=1e-5, atol=1e-8):
    return compare_outputs(ref, got, rtol=rtol, atol=atol)


def test_within_tolerance_is_the_same():
    ref = {"loss": np.float32([1.0, 2.0, 1000.0])}
    got = {"loss": np.float32([1.0 + 5e-6, 2.0, 1000.004])}
    result = cmp(ref, got)
    assert result.same and result.describe() == "same"
    assert result.max_abs == pytest.approx(0.004, rel=1e-2)


def test_beyond_tolerance_names_the_array_and_the_worst_place():
    ref = {"a": np.zeros((2, 3), np.float32), "b": np.ones(3)}
    got = {"a": np.zeros((2, 3), np.float32), "b": np.array([1.0, 1.5, 1.0])}
    result = cmp(ref, got)
    assert not result.same
    assert result.differences == [
        "b: 1 of 3 values differ (max |diff| 0.5; at (1,): 1.5 vs reference 1)"]
    assert cmp(ref, got, atol=0.6).same


def test_nan_matches_nan_only():
    ref = {"x": np.array([np.nan, 1.0])}
    assert cmp(ref, {"x": np.array([np.nan, 1.0])}).same
    assert not cmp(ref, {"x": np.array([0.0, 1.0])}).same
    assert not cmp({"x": np.array([0.0, 1.0])}, ref).same
    assert not cmp({"x": np.array([np.inf])}, {"x": np.array([-np.inf])}).same
    result = cmp({"x": np.array([1.0, 2.0, 3.0])}, {"x": np.array([np.nan, 2.5, 3.0])})
    assert result.differences == [
        "x: 2 of 3 values differ (max |diff| 0.5, 1 at NaN/inf; at (0,): nan vs reference 1)"]


def test_shape_names_and_kinds_count_as_differences():
    assert cmp({"x": np.zeros(3)}, {"x": np.zeros((3, 1))}).differences == [
        "x: shape (3, 1), reference (3,)"]
    result = cmp({"x": np.zeros(1), "y": np.zeros(1)}, {"x": np.zeros(1), "z": np.zeros(1)})
    assert result.differences == ["y: missing", "z: not in the reference"]
    assert not cmp({"s": np.array(["a"])}, {"s": np.array(["b"])}).same
    assert cmp({"s": np.array(["a"])}, {"s": np.array(["a"])}).same


def test_integers_and_booleans_compare_exactly_enough():
    assert cmp({"i": np.arange(4)}, {"i": np.arange(4, dtype=np.int32)}).same
    assert not cmp({"i": np.arange(4)}, {"i": np.arange(1, 5)}).same
    assert not cmp({"m": np.array([True, False])}, {"m": np.array([True, True])}).same


def test_describe_shortens_many_differences():
    ref = {f"a{i}": np.zeros(1) for i in range(5)}
    got = {f"a{i}": np.ones(1) for i in range(5)}
    assert cmp(ref, got).describe(2).endswith("; +3 more")


def test_load_outputs_reads_npz_and_npy(tmp_path):
    np.savez(tmp_path / "r.npz", loss=np.float32(0.5), logits=np.arange(3))
    loaded = load_outputs(tmp_path / "r.npz")
    assert sorted(loaded) == ["logits", "loss"] and loaded["logits"].tolist() == [0, 1, 2]
    np.save(tmp_path / "r.npy", np.arange(2))
    assert load_outputs(tmp_path / "r.npy")["array"].tolist() == [0, 1]

