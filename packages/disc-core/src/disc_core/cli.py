"""``disc``: coverage reports, the compile cache and standalone execution from one command.

    disc report FILE.json [--html OUT] [--md [OUT]]   summary (and HTML / Markdown)
    disc report merge A.json B.json ... [-o OUT]       join runs or workers into one report
    disc cache info|clear [--dir DIR]                  the compile cache
    disc compile FILE [--stop-after STAGE] [--out DIR] compile a graph's text form, printing
                                                       one stage's output
    disc run ARTIFACT ...                              same as disc-run
    disc bisect --output FILE.npz -- CMD ...           find the compiled cluster that
                                                       changes CMD's results (docs/bisect.md)
    disc export [GRAPH.disc ...] [-o OUT]              clusters as StableHLO .mlir files
    disc --version                                     DISC packages and frameworks seen

Expected failures (missing file, not a report, wrong schema version, unwritable output)
print ONE line ``disc: error: ...`` on stderr and exit with 2; anything else is a bug: one
line ``disc: internal error: ...`` and exit 1 (``DISC_DEBUG=1`` shows the traceback).
Framework versions come from package metadata: this command never imports a framework.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

__all__ = ["main"]

PROG = "disc"


class UserError(Exception):
    """A mistake the user can fix; reported as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """Usage mistakes are one line too (argparse would print the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {message} (see {self.prog} --help)\n")


def _add_render_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--html", metavar="OUT", help="also write a self-contained HTML page")
    p.add_argument("--md", metavar="OUT", nargs="?", const="-",
                   help="Markdown to OUT, or to stdout (instead of the summary) without OUT")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="DISC: coverage reports, compile cache, artifacts.",
                epilog=f"{PROG} compile FILE [--stop-after STAGE]: compile a graph's text form "
                f"and print one stage's output (see {PROG} compile --help); "
                f"{PROG} bisect --output FILE.npz -- CMD ...: find the compiled cluster that "
                f"changes CMD's results (see {PROG} bisect --help); {PROG} export "
                f"[GRAPH.disc ...] [-o OUT]: write clusters as StableHLO .mlir files (see "
                f"{PROG} export --help)")
    p.add_argument("--version", action="store_true",
                   help="list installed DISC packages and the framework versions they see")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    report = sub.add_parser("report", help="summarize a coverage report (or: report merge)",
                            description="Summarize a DISC coverage report; "
                            "'disc report merge A B ...' joins several.")
    report.add_argument("file", metavar="FILE.json")
    _add_render_options(report)

    cache = sub.add_parser("cache", help="inspect or clear the compile cache")
    cache.add_argument("action", choices=("info", "clear"))
    cache.add_argument("--dir", metavar="DIR",
                       help="cache directory (default: $DISC_CACHE_DIR or ~/.cache/disc)")
    cache.add_argument("--json", action="store_true", help="info as JSON")

    sub.add_parser("run", help="run a compiled artifact (same as disc-run; see disc run -h)",
                   add_help=False)
    return p


def _compile_parser() -> argparse.ArgumentParser:
    """``disc compile``: parsed on its own, like ``disc report merge``, so that the main
    parser's command list (and its error messages) stay report, cache and run."""
    from .stages import STAGES

    comp = _Parser(prog=f"{PROG} compile",
                   description="Run the compile stages (" + " -> ".join(STAGES)
                   + ") on a graph in text form and print the last one's output.")
    comp.add_argument("file", metavar="FILE", help="a graph in DISC's text form ('-': stdin)")
    comp.add_argument("--stop-after", choices=STAGES, default=STAGES[-1], metavar="STAGE",
                      help=f"the stage to stop after and print: {', '.join(STAGES)} "
                      "(default: package)")
    comp.add_argument("--target", choices=("auto", "native", "reference"), default="auto",
                      help="native C code, the reference interpreter, or auto (default)")
    comp.add_argument("--no-optimize", action="store_true",
                      help="skip the graph passes of the optimize stage")
    comp.add_argument("--out", metavar="DIR",
                      help="where build puts module.so and package the artifact "
                      "(default: a new temporary directory)")
    return comp


def _merge_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=f"{PROG} report merge",
                description="Merge DISC coverage reports (several runs, workers or frameworks).")
    p.add_argument("files", metavar="FILE.json", nargs="+")
    p.add_argument("-o", "--output", metavar="OUT", help="write the merged report (JSON)")
    _add_render_options(p)
    return p


def _load(path: str):
    from .report import ReportFormatError, load

    try:
        return load(path)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not a report file") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ReportFormatError as exc:
        raise UserError(f"{path}: {exc}") from None


