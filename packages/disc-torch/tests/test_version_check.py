"""disc_torch's import-time torch version check, against the torch that is really installed."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import disc_torch
from disc_torch import _version_check
from disc_torch._version_check import SUPPORTED, UnsupportedFrameworkError, check_framework_version


def test_installed_torch_passes_the_check_and_works():
    version = check_framework_version()
    assert version == metadata.version("torch")
    assert disc_torch.FRAMEWORK_VERSION == version
    assert disc_torch.__version__ == "0.1.0"

    import torch

    # CUDA wheels append a local tag at run time (2.14.1 installed, torch says 2.14.1+cu130).
    assert Version(torch.__version__).public == Version(version).public
    assert (torch.tensor([1.0, 2.0, 3.0]) * 2 + 1).tolist() == [3.0, 5.0, 7.0]


def test_supported_range_matches_the_declared_requirement():
    requirements = [Requirement(r) for r in metadata.requires("disc-torch") or ()]
    (torch_req,) = [r for r in requirements if r.name == "torch"]
    assert torch_req.specifier == Requirement(f"torch{SUPPORTED}").specifier


def test_unsupported_version_gives_the_fix():
    with pytest.raises(UnsupportedFrameworkError) as info:
        check_framework_version("2.9.1")
    assert isinstance(info.value, ImportError)
    assert str(info.value) == (
        "disc-torch 0.1.0 supports torch >=2.13,<2.15, but torch 2.9.1 is installed; "
        "install a supported version with: pip install 'torch>=2.13,<2.15'"
    )


@pytest.mark.parametrize("version", ["2.12.1", "2.15.0", "2.15.0rc1", "3.0.0", "not-a-version"])
def test_versions_outside_the_range_are_rejected(version):
    with pytest.raises(UnsupportedFrameworkError, match="supports torch >=2.13,<2.15"):
        check_framework_version(version)


@pytest.mark.parametrize("version", ["2.13.0", "2.13.0+cpu", "2.14.1+cu128", "2.14.0rc1"])
def test_versions_inside_the_range_are_accepted_local_tags_included(version):
    assert check_framework_version(version) == version


def test_missing_torch_says_it_is_not_installed(monkeypatch):
    monkeypatch.setattr(_version_check, "DISTRIBUTIONS", ("disc-test-absent-torch",))
    with pytest.raises(UnsupportedFrameworkError) as info:
        check_framework_version()
    message = str(info.value)
    assert message.startswith(
        "disc-torch 0.1.0 requires torch >=2.13,<2.15, but torch is not installed"
    )
    assert message.endswith("install it with: pip install 'torch>=2.13,<2.15'")


def _import_in_subprocess(prelude: str) -> subprocess.CompletedProcess[str]:
    code = prelude + "\nimport sys, disc_torch\nprint('torch' in sys.modules)\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_import_checks_without_importing_torch():
    result = _import_in_subprocess("")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_import_fails_with_the_fix_when_torch_is_unsupported():
    prelude = (
        "import importlib.metadata as m\n"
        "real = m.version\n"
        "m.version = lambda name: '2.9.1' if name == 'torch' else real(name)\n"
    )
    result = _import_in_subprocess(prelude)
    assert result.returncode != 0
    assert "disc_torch._version_check.UnsupportedFrameworkError" in result.stderr
    assert "pip install 'torch>=2.13,<2.15'" in result.stderr
