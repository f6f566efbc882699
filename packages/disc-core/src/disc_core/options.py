"""disc-core's option table, the option fields every bridge shares, and how a bridge's
config dataclass is resolved from them.

Precedence (lowest to highest): the declared defaults, ``DISC_*`` environment variables
(so a deployed script can be tuned without editing it), and keyword options from code. An
environment value is parsed by its option's parser (:class:`disc_runtime.options.Option`);
:func:`resolve_options`, the older form, parses by the type of the field's default: bool,
int, a set of names (comma-separated), or text.

The tables here and in ``disc_runtime.options`` and the bridges' ``config`` modules are the
complete list of DISC's settings: ``docs/configuration.md`` is generated from them
(:func:`configuration_markdown`), and a test fails when code reads a ``DISC_*`` variable
that no table declares.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, TypeVar

from disc_runtime.options import (
    Option,
    OptionTable,
    parse_bool,
    parse_int,
    parse_names,
    split_names,
)

__all__ = ["BRIDGE_OPTIONS", "CORE_OPTIONS", "bridge_table", "check_bridge_fields",
           "resolve_config", "resolve_options", "split_names"]

T = TypeVar("T")

_TRUE, _FALSE = ("1", "true", "yes"), ("0", "false", "no")

def _accuracy(text: str) -> Any:
    """``DISC_ACCURACY_CHECK``'s value as an accuracy policy (None: off)."""
    from .bridge.accuracy import parse_accuracy_check

    return parse_accuracy_check(text)


_accuracy.__name__ = "`on`, `off` or `first=N,every=K`"  # the type docs/configuration.md shows

CORE_OPTIONS = OptionTable("disc-core", (
    Option("cc", "DISC_CC", None,
           "The C compiler the native engine builds modules with; unset: `$CC`, else the "
           "first of cc, gcc, clang on `PATH` (none: the reference interpreter, warned once). "
           "A DISC_CC that does not run is never replaced by another compiler: the "
           "interpreter runs, with a warning naming it.",
           env_only=True),
    Option("compile_units", "DISC_COMPILE_UNITS", None,
           "Most translation units a large module is split into and compiled in parallel; "
           "`1` turns splitting off. Unset: the usable CPUs less the C compilers this "
           "process runs, less one when the caller goes on working.",
           parse=parse_int, env_only=True),
    Option("report", "DISC_REPORT", None,
           "Write the coverage report of every bridge in this process as JSON to this path "
           "at exit (`{pid}` expands to the process id, `{rank}` to the process's rank in a "
           "distributed job: `RANK`, `PADDLE_TRAINER_ID` or `TF_CONFIG`'s task, `0` "
           "outside one). A bridge's `report_path` option sets the same.", env_only=True),
    Option("bisect_clusters", "DISC_BISECT_CLUSTERS", None,
           "A file listing the compile-cache keys (one per line, `#` comments) of the only "
           "clusters every bridge may run compiled; any other cluster stays in the "
           "framework, reported as `excluded_by_user`. An empty file excludes every "
           "cluster. `disc bisect` sets it (docs/bisect.md); unset: no cluster is left out.",
           env_only=True),
    Option("bisect_dump", "DISC_BISECT_DUMP", None,
           "A directory: on its first call, every allowed cluster whose bridge runs it from "
           "Python (disc-torch) saves its inputs (`<key>/input_<i>.npy`) and the "
           "framework's outputs (`<key>/framework_<i>.npy`) there, for a standalone "
           "reproducer (`disc bisect` sets it).", env_only=True),
    Option("fused_attention", "DISC_FUSED_ATTENTION", True,
           "Fused attention: the optimize stage rewrites softmax(Q Kᵀ·scale + mask) V into "
           "the blocked `attention` op (scores never in memory); disc-torch converts torch's "
           "CPU flash attention to it and its backward, and rewrites hand-written causal "
           "attention to SDPA before autograd; `0` keeps the unfused ops (GEMMs and softmax "
           "kernels; for comparisons).", parse=parse_bool, env_only=True),
    Option("onednn_conv", "DISC_ONEDNN_CONV", True,
           "f32 convolutions run as oneDNN convolution primitives (forward with the bias "
           "add and ReLU after them fused as post-ops, filter gradients as backward "
           "weights) when oneDNN is installed (`disc-runtime[onednn]`); `0` keeps the "
           "im2col + GEMM lowering.",
           parse=parse_bool, env_only=True),
    Option("gemm_fusion", "DISC_GEMM_FUSION", True,
           "GEMM prologues and epilogues: a kernel that makes a GEMM's operand or consumes "
           "its output runs inside the GEMM step, on blocks of rows while they are in "
           "cache; `0` runs every GEMM as one library call and those kernels as steps of "
           "their own (for comparisons).",
           parse=parse_bool, env_only=True),
), doc="Read by the compiler whatever bridge is used.")

