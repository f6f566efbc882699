"""The framework version each bridge needs, checked when the bridge is imported.

A bridge declares one FrameworkRequirement (its data: which framework, which distributions
provide it, which versions it supports) and calls ``check()`` at import; an unsupported or
missing framework raises UnsupportedFrameworkError with the ``pip install`` command that fixes
it. The installed version is read from package metadata, never by importing the framework:
that takes milliseconds, importing a framework takes seconds.

This module imports nothing else of disc_core and no framework.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

__all__ = ["FrameworkRequirement", "UnsupportedFrameworkError"]


#: Framework name (as reports spell it) -> distributions that provide it, in lookup order.
#: The bridges' requirements and ``disc --version`` both read it.
FRAMEWORK_DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "tensorflow": ("tensorflow", "tensorflow-cpu"),
    "paddle": ("paddlepaddle", "paddlepaddle-gpu"),
}


def installed_distribution(distributions: tuple[str, ...]) -> tuple[str, str] | None:
    """(name, version) of the first of ``distributions`` that is installed, from package
    metadata only (the framework is never imported), or None."""
    for dist in distributions:
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


class UnsupportedFrameworkError(ImportError):
    """The framework a bridge needs is not installed, or not in its supported range."""


@dataclass(frozen=True)
class FrameworkRequirement:
    """A bridge's requirement on its framework.

    ``FrameworkRequirement("disc-tf", "tensorflow", ("tensorflow", "tensorflow-cpu"),
    ">=2.16,<2.22")``: disc-tf needs TensorFlow 2.16 to 2.21, from either distribution.
    """

    #: The bridge's distribution name, such as ``disc-torch``.
    bridge: str
    #: The framework's canonical distribution name, as the bridge's pyproject.toml declares it.
    framework: str
    #: Distributions accepted as providing the framework, in lookup order.
    distributions: tuple[str, ...]
    #: PEP 440 specifiers: the same range as the bridge's pyproject.toml declares.
    supported: str

    def __post_init__(self) -> None:
        if not self.distributions or isinstance(self.distributions, str):
            raise ValueError(
                f"{self.bridge}: distributions must be a non-empty tuple of distribution names, "
                f"not {self.distributions!r}"
            )
        SpecifierSet(self.supported)  # a malformed range fails here, when the bridge is built

    @property
    def bridge_version(self) -> str:
        """The installed bridge's version; ``0+unknown`` in a source tree never installed."""
        try:
            return metadata.version(self.bridge)
        except metadata.PackageNotFoundError:
            return "0+unknown"

    def installed(self) -> tuple[str, str] | None:
        """(distribution, version) of the first installed one of ``distributions``, or None.

        Reads package metadata only: the framework is not imported.
        """
        return installed_distribution(self.distributions)

    def check(self, installed: str | None = None) -> str:
        """Return the installed framework version, or raise UnsupportedFrameworkError.

        ``installed`` checks that version string instead of the installed distribution.
        Pre-releases and local build tags (such as ``+cpu``) inside the range are accepted;
        a string that is not a PEP 440 version is rejected.
        """
        framework, supported = self.framework, self.supported
        dist = framework
        if installed is None:
            found = self.installed()
            if found is None:
                raise UnsupportedFrameworkError(
                    f"{self.bridge} {self.bridge_version} requires {framework} {supported}, but "
                    f"{framework} is not installed (no distribution named "
                    f"{' or '.join(self.distributions)}); install it with: "
                    f"pip install '{framework}{supported}'"
                )
            dist, installed = found
        try:
            ok = SpecifierSet(supported).contains(Version(installed), prereleases=True)
        except InvalidVersion:
            ok = False
        if not ok:
            raise UnsupportedFrameworkError(
                f"{self.bridge} {self.bridge_version} supports {framework} {supported}, but "
                f"{dist} {installed} is installed; install a supported version with: "
                f"pip install '{dist}{supported}'"
            )
        return installed
