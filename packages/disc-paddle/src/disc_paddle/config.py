"""One object for every disc-paddle option; environment variables override the defaults.

Precedence (lowest to highest): the dataclass defaults, ``DISC_*`` environment variables,
and the keyword arguments given to :func:`disc_paddle.compile` or :func:`disc_paddle.enable`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from disc_core.options import bridge_table, check_bridge_fields, resolve_config
from disc_runtime.options import Option

__all__ = ["DiscConfig", "ENV_VARS", "OPTIONS"]

#: every disc-paddle option: the shared bridge fields it offers (docs/configuration.md)
OPTIONS = bridge_table("disc-paddle", shared=(
    "min_cluster_size", "excluded_ops", "report_path", "accuracy_check", "target",
), own=(
    Option("blas", "DISC_PADDLE_BLAS", "paddle",
           "The GEMM library of DISC's f32 GEMMs inside Paddle: `paddle` (Paddle's own "
           "bundled MKL, `cblas_sgemm` of libmklml_intel.so, so compiled and eager GEMMs "
           "run the same code) or `disc` (disc-runtime's choice, "
           "`disc_runtime.native.blas_choice()`). `paddle` falls back to `disc` when "
           "Paddle has no such library.", env_only=True),
), doc="`disc_paddle.compile(model, **options)` / `disc_paddle.enable(**options)`.")

#: option name -> environment variable that overrides its default
ENV_VARS = {name: var for name, var in OPTIONS.env_vars().items()
            if not OPTIONS[name].env_only}
_D = {o.name: o.default for o in OPTIONS}


@dataclass(frozen=True)
class DiscConfig:
    """Options of the disc-paddle bridge.

    Attributes:
        min_cluster_size: clusters with fewer pd_ops stay in Paddle (a launch costs a few
            microseconds; one or two cheap ops are not worth it).
        excluded_ops: PIR op names (``"pd_op.matmul"`` or ``"matmul"``) never compiled.
        report_path: write the coverage report as JSON here at exit (``{pid}`` and
            ``{rank}`` expand).
        accuracy_check: the accuracy guard (``True``, ``"first=N,every=K"``, an
            ``AccuracyPolicy``; normalized to a policy or None): on the first calls of each
            signature and every Kth after, the function runs programs that keep each
            cluster's Paddle ops next to its launch and compare (forward and backward,
            with the dtype's tolerances); a mismatch hands that cluster to Paddle for good,
            with a warning and an ``accuracy_mismatch`` report entry, and the call returns
            Paddle's values.
        target: "auto" (native code when a C compiler exists), "native" or "reference"
            (Paddle runs clusters through the launch op, which runs native modules only:
            with "reference" every cluster stays in Paddle).
    """

    min_cluster_size: int = _D["min_cluster_size"]
    excluded_ops: frozenset[str] = field(default_factory=lambda: _D["excluded_ops"])
    report_path: str | None = _D["report_path"]
    accuracy_check: Any = _D["accuracy_check"]
    target: str = _D["target"]

    def __post_init__(self) -> None:
        check_bridge_fields(self)

    @classmethod
    def resolve(cls, options: Mapping[str, Any] | None = None,
                environ: Mapping[str, str] | None = None) -> DiscConfig:
        """Defaults, then environment overrides, then ``options``."""
        return resolve_config(cls, OPTIONS, options, environ, "disc-paddle")
