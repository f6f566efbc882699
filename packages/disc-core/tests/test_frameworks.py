"""disc_core.frameworks: the bridges' framework version check, against fake distributions.

Each bridge's own tests check its real framework; these check the mechanism once.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap

import pytest

from disc_core import frameworks
from disc_core.frameworks import FrameworkRequirement, UnsupportedFrameworkError

REQ = FrameworkRequirement("disc-fake", "fakefw", ("fakefw", "fakefw-cpu"), ">=2.16,<2.22")


@pytest.fixture
def installed(monkeypatch):
    """The installed distributions, name -> version: nothing else is installed."""
    dists: dict[str, str] = {"disc-fake": "0.3.1"}

    def fake_version(name: str) -> str:
        if name in dists:
            return dists[name]
        raise frameworks.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(frameworks.metadata, "version", fake_version)
    return dists


def test_supported_installed_version_is_returned(installed):
    installed["fakefw"] = "2.21.0"
    assert REQ.installed() == ("fakefw", "2.21.0")
    assert REQ.check() == "2.21.0"


def test_unsupported_version_gives_the_fix(installed):
    with pytest.raises(UnsupportedFrameworkError) as info:
        REQ.check("2.15.1")
    assert isinstance(info.value, ImportError)
    assert str(info.value) == (
        "disc-fake 0.3.1 supports fakefw >=2.16,<2.22, but fakefw 2.15.1 is installed; "
        "install a supported version with: pip install 'fakefw>=2.16,<2.22'"
    )


def test_the_fix_names_the_distribution_that_is_installed(installed):
    installed["fakefw-cpu"] = "2.22.0"
    with pytest.raises(UnsupportedFrameworkError) as info:
        REQ.check()
    assert str(info.value) == (
        "disc-fake 0.3.1 supports fakefw >=2.16,<2.22, but fakefw-cpu 2.22.0 is installed; "
        "install a supported version with: pip install 'fakefw-cpu>=2.16,<2.22'"
    )


@pytest.mark.parametrize(
    "version", ["2.15.1", "2.16.0rc1", "2.22.0", "2.22.0rc0", "3.0.0", "not-a-version", ""]
)
def test_versions_outside_the_range_or_invalid_are_rejected(installed, version):
    with pytest.raises(UnsupportedFrameworkError, match="supports fakefw >=2.16,<2.22"):
        REQ.check(version)


@pytest.mark.parametrize(
    "version", ["2.16.0", "2.21.9", "2.20.0+cpu", "2.21.1+cu128", "2.21.0rc1", "2.17.0.dev3"]
)
def test_versions_inside_the_range_are_accepted_prereleases_and_local_tags_included(
    installed, version
):
    assert REQ.check(version) == version


def test_missing_framework_says_it_is_not_installed(installed):
    assert REQ.installed() is None
    with pytest.raises(UnsupportedFrameworkError) as info:
        REQ.check()
    assert str(info.value) == (
        "disc-fake 0.3.1 requires fakefw >=2.16,<2.22, but fakefw is not installed "
        "(no distribution named fakefw or fakefw-cpu); install it with: "
        "pip install 'fakefw>=2.16,<2.22'"
    )


BOTH = {"fakefw": "2.15.0", "fakefw-cpu": "2.19.0"}


@pytest.mark.parametrize(
    "present, distributions, expected",
    [
        ({"fakefw": "2.20.0"}, ("fakefw", "fakefw-cpu"), ("fakefw", "2.20.0")),
        ({"fakefw-cpu": "2.19.0"}, ("fakefw", "fakefw-cpu"), ("fakefw-cpu", "2.19.0")),
        # Both installed: the first in lookup order is checked, even when it is unsupported.
        (BOTH, ("fakefw", "fakefw-cpu"), ("fakefw", "2.15.0")),
        (BOTH, ("fakefw-cpu", "fakefw"), ("fakefw-cpu", "2.19.0")),
    ],
)
def test_the_first_installed_distribution_is_the_one_checked(
    installed, present, distributions, expected
):
    installed.update(present)
    req = dataclasses.replace(REQ, distributions=distributions)
    assert req.installed() == expected
    version = expected[1]
    if version == "2.15.0":
        with pytest.raises(UnsupportedFrameworkError, match="but fakefw 2.15.0 is installed"):
            req.check()
    else:
        assert req.check() == version


def test_bridge_version_comes_from_metadata_or_is_unknown(installed):
    assert REQ.bridge_version == "0.3.1"
    del installed["disc-fake"]
    assert REQ.bridge_version == "0+unknown"
    with pytest.raises(UnsupportedFrameworkError, match=r"^disc-fake 0\+unknown supports"):
        REQ.check("1.0")


def test_requirement_is_frozen_and_rejects_a_malformed_declaration():
    with pytest.raises(dataclasses.FrozenInstanceError):
        REQ.supported = ">=1"  # type: ignore[misc]
    with pytest.raises(ValueError, match="non-empty tuple"):
        FrameworkRequirement("disc-fake", "fakefw", (), ">=1")
    with pytest.raises(ValueError, match="non-empty tuple"):
        FrameworkRequirement("disc-fake", "fakefw", "fakefw", ">=1")  # type: ignore[arg-type]
    with pytest.raises(ValueError):  # packaging's InvalidSpecifier
        FrameworkRequirement("disc-fake", "fakefw", ("fakefw",), "2.16 to 2.22")


def test_checking_a_real_distribution_does_not_import_it():
    # pytest is installed here and not yet imported in a fresh interpreter: the check reads
    # its metadata, and a finder refuses (and records) any attempt to import it.
    code = textwrap.dedent(
        """
        import sys

        attempts = []

        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name.partition(".")[0] in ("pytest", "_pytest"):
                    attempts.append(name)
                    raise ImportError(name)
                return None

        sys.meta_path.insert(0, Refuse())
        from importlib import metadata
        from disc_core.frameworks import FrameworkRequirement

        req = FrameworkRequirement("disc-core", "pytest", ("pytest",), ">=1")
        assert req.check() == metadata.version("pytest")
        assert req.installed() == ("pytest", metadata.version("pytest"))
        loaded = [m for m in sys.modules if m.partition(".")[0] in ("pytest", "_pytest")]
        print(attempts, loaded)
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[] []"
