"""``disc-run``: run a compiled artifact on ``.npy`` inputs, without any framework.

    disc-run ARTIFACT --inputs a.npy b.npy --out DIR [--quiet]

Writes ``DIR/output_0.npy``, ... and prints one line per output (index, name, dtype, shape).
Expected failures (missing or corrupt artifact, bad inputs, missing engine) print ONE line
``disc-run: error: ...`` on stderr and exit with 2; anything else is a bug: one line
``disc-run: internal error: ...`` and exit code 1 (``DISC_DEBUG=1`` shows the traceback).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import numpy as np

from ._version import __version__
from .errors import DiscRuntimeError, InputError
from .executable import Executable
from .options import RUNTIME_OPTIONS

__all__ = ["main"]

PROG = "disc-run"


class _Parser(argparse.ArgumentParser):
    """Usage mistakes are one line too (argparse would print the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {message} (see {PROG} --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Run a compiled DISC artifact on .npy inputs (CPU).")
    p.add_argument("artifact", metavar="ARTIFACT", help="artifact directory")
    p.add_argument(
        "--inputs", nargs="*", default=[], metavar="NPY", help="one .npy file per input, in order"
    )
    p.add_argument("--out", metavar="DIR", help="write output_<i>.npy files into DIR")
    p.add_argument("--quiet", action="store_true", help="do not print the output summary")
    p.add_argument(
        "--no-verify", action="store_true", help="skip sha256 verification of the artifact files"
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return p


def _load_input(i: int, path: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise InputError(f"input #{i}: file {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"input #{i}: cannot read {path} as a .npy array: {exc}") from None


def _run(args: argparse.Namespace) -> None:
    exe = Executable.load(args.artifact, verify=not args.no_verify)
    inputs = [_load_input(i, p) for i, p in enumerate(args.inputs)]
    outputs = exe.run(inputs)
    out_dir = Path(args.out) if args.out else None
    if out_dir is not None:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create output directory {out_dir}: {exc}") from None
    for i, (spec, arr) in enumerate(zip(exe.signature.outputs, outputs, strict=True)):
        where = ""
        if out_dir is not None:
            target = out_dir / f"output_{i}.npy"
            np.save(target, arr, allow_pickle=False)
            where = f" -> {target}"
        if not args.quiet:
            print(f"output #{i} {spec.name!r}: {arr.dtype.name} {tuple(arr.shape)}{where}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``disc-run`` and ``python -m disc_runtime``; returns the exit code."""
    try:
        args = _parser().parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # usage error, --help, --version: return instead of exiting
        return exc.code if isinstance(exc.code, int) else 2
    try:
        _run(args)
    except DiscRuntimeError as exc:
        print(f"{PROG}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if RUNTIME_OPTIONS.value("debug"):
            traceback.print_exc()
        print(
            f"{PROG}: internal error: {type(exc).__name__}: {_one_line(exc)} "
            "(set DISC_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return 1
    return 0


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
