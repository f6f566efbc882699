"""Running the user's program once with a chosen set of clusters compiled.

Each run gets its own folder under the bisection's work directory: the key file that
``DISC_BISECT_CLUSTERS`` points to, the coverage reports (``DISC_REPORT``, one per process
with ``{pid}``: a program may start workers) and, when asked, the dumped cluster inputs.
The program writes its results to the ``--output`` file every run; the file is removed
before each run so that a run that writes nothing is never mistaken for a result.
``DISC_ACCURACY_CHECK`` is turned off: the accuracy guard would hide the very mismatch
being searched for.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..report import Report, ReportFormatError, load
from .compare import load_outputs

__all__ = ["ProgramRunner", "RunError", "RunResult", "read_reports"]

#: the variables a run sets (or clears) in the program's environment
CONTROLLED = ("DISC_BISECT_CLUSTERS", "DISC_BISECT_DUMP", "DISC_REPORT", "DISC_ACCURACY_CHECK")


class RunError(Exception):
    """The program failed or wrote no results: nothing to compare. ``folder`` is the
    run's folder when it ran (its reports may still name the clusters it built)."""

    def __init__(self, message: str, folder: Path | None = None) -> None:
        super().__init__(message)
        self.folder = folder


@dataclass
class RunResult:
    """One run: its results, the merged coverage report of its processes, and timing."""

    outputs: dict[str, np.ndarray]
    report: Report
    seconds: float
    folder: Path


class ProgramRunner:
    """Runs ``command`` (an argv list) in ``cwd`` with DISC's selection set per run."""

    def __init__(self, command: Sequence[str], output: str | os.PathLike[str],
                 workdir: Path, *, cwd: str | os.PathLike[str] | None = None,
                 timeout: float | None = None, environ: Mapping[str, str] | None = None
                 ) -> None:
        self.command = list(command)
        self.cwd = Path(cwd) if cwd is not None else Path.cwd()
        output = Path(output)
        self.output = output if output.is_absolute() else self.cwd / output
        self.workdir = workdir
        self.timeout = timeout
        self.environ = dict(os.environ if environ is None else environ)
        self.count = 0

    def run(self, allowed: Iterable[str] | None, *, dump: Path | None = None) -> RunResult:
        """Run once with only ``allowed`` keys compiled (None: every cluster, no
        selection); ``dump``: where allowed clusters save their first call's inputs."""
        self.count += 1
        folder = self.workdir / f"run-{self.count}"
        folder.mkdir(parents=True)
        env = {k: v for k, v in self.environ.items() if k not in CONTROLLED}
        env["DISC_REPORT"] = str(folder / "report-{pid}.json")
        env["DISC_ACCURACY_CHECK"] = "0"
        if allowed is not None:
            keys = folder / "clusters.txt"
            keys.write_text("".join(f"{k}\n" for k in sorted(allowed)), encoding="utf-8")
            env["DISC_BISECT_CLUSTERS"] = str(keys)
        if dump is not None:
            env["DISC_BISECT_DUMP"] = str(dump)
        self.output.unlink(missing_ok=True)
        start = time.perf_counter()
        try:
            done = subprocess.run(self.command, cwd=self.cwd, env=env, timeout=self.timeout,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except FileNotFoundError:
            raise RunError(f"{self.command[0]}: command not found") from None
        except subprocess.TimeoutExpired:
            raise RunError(f"the command ran longer than {self.timeout:g} s") from None
        seconds = time.perf_counter() - start
        (folder / "output.log").write_bytes(done.stdout or b"")
        if done.returncode != 0:
            tail = (done.stdout or b"").decode(errors="replace").strip().splitlines()[-5:]
            raise RunError(f"the command exited with status {done.returncode} (log: "
                           f"{folder / 'output.log'})" + "".join(f"\n    {t}" for t in tail),
                           folder)
        if not self.output.is_file():
            raise RunError(f"the command did not write {self.output} (it must save its "
                           "results there with numpy.savez every run)", folder)
        try:
            outputs = load_outputs(self.output)
        except Exception as exc:
            raise RunError(f"{self.output}: not a numpy .npz/.npy file ({exc})",
                           folder) from None
        return RunResult(outputs, read_reports(folder), seconds, folder)


def read_reports(folder: Path) -> Report:
    """The reports the run's processes wrote, merged (none: an empty report)."""
    reports = []
    for path in sorted(folder.glob("report-*.json")):
        try:
            reports.append(load(path))
        except (OSError, ReportFormatError):
            continue
    return Report.merge(reports) if reports else Report()
