"""Installed DISC packages and framework versions, from package metadata only.

Reports and ``disc --version`` say which versions produced a result. Importing a framework
to ask would take seconds (TensorFlow) and break the dependency rule (disc-core never
imports a framework), so everything here reads ``importlib.metadata``.
"""

from __future__ import annotations

from importlib import metadata

from ..frameworks import FRAMEWORK_DISTRIBUTIONS, installed_distribution

__all__ = [
    "BRIDGE_FRAMEWORKS",
    "DISC_DISTRIBUTIONS",
    "FRAMEWORK_DISTRIBUTIONS",
    "disc_versions",
    "distribution_version",
    "framework_version",
]

#: Every DISC distribution, in dependency order.
DISC_DISTRIBUTIONS = ("disc-core", "disc-runtime", "disc-torch", "disc-tf", "disc-paddle")
#: Bridge distribution -> the framework it drives.
BRIDGE_FRAMEWORKS = {"disc-torch": "torch", "disc-tf": "tensorflow", "disc-paddle": "paddle"}


def distribution_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or None when it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def disc_versions() -> dict[str, str]:
    """Installed DISC distributions -> version (absent ones are left out)."""
    found = {name: distribution_version(name) for name in DISC_DISTRIBUTIONS}
    return {name: version for name, version in found.items() if version is not None}


def framework_version(framework: str) -> tuple[str, str] | None:
    """(distribution, version) of the first installed provider of ``framework``, or None."""
    return installed_distribution(FRAMEWORK_DISTRIBUTIONS.get(framework, ()))
