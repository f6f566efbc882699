"""DISC bridge for Paddle (skeleton).

Importing it checks the installed Paddle version (without importing paddle) and raises
UnsupportedFrameworkError, an ImportError, when Paddle is missing or unsupported.
"""

from disc_paddle._version_check import (
    BRIDGE_VERSION,
    SUPPORTED,
    UnsupportedFrameworkError,
    check_framework_version,
)

__version__ = BRIDGE_VERSION

#: The installed Paddle version, checked against SUPPORTED.
FRAMEWORK_VERSION = check_framework_version()

__all__ = [
    "FRAMEWORK_VERSION",
    "SUPPORTED",
    "UnsupportedFrameworkError",
    "__version__",
    "check_framework_version",
]
