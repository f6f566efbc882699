"""DISC bridge for PyTorch (skeleton).

Importing it checks the installed torch version (without importing torch) and raises
UnsupportedFrameworkError, an ImportError, when torch is missing or unsupported.
"""

from disc_torch._version_check import (
    BRIDGE_VERSION,
    SUPPORTED,
    UnsupportedFrameworkError,
    check_framework_version,
)

__version__ = BRIDGE_VERSION

#: The installed torch version, checked against SUPPORTED.
FRAMEWORK_VERSION = check_framework_version()

__all__ = [
    "FRAMEWORK_VERSION",
    "SUPPORTED",
    "UnsupportedFrameworkError",
    "__version__",
    "check_framework_version",
]
