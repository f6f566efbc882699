"""One object for every disc-torch option; environment variables override it.

Precedence (lowest to highest): the dataclass defaults, ``DISC_*`` environment variables,
and the keyword arguments given to :func:`disc_torch.optimize` or ``torch.compile(...,
options={...})``. Environment variables exist so that a deployed script can be tuned
without editing it; code should prefer the options.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from disc_core.options import resolve_options, split_names

__all__ = ["DiscConfig", "ENV_VARS"]

#: option name -> environment variable that overrides it
ENV_VARS = {
    "min_cluster_size": "DISC_MIN_CLUSTER_SIZE",
    "excluded_ops": "DISC_EXCLUDE_OPS",
    "report_path": "DISC_REPORT",
    "accuracy_check": "DISC_ACCURACY_CHECK",
    "target": "DISC_TARGET",
    "profile": "DISC_PROFILE",
    "cache_graphs": "DISC_CACHE_GRAPHS",
}


@dataclass(frozen=True)
class DiscConfig:
    """Options of the disc-torch backend.

    Attributes:
        min_cluster_size: clusters with fewer ATen ops run eagerly (a compiled call costs
            a few microseconds; one or two cheap ops are not worth it).
        excluded_ops: ATen op names (``"aten.mm"`` or ``"aten.mm.default"``) never compiled.
        report_path: write the coverage report as JSON here at exit (``{pid}`` expands).
        accuracy_check: run every compiled cluster's first 3 calls eagerly too and compare;
            a mismatch falls the cluster back to eager with a warning and a report entry.
        rtol, atol: tolerances of the accuracy check.
        target: "auto" (native code when a C compiler exists), "native" or "reference".
        dynamic: ask dynamo for dynamic shapes (one graph per rank, not per shape).
        specialize_floats: ``optimize`` traces Python floats as constants (halves tracing
            time; a float argument that changes every call would recompile).
        profile: time every kernel and library call (GEMM) of every compiled cluster; the
            report's clusters then carry a ``profile`` (the hottest steps first in its
            renderings). Costs a clock read per step (tens of ns): for finding where time
            goes, not for production.
        cache_graphs: ``optimize`` keeps what it traced (dynamo's transformed code and
            guards, aot_autograd's graphs, DISC's partition) in the compile cache's
            directory, so a new process with the same model and code starts without
            tracing (:mod:`disc_torch.precompile`). Objects dynamo guards by identity
            are checked by DISC on every call (:mod:`disc_torch.identity`); one that
            changes turns the cache off for that callable. ``torch.compile(...,
            backend="disc")`` does not get this cache.
    """

    min_cluster_size: int = 2
    excluded_ops: frozenset[str] = field(default_factory=frozenset)
    report_path: str | None = None
    accuracy_check: bool = False
    rtol: float = 1e-4
    atol: float = 1e-5
    target: str = "auto"
    dynamic: bool = True
    specialize_floats: bool = True
    profile: bool = False
    cache_graphs: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.excluded_ops, str):
            object.__setattr__(self, "excluded_ops", frozenset(split_names(self.excluded_ops)))
        else:
            object.__setattr__(self, "excluded_ops", frozenset(self.excluded_ops))
        if not isinstance(self.min_cluster_size, int) or self.min_cluster_size < 1:
            raise ValueError(f"min_cluster_size must be an int >= 1, got {self.min_cluster_size!r}")
        if self.target not in ("auto", "native", "reference"):
            raise ValueError(f"target must be 'auto', 'native' or 'reference', got {self.target!r}")

    @classmethod
    def resolve(cls, options: Mapping[str, Any] | None = None,
                environ: Mapping[str, str] | None = None) -> DiscConfig:
        """Defaults, then environment overrides, then ``options``."""
        return resolve_options(cls, options, environ, ENV_VARS, "disc-torch")

    def excludes(self, op_name: str) -> bool:
        """``op_name`` like ``aten.mm.default``; a packet name (``aten.mm``) excludes all."""
        if op_name in self.excluded_ops:
            return True
        return op_name.rsplit(".", 1)[0] in self.excluded_ops
