"""The bridge kit: what every framework bridge (disc-torch, disc-tf, disc-paddle) shares.

A bridge brings its capture (how the framework's graph is obtained), its converter
functions and its execution glue; everything else a bridge needs is here, once:

* :mod:`.table`: the converter table type (``ConverterTable``, ``Converter``): one
  decorator registering ``fn`` for framework ops with the dtypes it takes and an optional
  attribute ``check``.
* :mod:`.errors` and :mod:`.reasons`: ``ConversionError`` (a converter cannot express a
  node; the node stays in the framework) with a reason code from one shared vocabulary
  (the report's ``ReasonCode``), plus bridge-specific codes mapped onto it.
* :mod:`.context`: ``LoweringContext``, the base of every bridge's lowering context (the
  graph under construction, casts, reshapes, constants, broadcasting).
* :mod:`.convert`: the lowering wrapper: look a converter up, run it, and check its
  results against what the framework recorded (``Expected`` dtype and dims).
* :mod:`.known`: known values (folded shape computations: ints and symbolic sizes in an
  object array), built and read the same way by every bridge.
* :mod:`.broadcast`: the ONE implicit-broadcasting rule (numpy's, with symbolic dims
  left to a run-time check instead of assumed).
* :mod:`.verdict`: a node's verdict for clustering: the table's checks (``precheck``: a
  converter exists, takes the dtypes, accepts the attributes) and a trial conversion of
  the node alone (``trial``), after each bridge's own framework-specific exclusions.
* :mod:`.launch`: the Python side of a framework's launch op (the custom op that runs a
  module inside the framework's executor): build headers, atomic publication, and
  ``LaunchLibrary`` over the bookkeeping entry points of ``disc_launch_support.h``.
* :mod:`.attempts`: lowering and compiling a graph's clusters (in parallel, a cluster the
  native engine refuses halved and retried) and recording each outcome in the report.
* :mod:`.selection`: which built clusters may run compiled (``DISC_BISECT_CLUSTERS``, by
  compile-cache key) and the input dump of ``DISC_BISECT_DUMP``: what ``disc bisect``
  drives every bridge with.
* :mod:`.compilers`: the per-bridge registry of process-wide compilers and their
  compile counts.
* :mod:`.fallback`: the fallback warning (``warn_once``) and the bookkeeping of a cluster
  that runs in its framework (report entry plus one warning per reason).

Names are imported on first use (PEP 562), as in :mod:`disc_core`: a bridge importing the
fallback warning does not pay for the compiler.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "BroadcastError": "broadcast", "broadcast_all": "broadcast",
    "broadcast_dim": "broadcast", "broadcast_shape": "broadcast", "broadcast_to": "broadcast",
    "CompilerRegistry": "compilers", "LoweringContext": "context",
    "Expected": "convert", "as_results": "convert", "check_count": "convert",
    "check_result": "convert", "run_converter": "convert",
    "ConversionError": "errors",
    "DiscFallbackWarning": "fallback", "FallbackNotice": "fallback", "warn_once": "fallback",
    "ReasonCode": "reasons", "reason_of": "reasons", "register_reason": "reasons",
    "report_code": "reasons",
    "Converter": "table", "ConverterTable": "table",
    "precheck": "verdict", "trial": "verdict",
    "LaunchLibrary": "launch", "publish": "launch", "write_build_headers": "launch",
    "as_object_array": "known", "known_array": "known", "normalize": "known",
    "symbols_of": "known",
    "Attempt": "attempts", "compile_clusters": "attempts", "compile_lowered": "attempts",
    "record_attempts": "attempts", "record_outcome": "attempts",
    "split_clustering": "attempts",
    "admit": "selection", "allows": "selection", "dump_inputs": "selection",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'disc_core.bridge' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