#: The option fields the bridges share: each bridge's config table takes the ones it offers
#: (:func:`bridge_table`), with the same variable, default and parsing.
BRIDGE_OPTIONS = OptionTable("bridges (shared fields)", (
    Option("min_cluster_size", "DISC_MIN_CLUSTER_SIZE", 2,
           "Clusters with fewer framework ops stay in the framework (a compiled call costs "
           "a few microseconds; one or two cheap ops are not worth it).", parse=parse_int),
    Option("excluded_ops", "DISC_EXCLUDE_OPS", frozenset(),
           "Framework op names never compiled (comma-separated in the variable).",
           parse=parse_names),
    Option("report_path", "DISC_REPORT", None,
           "Write the coverage report as JSON here at exit (`{pid}` and `{rank}` expand)."),
    Option("accuracy_check", "DISC_ACCURACY_CHECK", None,
           "The accuracy guard: run compiled clusters' framework ops alongside and compare "
           "the outputs with tolerances that suit their dtype; a mismatch hands the cluster "
           "back to the framework with a warning and an `accuracy_mismatch` report entry. "
           "`on` checks the first 3 calls of every cluster, then every 1000th; "
           "`first=N,every=K` sets both (`every=0`: never after the first N); `off`.",
           parse=_accuracy),
    Option("target", "DISC_TARGET", "auto",
           "`auto` (native code when a C compiler exists), `native` or `reference` (the "
           "interpreter)."),
    Option("profile", "DISC_PROFILE", False,
           "Time every kernel and library call of every compiled cluster; the coverage "
           "report lists them per cluster, hottest first.", parse=parse_bool),
), doc="Fields every bridge's config takes from this one declaration (each bridge lists "
       "which it offers below).")


def bridge_table(layer: str, shared: tuple[str, ...], own: tuple[Option, ...] = (),
                 doc: str = "") -> OptionTable:
    """A bridge's table: the ``shared`` fields of :data:`BRIDGE_OPTIONS` it offers, then
    its ``own`` options."""
    missing = set(shared) - {o.name for o in BRIDGE_OPTIONS}
    if missing:
        raise KeyError(f"{layer}: no shared bridge option(s) {sorted(missing)}")
    return BRIDGE_OPTIONS.extend(layer, own, doc, only=shared)


def check_bridge_fields(config: Any) -> None:
    """Normalize and check the shared fields a bridge's frozen config dataclass has
    (``excluded_ops`` as a frozenset, from a comma-separated string too;
    ``min_cluster_size`` an int >= 1; ``target`` one of the three): every bridge's
    ``__post_init__`` starts here."""
    if hasattr(config, "excluded_ops"):
        ops = config.excluded_ops
        ops = split_names(ops) if isinstance(ops, str) else ops
        object.__setattr__(config, "excluded_ops", frozenset(ops))
    size = getattr(config, "min_cluster_size", 1)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"min_cluster_size must be an int >= 1, got {size!r}")
    if hasattr(config, "accuracy_check"):
        from .bridge.accuracy import parse_accuracy_check

        object.__setattr__(config, "accuracy_check",
                           parse_accuracy_check(config.accuracy_check))
    target = getattr(config, "target", "auto")
    if target not in ("auto", "native", "reference"):
        raise ValueError(f"target must be 'auto', 'native' or 'reference', got {target!r}")


def resolve_config(cls: type[T], table: OptionTable, options: Mapping[str, Any] | None,
                   environ: Mapping[str, str] | None, package: str) -> T:
    """An instance of the dataclass ``cls``: its defaults, then each option of ``table``
    that is a field of ``cls`` and whose variable is set (not empty) in ``environ``
    (default ``os.environ``), parsed by the option, then ``options``; an unknown option is
    a TypeError naming ``package``'s options."""
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    for option in table:
        if option.name in fields:
            found, value = option.from_env(environ)
            if found:
                values[option.name] = value
    return _with_options(cls, values, options, fields, package)


def _with_options(cls: type[T], values: dict[str, Any], options: Mapping[str, Any] | None,
                  fields: set[str], package: str) -> T:
    for name, value in (options or {}).items():
        if name not in fields:
            raise TypeError(f"unknown {package} option {name!r}; options are "
                            f"{', '.join(sorted(fields))}")
        values[name] = value
    return cls(**values)


def resolve_options(cls: type[T], options: Mapping[str, Any] | None,
                    environ: Mapping[str, str] | None, env_vars: Mapping[str, str],
                    package: str) -> T:
    """An instance of the dataclass ``cls``: defaults, then the non-empty variables of
    ``env_vars`` (option name -> variable) found in ``environ`` (default ``os.environ``),
    then ``options``; an unknown option is a TypeError naming ``package``'s options."""
    environ = os.environ if environ is None else environ
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    for name, var in env_vars.items():
        raw = environ.get(var)
        if raw:
            values[name] = _parse(fields[name], var, raw)
    return _with_options(cls, values, options, set(fields), package)


def _parse(f: dataclasses.Field, var: str, raw: str) -> Any:
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    if isinstance(default, bool):
        if raw.lower() not in _TRUE + _FALSE:
            raise ValueError(f"{var}={raw!r}: expected 0/1/true/false")
        return raw.lower() in _TRUE
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"{var}={raw!r}: expected an integer") from None
    if isinstance(default, frozenset):
        return frozenset(split_names(raw))
    return raw


def configuration_markdown(*bridge_tables: OptionTable) -> str:
    """The generated part of docs/configuration.md: the runtime's, disc-core's and the
    shared bridge tables, then ``bridge_tables`` (each bridge's own)."""
    from disc_runtime.options import RUNTIME_OPTIONS, markdown

    return markdown([RUNTIME_OPTIONS, CORE_OPTIONS, BRIDGE_OPTIONS, *bridge_tables])
