"""Which clusters, compiled, change the answer: a search over cluster keys that needs only a
yes/no oracle (``differs(allowed keys)``: run the program with those clusters compiled and
compare with the framework's answer).

It finds a smallest culprit set by divide and conquer (QuickXplain's recursion, the
minimising half of delta debugging): if one half of the candidates already changes the
answer, the culprit is in it; if neither half does, the culprit needs clusters from both,
and each half is minimised with the other half compiled. One culprit among ``n`` clusters
takes about ``2 log2 n`` runs; a culprit of ``k`` clusters that only go wrong together
about ``2 k log2 n``. The result is minimal: leaving out any one of its clusters makes the
answer right again (under the assumption every bisection tool makes, that compiling more
clusters never repairs what a wrong one broke).

A program can hold several independent culprits: once one is found, the remaining clusters
are tried without it, and the search repeats while they still change the answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["Oracle", "SearchResult", "find_culprits", "minimal_culprit"]

#: ``differs(allowed)``: does the program's answer change with exactly these keys compiled?
Oracle = Callable[[frozenset[str]], bool]


@dataclass
class SearchResult:
    """The culprit sets found (each minimal, in the order found) and the runs the oracle
    made. Each set was itself seen to change the answer (the recursion returns a set only
    after asking about it, or about it with clusters already known to be needed)."""

    culprits: list[list[str]] = field(default_factory=list)
    runs: int = 0


class _Memo:
    """The oracle, asked at most once per key set."""

    def __init__(self, differs: Oracle) -> None:
        self._differs = differs
        self.answers: dict[frozenset[str], bool] = {}

    def __call__(self, keys: frozenset[str]) -> bool:
        if keys not in self.answers:
            self.answers[keys] = bool(self._differs(keys))
        return self.answers[keys]


def minimal_culprit(base: frozenset[str], candidates: Sequence[str], differs: Oracle
                    ) -> list[str]:
    """A smallest part of ``candidates`` that, compiled together with ``base``, changes
    the answer. Assumes ``differs(base | candidates)`` and not ``differs(base)``."""
    if len(candidates) <= 1:
        return list(candidates)
    half = len(candidates) // 2
    left, right = list(candidates[:half]), list(candidates[half:])
    if differs(base | frozenset(left)):
        return minimal_culprit(base, left, differs)
    if differs(base | frozenset(right)):
        return minimal_culprit(base, right, differs)
    need_left = minimal_culprit(base | frozenset(right), left, differs)
    need_right = minimal_culprit(base | frozenset(need_left), right, differs)
    return need_left + need_right


def find_culprits(keys: Sequence[str], differs: Oracle, *, max_culprits: int = 4,
                  known: Mapping[frozenset[str], bool] | None = None) -> SearchResult:
    """Every independent culprit set among ``keys`` (at most ``max_culprits``), given
    that compiling none of them gives the reference answer. The oracle is asked about
    ``keys`` first (unless ``known``, answers already had, says); when all of them
    together do not change the answer, there is no culprit. ``runs`` counts the oracle's
    new answers only."""
    memo = _Memo(differs)
    memo.answers.update(known or {})
    seeded = len(memo.answers)
    result = SearchResult()
    remaining = list(dict.fromkeys(keys))
    while remaining and len(result.culprits) < max_culprits:
        if not memo(frozenset(remaining)):
            break
        found = minimal_culprit(frozenset(), remaining, memo)
        result.culprits.append(found)
        remaining = [k for k in remaining if k not in found]
    result.runs = len(memo.answers) - seeded
    return result
