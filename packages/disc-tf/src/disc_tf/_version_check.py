"""The TensorFlow disc_tf needs (see disc_core.frameworks); SUPPORTED is pyproject.toml's range."""

from disc_core.frameworks import FrameworkRequirement, UnsupportedFrameworkError  # noqa: F401

REQUIREMENT = FrameworkRequirement(
    "disc-tf", "tensorflow", ("tensorflow", "tensorflow-cpu"), ">=2.16,<2.22"
)
SUPPORTED, BRIDGE_VERSION = REQUIREMENT.supported, REQUIREMENT.bridge_version
check_framework_version = REQUIREMENT.check
