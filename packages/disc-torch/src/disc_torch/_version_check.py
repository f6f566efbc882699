"""The torch disc_torch needs (see disc_core.frameworks); SUPPORTED is pyproject.toml's range."""

from disc_core.frameworks import FrameworkRequirement, UnsupportedFrameworkError  # noqa: F401

REQUIREMENT = FrameworkRequirement("disc-torch", "torch", ("torch",), ">=2.13,<2.15")
SUPPORTED, BRIDGE_VERSION = REQUIREMENT.supported, REQUIREMENT.bridge_version
check_framework_version = REQUIREMENT.check