def _write_text(path: str, text: str, what: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {what} to {path}: {exc.strerror or exc}") from None
    print(f"{PROG}: wrote {what} to {path}", file=sys.stderr)


def _render(report, args: argparse.Namespace) -> None:
    from .report import render_html, render_markdown, render_text

    if args.html:
        _write_text(args.html, render_html(report), "HTML report")
    if args.md and args.md != "-":
        _write_text(args.md, render_markdown(report), "Markdown report")
    sys.stdout.write(render_markdown(report) if args.md == "-" else render_text(report))


def _report(argv: list[str]) -> None:
    if argv[:1] == ["merge"]:
        _merge(_merge_parser().parse_args(argv[1:]))
        return
    args = _parser().parse_args(["report", *argv])
    _render(_load(args.file), args)


def _merge(args: argparse.Namespace) -> None:
    from .report import Report, write_report

    try:
        merged = Report.merge(_load(path) for path in args.files)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if args.output:
        try:
            write_report(merged, args.output)
        except OSError as exc:
            raise UserError(f"cannot write {args.output}: {exc.strerror or exc}") from None
        print(f"{PROG}: wrote merged report ({len(merged.runs)} runs) to {args.output}",
              file=sys.stderr)
    _render(merged, args)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


#: what DISC keeps beside the compile cache's entries, in the same directory: facts
#: measured once per machine (disc_runtime.facts), the library helpers' compiled objects
#: (disc_core.native.helper_objects) and disc-torch's traced graphs
#: (disc_torch.precompile). Named here, never found by listing: the directory may be one
#: a user pointed DISC_CACHE_DIR at, holding other things.
KEPT_BESIDE = ("facts-v1", "objects-v1", "torch-graphs-v1")


def _cache(args: argparse.Namespace) -> None:
    import shutil

    from disc_runtime import CompileCache

    cache = CompileCache(args.dir)
    beside = [cache.directory / name for name in KEPT_BESIDE]
    try:
        if args.action == "clear":
            removed = cache.clear()
            print(f"removed {removed} entr{'y' if removed == 1 else 'ies'} from {cache.root}")
            for folder in beside:
                if folder.is_dir():
                    files = sum(1 for f in folder.iterdir() if f.is_file())
                    shutil.rmtree(folder)
                    print(f"removed {folder} ({files} file{'' if files == 1 else 's'})")
            return
        info = cache.info()
        info["beside"] = {f.name: sum(p.stat().st_size for p in f.rglob("*") if p.is_file())
                          for f in beside if f.is_dir()}
    except OSError as exc:
        raise UserError(f"cache {cache.root}: {exc.strerror or exc}") from None
    if args.json:
        print(json.dumps(info, indent=1))
    else:
        print(f"cache: {info['root']}\nentries: {info['entries']}\n"
              f"size: {_size(info['total_bytes'])}")
        for name, size in info["beside"].items():
            print(f"{name}: {_size(size)}")


def _versions() -> str:
    from .report.versions import (
        BRIDGE_FRAMEWORKS,
        DISC_DISTRIBUTIONS,
        FRAMEWORK_DISTRIBUTIONS,
        distribution_version,
        framework_version,
    )

    def seen(framework: str) -> str:
        found = framework_version(framework)
        return f"{found[0]} {found[1]}" if found else f"{framework} not installed"

    lines = [f"{PROG} (disc-core {distribution_version('disc-core') or 'not installed'})",
             "DISC packages:"]
    for dist in DISC_DISTRIBUTIONS:
        version = distribution_version(dist)
        line = f"  {dist:<13} {version or 'not installed'}"
        if version and dist in BRIDGE_FRAMEWORKS:
            line += f"  (sees {seen(BRIDGE_FRAMEWORKS[dist])})"
        lines.append(line)
    lines.append("frameworks:")
    for framework in FRAMEWORK_DISTRIBUTIONS:
        found = framework_version(framework)
        lines.append(f"  {framework:<13} "
                     + (f"{found[1]} ({found[0]})" if found else "not installed"))
    return "\n".join(lines) + "\n"


def _compile(args: argparse.Namespace) -> None:
    from .parser import ParseError
    from .pipeline import compile_text

    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    except FileNotFoundError:
        raise UserError(f"{args.file}: no such file") from None
    except OSError as exc:
        raise UserError(f"{args.file}: cannot read: {exc.strerror or exc}") from None
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    try:
        result = compile_text(text, stop_after=args.stop_after, target=args.target,
                              optimize=not args.no_optimize, directory=args.out)
    except ParseError as exc:
        raise UserError(f"{args.file}: {exc}") from None
    except RuntimeError as exc:  # target='native' without a C compiler
        raise UserError(str(exc)) from None
    if args.stop_after == "lower":  # which backend rewrites applied, beside the graph
        for name, st in result.lower_passes.items():
            print(f"{PROG}: lower: {name}: {'changed the graph' if st.changes else 'no change'}"
                  f" ({st.seconds * 1e3:.1f} ms)", file=sys.stderr)
    text = result.text
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _dispatch(argv: list[str]) -> int:
    if argv[:1] == ["run"]:
        from disc_runtime.cli import main as run_main

        return run_main(argv[1:])
    if argv[:1] == ["report"]:
        _report(argv[1:])
        return 0
    if argv[:1] == ["bisect"]:
        from .bisect.command import BisectError
        from .bisect.command import main as bisect_main

        try:
            return bisect_main(argv[1:])
        except BisectError as exc:
            raise UserError(str(exc)) from None
    if argv[:1] == ["compile"]:
        _compile(_compile_parser().parse_args(argv[1:]))
        return 0
    if argv[:1] == ["export"]:  # StableHLO .mlir files of clusters (disc_core.stablehlo.cli)
        from .stablehlo.cli import main as export_main

        return export_main(argv[1:])
    args = _parser().parse_args(argv)
    if args.version:
        sys.stdout.write(_versions())
    elif args.command == "cache":
        _cache(args)
    elif args.command == "compile":
        _compile(args)
    else:
        raise UserError(f"a command is required: report, cache or run (see {PROG} --help)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``disc`` and ``python -m disc_core.cli``; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _dispatch(argv)
    except SystemExit as exc:  # usage error, --help: return instead of exiting
        return exc.code if isinstance(exc.code, int) else 2
    except UserError as exc:
        print(f"{PROG}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `disc report x.json | head`: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return 0
    except Exception as exc:
        from disc_runtime.options import RUNTIME_OPTIONS

        if RUNTIME_OPTIONS.value("debug"):
            traceback.print_exc()
        print(f"{PROG}: internal error: {type(exc).__name__}: {_one_line(exc)} "
              "(set DISC_DEBUG=1 for a traceback)", file=sys.stderr)
        return 1


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
