"""The fuzz session's summary (cases, graphs, kernels, interpreter fallbacks) in pytest's
terminal report, and in ``$DISC_FUZZ_SUMMARY`` when set (the tox ``fuzz`` env keeps it)."""

from __future__ import annotations

import os


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    from fuzz_check import TALLY

    if not TALLY.graphs:
        return
    text = TALLY.summary()
    terminalreporter.write_sep("-", "native engine fuzzing")
    terminalreporter.write_line(text)
    path = os.environ.get("DISC_FUZZ_SUMMARY")
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")
