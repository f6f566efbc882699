"""The culprit search over cluster keys, against fake programs: a program "differs" when
the compiled keys include one of its culprit sets (compiling more never repairs)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disc_core.bisect import find_culprits, minimal_culprit

KEYS = [f"k{i:02d}" for i in range(16)]


class FakeProgram:
    """An oracle whose answer changes when any of ``culprits`` is wholly compiled."""

    def __init__(self, *culprits: set[str]) -> None:
        self.culprits = [frozenset(c) for c in culprits]
        self.asked: list[frozenset[str]] = []

    def __call__(self, allowed: frozenset[str]) -> bool:
        self.asked.append(allowed)
        return any(c <= allowed for c in self.culprits)


@pytest.mark.parametrize("culprit", ["k00", "k07", "k08", "k15"])
def test_one_culprit_among_sixteen_in_logarithmic_runs(culprit):
    program = FakeProgram({culprit})
    result = find_culprits(KEYS, program)
    assert result.culprits == [[culprit]]
    # all 16, then two halves per level at most, then the rest without the culprit
    assert result.runs == len(program.asked) <= 2 + 2 * math.log2(len(KEYS))
    assert len(set(program.asked)) == len(program.asked)  # never the same set twice


def test_two_independent_culprits_are_two_sets():
    result = find_culprits(KEYS, FakeProgram({"k03"}, {"k12"}))
    assert sorted(result.culprits) == [["k03"], ["k12"]]


def test_a_culprit_pair_that_differs_only_together_is_one_set():
    program = FakeProgram({"k02", "k13"})
    result = find_culprits(KEYS, program)
    assert [sorted(c) for c in result.culprits] == [["k02", "k13"]]
    assert not program({"k02"}) and not program({"k13"})


def test_no_culprit_when_compiling_everything_changes_nothing():
    program = FakeProgram()
    result = find_culprits(KEYS, program)
    assert result.culprits == [] and result.runs == 1
    assert program.asked == [frozenset(KEYS)]


def test_known_answers_are_not_asked_again():
    program = FakeProgram({"k05"})
    result = find_culprits(KEYS, program, known={frozenset(KEYS): True})
    assert frozenset(KEYS) not in program.asked and result.culprits == [["k05"]]
    assert result.runs == len(program.asked)


def test_max_culprits_stops_the_search():
    result = find_culprits(KEYS, FakeProgram({"k01"}, {"k04"}, {"k09"}), max_culprits=2)
    assert len(result.culprits) == 2


def test_a_non_monotone_program_still_gets_a_set_seen_to_differ():
    """Clusters that repair each other (compiling more hides the fault): the search's
    assumption fails, yet what it returns was itself seen to change the answer."""
    table = {frozenset("abcd"): True, frozenset("acd"): True}
    result = find_culprits(list("abcd"), lambda s: table.get(s, False))
    for culprit in result.culprits:
        assert table.get(frozenset(culprit), False)


def test_minimal_culprit_keeps_the_base_compiled():
    program = FakeProgram({"base", "k09"})
    assert minimal_culprit(frozenset({"base"}), KEYS, program) == ["k09"]
    assert all("base" in asked for asked in program.asked)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sets(st.sampled_from(KEYS), min_size=1, max_size=3), max_size=3))
def test_every_set_found_is_minimal_and_nothing_is_left(culprits):
    program = FakeProgram(*culprits)
    result = find_culprits(KEYS, program, max_culprits=len(KEYS))
    found = set()
    for culprit in result.culprits:
        assert program(frozenset(culprit))
        for key in culprit:  # leaving any one out makes the answer right again
            assert not program(frozenset(culprit) - {key})
        found |= set(culprit)
    assert not program(frozenset(KEYS) - found)
    assert bool(result.culprits) == bool(culprits)
