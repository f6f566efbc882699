"""Fail at import, with the command that fixes it, when the installed TensorFlow is unsupported.

The installed version is read from package metadata: that takes milliseconds, importing tensorflow
takes seconds.
"""

from __future__ import annotations

from importlib import metadata

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

BRIDGE = "disc-tf"
#: The framework's canonical distribution name, as declared in pyproject.toml.
FRAMEWORK = "tensorflow"
#: Distributions accepted as providing the framework, in lookup order.
DISTRIBUTIONS: tuple[str, ...] = ("tensorflow", "tensorflow-cpu")
#: Same range as the framework requirement in pyproject.toml (a test keeps them equal).
SUPPORTED = ">=2.16,<2.22"

try:
    BRIDGE_VERSION = metadata.version(BRIDGE)
except metadata.PackageNotFoundError:  # running from a source tree that was never installed
    BRIDGE_VERSION = "0+unknown"


class UnsupportedFrameworkError(ImportError):
    """The framework this bridge needs is not installed, or not in SUPPORTED."""


def installed_framework() -> tuple[str, str] | None:
    """(distribution name, version) of the first installed distribution in DISTRIBUTIONS."""
    for dist in DISTRIBUTIONS:
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def check_framework_version(installed: str | None = None) -> str:
    """Return the installed framework version, or raise UnsupportedFrameworkError.

    ``installed`` checks that version string instead of the installed distribution.
    Pre-releases and local build tags (such as ``+cpu``) inside the range are accepted.
    """
    dist = FRAMEWORK
    if installed is None:
        found = installed_framework()
        if found is None:
            raise UnsupportedFrameworkError(
                f"{BRIDGE} {BRIDGE_VERSION} requires {FRAMEWORK} {SUPPORTED}, but {FRAMEWORK} is "
                f"not installed (no distribution named {' or '.join(DISTRIBUTIONS)}); install it "
                f"with: pip install '{FRAMEWORK}{SUPPORTED}'"
            )
        dist, installed = found
    try:
        ok = SpecifierSet(SUPPORTED).contains(Version(installed), prereleases=True)
    except InvalidVersion:
        ok = False
    if not ok:
        raise UnsupportedFrameworkError(
            f"{BRIDGE} {BRIDGE_VERSION} supports {FRAMEWORK} {SUPPORTED}, but {dist} {installed} "
            f"is installed; install a supported version with: pip install '{dist}{SUPPORTED}'"
        )
    return installed
