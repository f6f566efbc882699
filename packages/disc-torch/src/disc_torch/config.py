"""One object for every disc-torch option; environment variables override it.

Precedence (lowest to highest): the dataclass defaults, ``DISC_*`` environment variables,
and the keyword arguments given to :func:`disc_torch.optimize` or ``torch.compile(...,
options={...})``. Environment variables exist so that a deployed script can be tuned
without editing it; code should prefer the options.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from disc_core.options import bridge_table, check_bridge_fields, resolve_config
from disc_runtime.options import Option, parse_bool

__all__ = ["DiscConfig", "ENV_VARS", "OPTIONS"]

#: every disc-torch option: the shared bridge fields it offers, then its own (the
#: DiscConfig fields below take their defaults from here; docs/configuration.md lists them)
OPTIONS = bridge_table("disc-torch", shared=(
    "min_cluster_size", "excluded_ops", "report_path", "accuracy_check", "target", "profile",
), own=(
    Option("rtol", None, None, "Relative tolerance of the accuracy guard; unset: the "
           "output dtype's (1e-4 for float32, 1e-7 for float64, 1e-2 for float16)."),
    Option("atol", None, None, "Absolute tolerance of the accuracy guard, scaled by the "
           "output's largest magnitude; unset: the output dtype's (1e-5 for float32)."),
    Option("dynamic", None, True,
           "Ask dynamo for dynamic shapes (one graph per rank, not per shape)."),
    Option("specialize_floats", None, True,
           "`optimize` traces Python floats as constants (halves tracing time; a float "
           "argument that changes every call would recompile)."),
    Option("skip_logging_calls", "DISC_SKIP_LOGGING_CALLS", True,
           "`optimize` skips `logging.Logger` calls that only emit a message (`warning`, "
           "`info`, transformers' `warning_once`...) inside the code it compiles, as "
           "torch.export does, naming each in one warning; off: each splits the graph.",
           parse=parse_bool),
    Option("cache_graphs", "DISC_CACHE_GRAPHS", True,
           "`optimize` keeps what it traced in the compile cache's directory, so a new "
           "process with the same model and code starts without tracing.",
           parse=parse_bool),
    Option("eager_random", "DISC_EAGER_RANDOM", False,
           "Dropout runs in torch with eager's random stream, so results match eager draw "
           "for draw (as Inductor's `fallback_random`); off: its numbers are drawn from the "
           "shape and the mask compiles with its neighbours (a different stream, fewer and "
           "larger clusters).",
           parse=parse_bool),
), doc="`disc_torch.optimize(model, **options)` / `torch.compile(model, backend=\"disc\", "
       "options={...})`.")

#: option name -> environment variable that overrides it
ENV_VARS = OPTIONS.env_vars()
_D = {o.name: o.default for o in OPTIONS}


@dataclass(frozen=True)
class DiscConfig:
    """Options of the disc-torch backend.

    Attributes:
        min_cluster_size: clusters with fewer ATen ops run eagerly (a compiled call costs
            a few microseconds; one or two cheap ops are not worth it).
        excluded_ops: ATen op names (``"aten.mm"`` or ``"aten.mm.default"``) never compiled.
        report_path: write the coverage report as JSON here at exit (``{pid}`` and
            ``{rank}`` expand).
        accuracy_check: the accuracy guard (``True``, ``"first=N,every=K"``, an
            ``AccuracyPolicy``): run compiled clusters' ATen ops eagerly alongside on the
            first calls and every Kth after, compare with the dtype's tolerances; a
            mismatch falls the cluster back to eager with a warning and an
            ``accuracy_mismatch`` report entry. Normalized to a policy or None.
        rtol, atol: tolerances of the accuracy guard (None: the output dtype's).
        target: "auto" (native code when a C compiler exists), "native" or "reference".
        dynamic: ask dynamo for dynamic shapes (one graph per rank, not per shape).
        specialize_floats: ``optimize`` traces Python floats as constants (halves tracing
            time; a float argument that changes every call would recompile).
        skip_logging_calls: ``optimize`` skips the ``logging.Logger`` calls that only emit
            a message inside the code it compiles (``torch.export`` does the same), naming
            each skipped call in one warning; off, each splits the graph there, as in
            ``torch.compile`` (:mod:`disc_torch.logging_calls`).
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
        eager_random: dropout is not decomposed: it runs in torch and draws eager's random
            numbers, so a compiled training step matches eager's exactly, dropout and all
            (Inductor's ``fallback_random``). Off (the default), dropout's numbers come
            from ``rand(shape)`` (:mod:`disc_torch.dropout_decomposition`) and the graph is
            not cut at every dropout.
    """

    min_cluster_size: int = _D["min_cluster_size"]
    excluded_ops: frozenset[str] = field(default_factory=lambda: _D["excluded_ops"])
    report_path: str | None = _D["report_path"]
    accuracy_check: Any = _D["accuracy_check"]
    rtol: float | None = _D["rtol"]
    atol: float | None = _D["atol"]
    target: str = _D["target"]
    dynamic: bool = _D["dynamic"]
    specialize_floats: bool = _D["specialize_floats"]
    skip_logging_calls: bool = _D["skip_logging_calls"]
    profile: bool = _D["profile"]
    cache_graphs: bool = _D["cache_graphs"]
    eager_random: bool = _D["eager_random"]

    def __post_init__(self) -> None:
        check_bridge_fields(self)

    def accuracy_policy(self) -> Any:
        """The accuracy guard's policy with this config's tolerances (None: off)."""
        policy = self.accuracy_check
        if policy is None or (self.rtol is None and self.atol is None):
            return policy
        return dataclasses.replace(policy, rtol=self.rtol, atol=self.atol)

    @classmethod
    def resolve(cls, options: Mapping[str, Any] | None = None,
                environ: Mapping[str, str] | None = None) -> DiscConfig:
        """Defaults, then environment overrides, then ``options``."""
        return resolve_config(cls, OPTIONS, options, environ, "disc-torch")

    def excludes(self, op_name: str) -> bool:
        """``op_name`` like ``aten.mm.default``; a packet name (``aten.mm``) excludes all."""
        if op_name in self.excluded_ops:
            return True
        return op_name.rsplit(".", 1)[0] in self.excluded_ops
