"""DISC bridge for Paddle (skeleton).

Importing it checks the installed Paddle version (without importing paddle) and raises
UnsupportedFrameworkError, an ImportError, when Paddle is missing or unsupported.
"""

from disc_core import report as _report  # imported now so that DISC_REPORT=path takes effect
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
    "report",
]


def report():
    """This process's coverage report of Paddle graphs: what ran compiled, what fell back, why.

    A snapshot, as a ``disc_core.report.Report`` (docs/report-schema.md); later calls see later
    graphs. ``DISC_REPORT=path`` writes the report of every bridge at exit.
    """
    return _report.current("paddle")
