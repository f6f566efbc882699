"""The Paddle disc_paddle needs (see disc_core.frameworks); SUPPORTED is pyproject.toml's range."""

from disc_core.frameworks import (  # noqa: F401
    FRAMEWORK_DISTRIBUTIONS,
    FrameworkRequirement,
    UnsupportedFrameworkError,
)

REQUIREMENT = FrameworkRequirement(
    "disc-paddle", "paddlepaddle", FRAMEWORK_DISTRIBUTIONS["paddle"], ">=3.0,<3.4"
)
SUPPORTED, BRIDGE_VERSION = REQUIREMENT.supported, REQUIREMENT.bridge_version
check_framework_version = REQUIREMENT.check
