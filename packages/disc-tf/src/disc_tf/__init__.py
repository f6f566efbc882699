"""DISC bridge for TensorFlow (skeleton).

Importing it checks the installed TensorFlow version (without importing tensorflow) and raises
UnsupportedFrameworkError, an ImportError, when TensorFlow is missing or unsupported.
"""

from disc_tf._version_check import (
    BRIDGE_VERSION,
    SUPPORTED,
    UnsupportedFrameworkError,
    check_framework_version,
)

__version__ = BRIDGE_VERSION

#: The installed TensorFlow version, checked against SUPPORTED.
FRAMEWORK_VERSION = check_framework_version()

__all__ = [
    "FRAMEWORK_VERSION",
    "SUPPORTED",
    "UnsupportedFrameworkError",
    "__version__",
    "check_framework_version",
]
