"""The Paddle disc_paddle needs (see disc_core.frameworks); SUPPORTED is pyproject.toml's range."""

from disc_core.frameworks import FrameworkRequirement, UnsupportedFrameworkError  # noqa: F401

REQUIREMENT = FrameworkRequirement(
    "disc-paddle", "paddlepaddle", ("paddlepaddle", "paddlepaddle-gpu"), ">=3.0,<3.4"
)
SUPPORTED, BRIDGE_VERSION = REQUIREMENT.supported, REQUIREMENT.bridge_version
check_framework_version = REQUIREMENT.check
