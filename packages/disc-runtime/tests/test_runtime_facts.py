"""Facts kept per machine (disc_runtime.facts): measured once, read back by later
processes, measured again when what they depend on changes or the record is damaged."""

from __future__ import annotations

from disc_runtime import facts


def _counting(value):
    calls = []

    def measure():
        calls.append(1)
        return value

    return calls, measure


def test_measured_once_then_read_back() -> None:
    calls, measure = _counting({"a": 1.5})
    assert facts.remembered("thing", {"lib": ["x", 1, 2]}, measure) == {"a": 1.5}
    assert facts.remembered("thing", {"lib": ["x", 1, 2]}, measure) == {"a": 1.5}
    assert len(calls) == 1


def test_a_change_of_what_it_depends_on_measures_again() -> None:
    calls, measure = _counting(True)
    facts.remembered("thing", {"lib": ["x", 1, 2]}, measure)
    facts.remembered("thing", {"lib": ["x", 1, 3]}, measure)
    facts.remembered("other", {"lib": ["x", 1, 2]}, measure)
    assert len(calls) == 3


def test_a_damaged_record_is_measured_again_and_rewritten(tmp_path) -> None:
    calls, measure = _counting([1, 2])
    facts.remembered("thing", {"k": 1}, measure)
    (record,) = (tmp_path / "disc-cache" / facts.LAYOUT).glob("thing-*.json")
    for junk in ("not json", '{"value": 5}', "[]"):
        record.write_text(junk)
        assert facts.remembered("thing", {"k": 1}, measure) == [1, 2]
    assert len(calls) == 4
    assert facts.remembered("thing", {"k": 1}, measure) == [1, 2]
    assert len(calls) == 4


def test_an_unwritable_cache_still_answers(tmp_path, monkeypatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("DISC_CACHE_DIR", str(blocker / "below-a-file"))
    calls, measure = _counting(7)
    assert facts.remembered("thing", {"k": 1}, measure) == 7
    assert facts.remembered("thing", {"k": 1}, measure) == 7
    assert len(calls) == 2


def test_identities_change_with_the_file(tmp_path) -> None:
    f = tmp_path / "lib.so"
    f.write_bytes(b"x")
    before = facts.file_identity(str(f))
    f.write_bytes(b"xy")
    assert facts.file_identity(str(f)) != before
    assert facts.file_identity(None) is None
    assert facts.file_identity(str(tmp_path / "missing")) == [str(tmp_path / "missing"), None,
                                                              None]
    assert facts.cpu_identity() == facts.cpu_identity()
