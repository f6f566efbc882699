"""Where a node ran and why it fell back: the closed vocabularies of the coverage report.

Their own module because both the report model and its summaries use them, and the model's
``summary()`` calls into the summary module: with the codes in ``model``, the two imported
each other.
"""

from __future__ import annotations

import enum

__all__ = ["CLUSTER_FAILURES", "CLUSTER_FALLBACKS", "CODE_SCHEMA_VERSION", "Engine", "ReasonCode",
           "Status"]


class Status(str, enum.Enum):
    """Where a node ran."""

    COMPILED = "compiled"
    FALLBACK = "fallback"


class Engine(str, enum.Enum):
    """What ran a cluster's calls. Only ``native`` (DISC's generated code) counts as
    compiled: the reference interpreter computes the same values with numpy, far slower, and
    ``framework`` means the cluster failed and its ops run in the framework again."""

    NATIVE = "native"
    REFERENCE = "reference"
    FRAMEWORK = "framework"

    @property
    def label(self) -> str:
        return {"native": "native code", "reference": "reference interpreter",
                "framework": "framework"}[self.value]


class ReasonCode(str, enum.Enum):
    """Why a node fell back to the framework: a closed list, so reports can be aggregated.

    Values are stable snake_case strings (they are the JSON form); adding a member is a
    schema change (see docs/report-schema.md), renaming one never happens.
    """

    NO_CONVERTER = "no_converter"
    UNSUPPORTED_DTYPE = "unsupported_dtype"
    UNSUPPORTED_ATTRIBUTE = "unsupported_attribute"
    DYNAMIC_RANK = "dynamic_rank"
    DATA_DEPENDENT_SHAPE = "data_dependent_shape"
    WOULD_CREATE_CYCLE = "would_create_cycle"
    CLUSTER_TOO_SMALL = "cluster_too_small"
    EXCLUDED_BY_USER = "excluded_by_user"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    #: schema version 2: the accuracy guard found the cluster's results differ from the
    #: framework's own ops
    ACCURACY_MISMATCH = "accuracy_mismatch"
    #: schema version 2: the op stays in the framework by design (it reads or writes
    #: framework state: variables, resource handles, iterators), not for want of a
    #: converter; a report lists it so that coverage is complete, not as work to do
    FRAMEWORK_OP = "framework_op"

    @property
    def label(self) -> str:
        """Short human wording, as renderers show it."""
        return _LABELS[self]


_LABELS = {
    ReasonCode.NO_CONVERTER: "no converter",
    ReasonCode.UNSUPPORTED_DTYPE: "unsupported dtype",
    ReasonCode.UNSUPPORTED_ATTRIBUTE: "unsupported attribute value",
    ReasonCode.DYNAMIC_RANK: "dynamic rank",
    ReasonCode.DATA_DEPENDENT_SHAPE: "data-dependent shape",
    ReasonCode.WOULD_CREATE_CYCLE: "would create a cycle",
    ReasonCode.CLUSTER_TOO_SMALL: "cluster below min size",
    ReasonCode.EXCLUDED_BY_USER: "excluded by user",
    ReasonCode.COMPILE_ERROR: "compile error",
    ReasonCode.RUNTIME_ERROR: "runtime error",
    ReasonCode.ACCURACY_MISMATCH: "accuracy check failed",
    ReasonCode.FRAMEWORK_OP: "framework op by design",
}

#: The schema version that introduced a reason code (codes not listed: version 1). A
#: writer writes the lowest version that has every code the file uses, so readers from
#: before a code was added still read every file that does not use it.
CODE_SCHEMA_VERSION = {ReasonCode.FRAMEWORK_OP: 2, ReasonCode.ACCURACY_MISMATCH: 2}

#: Reasons that mean "was clustered, then the compiled cluster failed" (to build, to run,
#: or the accuracy guard's comparison with the framework's own ops).
CLUSTER_FAILURES = frozenset({ReasonCode.COMPILE_ERROR, ReasonCode.RUNTIME_ERROR,
                              ReasonCode.ACCURACY_MISMATCH})

#: Reasons a clustered node may fall back with: its cluster failed, or the user left the
#: built cluster out by its key (``DISC_BISECT_CLUSTERS``, what ``disc bisect`` sets).
CLUSTER_FALLBACKS = CLUSTER_FAILURES | {ReasonCode.EXCLUDED_BY_USER}
