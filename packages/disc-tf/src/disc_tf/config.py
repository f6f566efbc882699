"""One object for every disc-tf option; environment variables override the defaults.

Precedence (lowest to highest): the dataclass defaults, ``DISC_*`` environment variables,
and the keyword arguments given to :func:`disc_tf.enable` or :func:`disc_tf.function`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from disc_core.options import bridge_table, check_bridge_fields, resolve_config
from disc_runtime.options import Option

__all__ = ["DiscConfig", "ENV_VARS", "OPTIONS"]

EXECUTIONS = ("auto", "custom_op", "numpy_function")

#: every disc-tf option: the shared bridge fields it offers, then its own (the DiscConfig
#: fields below take their defaults from here; docs/configuration.md lists them)
OPTIONS = bridge_table("disc-tf", shared=(
    "min_cluster_size", "excluded_ops", "report_path", "accuracy_check", "target", "profile",
), own=(
    Option("execution", "DISC_TF_EXECUTION", "auto",
           "How a cluster runs inside TensorFlow: `custom_op` (the DiscLaunch kernel), "
           "`numpy_function` (a `tf.numpy_function` calling the runtime), or `auto` (the "
           "custom op when it builds and the target is native)."),
    Option("override_xla", None, True,
           "Functions declared `jit_compile=True` go through DISC instead of XLA while "
           "enabled."),
    Option("cxx", "DISC_CXX", None,
           "The C++ compiler that builds the DiscLaunch custom op (it must exist: a named "
           "compiler is never replaced); unset: `$CXX`, else c++, g++, clang++.",
           env_only=True),
), doc="`disc_tf.enable(**options)` / `disc_tf.function(fn, **options)`.")

#: option name -> environment variable that overrides its default
ENV_VARS = {name: var for name, var in OPTIONS.env_vars().items()
            if not OPTIONS[name].env_only}
_D = {o.name: o.default for o in OPTIONS}


@dataclass(frozen=True)
class DiscConfig:
    """Options of the disc-tf bridge.

    Attributes:
        min_cluster_size: clusters with fewer TF ops stay in TensorFlow (a launch costs a
            few microseconds; one or two cheap ops are not worth it).
        excluded_ops: TF op types (``"MatMul"``) never compiled.
        report_path: write the coverage report as JSON here at exit (``{pid}`` and
            ``{rank}`` expand).
        accuracy_check: the accuracy guard (``True``, ``"first=N,every=K"``, an
            ``AccuracyPolicy``; normalized to a policy or None): the launch runs the
            cluster's TF ops too on the first calls and every Kth after, compares with the
            dtype's tolerances, and on a mismatch runs the TF ops from then on, with a
            warning and an ``accuracy_mismatch`` report entry.
        target: "auto" (native code when a C compiler exists), "native" or "reference".
        execution: how a cluster runs inside TensorFlow: "custom_op" (the DiscLaunch
            kernel: zero-copy inputs, outputs from TF's allocator), "numpy_function" (a
            ``tf.numpy_function`` calling the runtime from Python; works with any engine),
            or "auto" (the custom op when it builds and the target is native).
        override_xla: functions declared ``jit_compile=True`` (Keras does this by default
            when a model supports XLA) go through DISC instead of XLA while enabled.
        profile: time every kernel and library call (GEMM) of every compiled cluster, on
            both execution paths; the report's clusters then carry a ``profile`` (the
            hottest steps first in its renderings, the module's host work as ``host``).
            About 20 ns per step and call: leave it off in production.
    """

    min_cluster_size: int = _D["min_cluster_size"]
    excluded_ops: frozenset[str] = field(default_factory=lambda: _D["excluded_ops"])
    report_path: str | None = _D["report_path"]
    accuracy_check: Any = _D["accuracy_check"]
    target: str = _D["target"]
    execution: str = _D["execution"]
    override_xla: bool = _D["override_xla"]
    profile: bool = _D["profile"]

    def __post_init__(self) -> None:
        check_bridge_fields(self)
        if self.execution not in EXECUTIONS:
            raise ValueError(f"execution must be one of {', '.join(EXECUTIONS)}, got "
                             f"{self.execution!r}")

    @classmethod
    def resolve(cls, options: Mapping[str, Any] | None = None,
                environ: Mapping[str, str] | None = None) -> DiscConfig:
        """Defaults, then environment overrides, then ``options``."""
        return resolve_config(cls, OPTIONS, options, environ, "disc-tf")
