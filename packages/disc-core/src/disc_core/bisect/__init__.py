"""``disc bisect``: which compiled cluster changes a program's answer, as a standalone
reproducer. Modules with one job each: :mod:`.compare` (are two runs' results the same),
:mod:`.search` (the culprit search over cluster keys), :mod:`.runs` (one run of the
program with a chosen set of clusters compiled), :mod:`.clusters` (the suspects, from the
coverage report), :mod:`.repro` (the reproducer and its diagnosis), :mod:`.command` (the
command line). The bridges' side is :mod:`disc_core.bridge.selection`.
"""

from .compare import Comparison, compare_outputs, load_outputs
from .search import SearchResult, find_culprits, minimal_culprit

__all__ = ["Comparison", "SearchResult", "compare_outputs", "find_culprits", "load_outputs",
           "minimal_culprit"]
