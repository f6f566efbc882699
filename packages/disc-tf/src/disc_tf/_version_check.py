"""The TensorFlow disc_tf needs (see disc_core.frameworks); SUPPORTED is pyproject.toml's range."""

from disc_core.frameworks import (  # noqa: F401
    FRAMEWORK_DISTRIBUTIONS,
    FrameworkRequirement,
    UnsupportedFrameworkError,
)

REQUIREMENT = FrameworkRequirement(
    "disc-tf", "tensorflow", FRAMEWORK_DISTRIBUTIONS["tensorflow"], ">=2.16,<2.22"
)
SUPPORTED, BRIDGE_VERSION = REQUIREMENT.supported, REQUIREMENT.bridge_version
check_framework_version = REQUIREMENT.check
