"""The torch disc_torch needs (see disc_core.frameworks); SUPPORTED is pyproject.toml's range."""

from disc_core.frameworks import (  # noqa: F401
    FRAMEWORK_DISTRIBUTIONS,
    FrameworkRequirement,
    UnsupportedFrameworkError,
)

REQUIREMENT = FrameworkRequirement(
    "disc-torch", "torch", FRAMEWORK_DISTRIBUTIONS["torch"], ">=2.13,<2.15"
)
SUPPORTED, BRIDGE_VERSION = REQUIREMENT.supported, REQUIREMENT.bridge_version
check_framework_version = REQUIREMENT.check
