"""``disc bisect``: find the compiled cluster that changes a program's answer.

    disc bisect [--rtol R] [--atol A] --output FILE.npz [--repro DIR] -- CMD ...

``CMD`` is the user's program; it must save its results (losses, logits) to ``FILE.npz``
with ``numpy.savez`` every run. The program is run with every cluster left to the framework
(the reference, twice: a program whose results change run to run cannot be bisected), then
with every cluster compiled (its coverage report names the clusters by compile-cache key),
then with chosen subsets compiled (:mod:`.search`) until a smallest set of clusters whose
compilation alone changes the results is found. The culprit's clusters are printed and
written out as standalone reproducers (:mod:`.repro`). See docs/bisect.md.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from .clusters import ClusterInfo, clusters_by_key
from .compare import Comparison, compare_outputs
from .runs import ProgramRunner, RunError, RunResult, read_reports
from .search import Oracle, find_culprits

__all__ = ["BisectError", "main"]

PROG = "disc bisect"


class BisectError(Exception):
    """A mistake the user can fix, or a program that cannot be bisected (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise BisectError(f"{message} (see {PROG} --help)")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, usage=f"{PROG} [options] --output FILE.npz -- CMD ...",
                description="Run CMD (which saves its results to FILE.npz every run) with "
                "subsets of DISC's clusters compiled, find a smallest set of clusters that "
                "changes the results, and write a standalone reproducer of it.")
    p.add_argument("--output", required=True, metavar="FILE.npz",
                   help="the file CMD writes its results to (numpy.savez), every run")
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance (1e-4)")
    p.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (1e-5)")
    p.add_argument("--repro", metavar="DIR", default="disc-bisect-repro",
                   help="where the reproducers go (default: ./disc-bisect-repro)")
    p.add_argument("--timeout", type=float, metavar="S", help="seconds each run may take")
    p.add_argument("--max-culprits", type=int, default=4, metavar="N",
                   help="stop after N independent culprit sets (default 4)")
    p.add_argument("--keep", action="store_true",
                   help="keep the work directory (each run's log, reports and key file)")
    return p


def _split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    argv = list(argv)
    if "--" not in argv:
        if any(a in ("-h", "--help") for a in argv):
            return argv, []
        raise BisectError("put the program's command after --: disc bisect --output "
                          "out.npz -- python train.py")
    i = argv.index("--")
    if not argv[i + 1:]:
        raise BisectError("no command after --")
    return argv[:i], argv[i + 1:]


def main(argv: Sequence[str], out: TextIO | None = None) -> int:
    """``disc bisect``; raises :class:`BisectError` for what the user can fix."""
    options, command = _split(argv)
    args = parser().parse_args(options)
    out = out or sys.stdout
    workdir = Path(tempfile.mkdtemp(prefix="disc-bisect-"))
    try:
        return _Bisection(args, command, workdir, out).run()
    finally:
        if args.keep:
            print(f"{PROG}: work directory kept: {workdir}", file=out)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


