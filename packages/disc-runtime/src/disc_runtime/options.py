"""Declared configuration: every option of a layer in one table (name, environment
variable, default, parser, doc).

Each layer declares its table where it reads it: :data:`RUNTIME_OPTIONS` here,
disc-core's and the bridges' shared fields in ``disc_core.options``, each bridge's own in
its ``config`` module. Code reads an option through its table (:meth:`OptionTable.value`),
never ``os.environ`` directly, so the tables are the complete list that
``docs/configuration.md`` is generated from (:func:`markdown`) and checked against.

Precedence, everywhere: the declared default, then the environment variable when it is set
and not empty, then (for options a caller can pass from code) the caller's value.

This module imports only the standard library: disc-core and the bridges read their tables
at import time, which must not cost numpy.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["RUNTIME_OPTIONS", "Option", "OptionTable", "markdown", "parse_bool", "parse_flag",
           "parse_int", "parse_names", "parse_not_zero", "parse_text", "split_names"]

_TRUE, _FALSE = ("1", "true", "yes"), ("0", "false", "no")


def split_names(text: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]`` (excluded-op lists in options and env vars)."""
    return [s.strip() for s in text.split(",") if s.strip()]


def parse_bool(raw: str) -> bool:
    """0/1/true/false/yes/no, any case."""
    if raw.lower() not in _TRUE + _FALSE:
        raise ValueError("expected 0/1/true/false")
    return raw.lower() in _TRUE


def parse_flag(raw: str) -> bool:
    """Set to anything (not empty): on."""
    return bool(raw)


def parse_int(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError("expected an integer") from None


def parse_names(raw: str) -> frozenset[str]:
    """Comma-separated names."""
    return frozenset(split_names(raw))


def parse_text(raw: str) -> str:
    return raw


def parse_not_zero(raw: str) -> bool:
    """``0``: off; anything else: on (a switch that is on unless turned off)."""
    return raw != "0"


_KINDS: dict[Callable[[str], Any], str] = {
    parse_bool: "bool", parse_flag: "flag", parse_int: "int", parse_names: "names",
    parse_text: "text", parse_not_zero: "bool (`0` off)",
}


@dataclass(frozen=True)
class Option:
    """One setting: ``name`` as code passes it, ``env`` the variable that sets it (None:
    code only), its ``default``, how the variable's text is parsed, and what it does.

    ``env_only``: no API takes it from code (a machine or deployment setting)."""

    name: str
    env: str | None
    default: Any
    doc: str
    parse: Callable[[str], Any] = parse_text
    env_only: bool = False

    @property
    def kind(self) -> str:
        """The value's type as the docs show it: the parser's (bool, flag, int, names,
        text), or the default's Python type for an option code alone sets."""
        if self.env is None and self.default is not None:
            return type(self.default).__name__
        return _KINDS.get(self.parse, getattr(self.parse, "__name__", "text"))

    def from_env(self, environ: Mapping[str, str] | None = None) -> tuple[bool, Any]:
        """(True, parsed value) when the variable is set and not empty, else (False,
        default). A value the parser rejects is a ValueError naming the variable."""
        if self.env is None:
            return False, self.default
        raw = (os.environ if environ is None else environ).get(self.env)
        if not raw:
            return False, self.default
        try:
            return True, self.parse(raw)
        except ValueError as exc:
            raise ValueError(f"{self.env}={raw!r}: {exc}") from None

    def value(self, environ: Mapping[str, str] | None = None) -> Any:
        """The environment's value, else the default."""
        return self.from_env(environ)[1]


@dataclass(frozen=True)
class OptionTable:
    """The options of one layer (``disc-runtime``, ``disc-core``, a bridge...)."""

    layer: str
    options: tuple[Option, ...]
    doc: str = ""

    def __post_init__(self) -> None:
        names = [o.name for o in self.options]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.layer}: duplicate option names in {names}")

    def __getitem__(self, name: str) -> Option:
        for option in self.options:
            if option.name == name:
                return option
        raise KeyError(f"{self.layer} has no option {name!r}")

    def __iter__(self):
        return iter(self.options)

    def __contains__(self, name: object) -> bool:
        return any(o.name == name for o in self.options)

    def value(self, name: str, environ: Mapping[str, str] | None = None) -> Any:
        """Option ``name``: its environment variable's value, else its default."""
        return self[name].value(environ)

    def env_vars(self) -> dict[str, str]:
        """option name -> environment variable, for the options that have one."""
        return {o.name: o.env for o in self.options if o.env is not None}

    def extend(self, layer: str, options: Iterable[Option], doc: str = "",
               only: Iterable[str] | None = None) -> OptionTable:
        """A table for ``layer``: this table's options (those named in ``only``, in this
        table's order, when given) followed by ``options``."""
        keep = None if only is None else set(only)
        base = tuple(o for o in self.options if keep is None or o.name in keep)
        return OptionTable(layer, base + tuple(options), doc)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(option: Option) -> str:
    d = option.default
    if d is None:
        return "unset"
    if isinstance(d, bool) and option.env is None:
        return f"`{d}`"
    if isinstance(d, bool):
        return "`1`" if d else "`0`"
    if isinstance(d, frozenset):
        return "empty" if not d else f"`{','.join(sorted(d))}`"
    return f"`{d}`" if str(d) else "empty"


def markdown(tables: Iterable[OptionTable]) -> str:
    """The tables as Markdown: one section per layer, one row per option."""
    out: list[str] = []
    for table in tables:
        out.append(f"### {table.layer}\n")
        if table.doc:
            out.append(table.doc.strip() + "\n")
        out.append("| option | environment variable | default | type | what it does |")
        out.append("|---|---|---|---|---|")
        for o in table.options:
            name = "(environment only)" if o.env_only else f"`{o.name}`"
            env = f"`{o.env}`" if o.env else "(code only)"
            out.append(f"| {name} | {env} | {_default(o)} | {o.kind} | {_cell(o.doc)} |")
        out.append("")
    return "\n".join(out)


RUNTIME_OPTIONS = OptionTable("disc-runtime", (
    Option("cache_dir", "DISC_CACHE_DIR", None,
           "Base directory of the compile cache (artifacts in its `v1/`, plus what DISC keeps "
           "beside them); unset: `$XDG_CACHE_HOME/disc`, else `~/.cache/disc`.",
           env_only=True),
    Option("cache_lock_timeout", "DISC_CACHE_LOCK_TIMEOUT", 600,
           "Seconds a process waits for another one (a rank of the same job, say) that is "
           "building the same cache entry, before building it itself; `0`: never wait.",
           parse=parse_int, env_only=True),
    Option("blas_lib", "DISC_BLAS_LIB", None,
           "A shared library exporting ILP64 `sgemm_64_`/`dgemm_64_` (e.g. oneMKL's "
           "`libmkl_rt.so`) for every compiled GEMM, instead of numpy's OpenBLAS, a "
           "bridge's preferred BLAS and oneDNN.", env_only=True),
    Option("blas_tune", "DISC_BLAS_TUNE", True,
           "`0`: use the BLAS a bridge prefers without timing it against numpy's OpenBLAS "
           "(and oneDNN) first; any other value times them once per machine.",
           parse=parse_not_zero, env_only=True),
    Option("debug", "DISC_DEBUG", False,
           "Set (to anything): `disc` and `disc-run` print the traceback of an internal error.",
           parse=parse_flag, env_only=True),
), doc="Read by the runtime (and the `disc` / `disc-run` commands) whatever bridge is used.")
