"""The kit's compiler registry and fallback bookkeeping."""

from __future__ import annotations

import warnings

import pytest

import disc_core.fallback
from disc_core.bridge import (
    CompilerRegistry,
    DiscFallbackWarning,
    FallbackNotice,
    ReasonCode,
    fallback,
)


def test_a_registry_keeps_one_compiler_per_target_and_prepares_first(tmp_path, monkeypatch):
    monkeypatch.setenv("DISC_CACHE_DIR", str(tmp_path))
    calls = []
    reg = CompilerRegistry(prepare=lambda: calls.append(1))
    c = reg.get("reference")
    assert reg.get("reference") is c and reg.get() is not c
    assert len(calls) == 3 and reg.compile_count("reference") == 0
    reg.clear()
    assert reg.get("reference") is not c


class ToyWarning(DiscFallbackWarning):
    pass


class Recorder:
    def __init__(self):
        self.failed = []

    def cluster_failed(self, cluster_id, code, detail):
        self.failed.append((cluster_id, code, detail))


def _fail(notice, rec):
    notice.cluster_failed(rec, 3, "a cluster of 2 ops", ReasonCode.COMPILE_ERROR,
                          "kit-test boom", stacklevel=2)


def test_a_notice_records_the_failure_and_warns_once_per_message():
    notice = FallbackNotice(ToyWarning, "in Toy")
    rec = Recorder()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(2):
            # as a bridge's own fail() does: stacklevel 2 names fail()'s caller
            _fail(notice, rec)
    assert rec.failed == [(3, ReasonCode.COMPILE_ERROR, "kit-test boom")] * 2
    assert [str(w.message) for w in seen] == [
        "DISC: a cluster of 2 ops runs in Toy (compile_error): kit-test boom"]
    assert seen[0].category is ToyWarning and seen[0].filename == __file__


def test_the_old_import_path_is_the_kits_warning():
    assert disc_core.fallback.DiscFallbackWarning is fallback.DiscFallbackWarning
    assert disc_core.fallback.warn_once is fallback.warn_once
    with pytest.warns(DiscFallbackWarning, match="kit-test once"):
        fallback.warn_once("kit-test once")