class _Bisection:
    def __init__(self, args: argparse.Namespace, command: list[str], workdir: Path,
                 out: TextIO) -> None:
        self.args = args
        self.runner = ProgramRunner(command, args.output, workdir, timeout=args.timeout)
        self.workdir = workdir
        self.out = out
        self.reference: RunResult | None = None
        #: the key sets whose run failed (rather than computing other results)
        self.failed: set[frozenset[str]] = set()

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def compare(self, result: RunResult) -> Comparison:
        assert self.reference is not None
        return compare_outputs(self.reference.outputs, result.outputs, rtol=self.args.rtol,
                               atol=self.args.atol)

    def must_run(self, what: str, allowed: list[str] | None) -> RunResult:
        try:
            return self.runner.run(allowed)
        except RunError as exc:
            raise BisectError(f"{what}: {exc}") from None

    def run(self) -> int:
        self.reference = self.must_run("the reference run (no cluster compiled)", [])
        self.say(f"{PROG}: reference run, every cluster left to the framework: "
                 f"{len(self.reference.outputs)} arrays ({self.reference.seconds:.1f} s)")
        again = self.compare(self.must_run("the second reference run", []))
        if not again.same:
            raise BisectError("the program's results change between two runs with no "
                              f"cluster compiled ({again.describe(1)}): seed it "
                              "(torch.manual_seed, tf.random.set_seed, paddle.seed) or "
                              "widen --rtol/--atol")
        try:
            full = self.runner.run(None)
        except RunError as exc:  # DISC broke the program: that is bisected like a mismatch
            if exc.folder is None:
                raise BisectError(f"the run with every cluster compiled: {exc}") from None
            clusters = clusters_by_key(read_reports(exc.folder))
            outcome, same = f"failed ({' '.join(str(exc).split())})", False
        else:
            clusters = clusters_by_key(full.report)
            verdict = self.compare(full)
            outcome, same = verdict.describe(), verdict.same
        self.say(f"{PROG}: every cluster compiled ({len(clusters)} cluster keys): {outcome}")
        if same:
            self.say(f"{PROG}: the results agree within rtol {self.args.rtol:g}, atol "
                     f"{self.args.atol:g}: nothing to bisect")
            return 0
        if not clusters:
            self.say(f"{PROG}: the results differ, but the report names no built cluster "
                     "(DISC_REPORT not written? no DISC bridge in the program?): the "
                     "difference does not come from a compiled cluster DISC can name")
            return 0
        keys = list(clusters)
        self.say(f"{PROG}: searching {len(keys)} cluster keys (a run that fails counts as "
                 "different)")
        result = find_culprits(keys, self._oracle(len(keys)),
                               max_culprits=self.args.max_culprits,
                               known={frozenset(keys): True})
        if not result.culprits:
            self.say(f"{PROG}: compiling the clusters by key reproduces no difference (the "
                     "run with every cluster compiled differs: a cluster without a key, or "
                     "a flaky program)")
            return 0
        self.say(f"{PROG}: {len(result.culprits)} culprit set(s) found in {result.runs} more "
                 "runs")
        for n, culprit in enumerate(result.culprits, 1):
            self._explain(n, culprit, clusters)
        return 0

    def _oracle(self, total: int) -> Oracle:
        """One run per question, printed as it goes."""

        def differs(allowed: frozenset[str]) -> bool:
            label = f"  run {self.runner.count + 1}: {len(allowed)} of {total} cluster keys " \
                    "compiled:"
            try:
                verdict = self.compare(self.runner.run(sorted(allowed)))
            except RunError as exc:  # a crash with clusters compiled is DISC's failure too
                self.say(f"{label} failed ({' '.join(str(exc).split())})")
                self.failed.add(allowed)
                return True
            self.say(f"{label} {verdict.describe(1)}")
            return not verdict.same

        return differs

    def _explain(self, n: int, culprit: list[str], clusters: dict[str, ClusterInfo]) -> None:
        from disc_runtime import Artifact, CompileCache

        from .repro import recorded_inputs, write_reproducer

        effect = ("makes the program fail" if frozenset(culprit) in self.failed
                  else "changes the results")
        self.say(f"culprit {n}: {len(culprit)} cluster key(s) whose compilation {effect}"
                 + (" only together" if len(culprit) > 1 else ""))
        dump = self.workdir / f"dump-{n}"
        recording_failed = False
        try:
            self.runner.run(culprit, dump=dump)
        except RunError as exc:
            recording_failed = True
            self.say(f"  (the run recording the inputs failed: {' '.join(str(exc).split())})")
        cache = CompileCache()
        for key in culprit:
            info = clusters[key]
            self.say(f"  key {key}")
            for site in info.sites:
                self.say(f"    {site.describe()}")
            entry = cache.entry_path(key)
            if not entry.is_dir():
                self.say(f"    its artifact is not in the compile cache {cache.root}: no "
                         "reproducer")
                continue
            sig = Artifact.load(entry).signature
            for i, s in enumerate(sig.inputs):
                self.say(f"    input #{i} {s.name}: {s.dtype} {list(s.dims)}")
            for i, s in enumerate(sig.outputs):
                self.say(f"    output #{i} {s.name}: {s.dtype} {list(s.dims)}")
            framework = info.sites[0].framework if info.sites else None
            try:
                repro = write_reproducer(Path(self.args.repro) / key[:16], key, entry,
                                         recorded=recorded_inputs(dump, key),
                                         framework=framework, rtol=self.args.rtol,
                                         atol=self.args.atol)
            except Exception as exc:  # the search's result stands without a reproducer
                self.say(f"    no reproducer: {type(exc).__name__}: {exc}")
                continue
            if repro.inputs_kind == "recorded":
                kind = "recorded: the cluster's real inputs on its first call"
            elif recording_failed:
                kind = "synthetic: random arrays matching the signature, none were recorded"
            else:
                kind = ("synthetic: random arrays matching the signature; this bridge runs "
                        "clusters in a C++ launch op, which does not hand its inputs back")
            self.say(f"    reproducer: {repro.folder} (inputs {kind})")
            self.say(f"      inputs: {', '.join(repro.shapes)}")
            self.say(f"      {repro.command}")
            for check in repro.checks:
                self.say(f"      {check.what}: {check.detail}")
            self.say(f"      verdict: {repro.verdict}")
