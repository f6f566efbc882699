"""disc_paddle's import-time Paddle version check, against the Paddle really installed."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest
from packaging.requirements import Requirement

import disc_paddle
from disc_paddle import _version_check
from disc_paddle._version_check import (
    SUPPORTED,
    UnsupportedFrameworkError,
    check_framework_version,
)


def test_installed_paddle_passes_the_check_and_works():
    found = _version_check.installed_framework()
    assert found is not None
    dist, version = found
    assert check_framework_version() == version == metadata.version(dist)
    assert disc_paddle.FRAMEWORK_VERSION == version
    assert disc_paddle.__version__ == "0.1.0"

    import paddle

    assert paddle.__version__ == version
    assert (paddle.to_tensor([1.0, 2.0, 3.0]) * 2 + 1).numpy().tolist() == [3.0, 5.0, 7.0]


def test_supported_range_matches_the_declared_requirement():
    requirements = [Requirement(r) for r in metadata.requires("disc-paddle") or ()]
    (paddle_req,) = [r for r in requirements if r.name == "paddlepaddle"]
    assert paddle_req.specifier == Requirement(f"paddlepaddle{SUPPORTED}").specifier


def test_unsupported_version_gives_the_fix():
    with pytest.raises(UnsupportedFrameworkError) as info:
        check_framework_version("2.6.2")
    assert isinstance(info.value, ImportError)
    assert str(info.value) == (
        "disc-paddle 0.1.0 supports paddlepaddle >=3.0,<3.4, but paddlepaddle 2.6.2 is installed; "
        "install a supported version with: pip install 'paddlepaddle>=3.0,<3.4'"
    )


@pytest.mark.parametrize(
    "version", ["2.6.2", "3.0.0rc1", "3.4.0", "3.4.0rc0", "4.0.0", "not-a-version"]
)
def test_versions_outside_the_range_are_rejected(version):
    with pytest.raises(UnsupportedFrameworkError, match="supports paddlepaddle >=3.0,<3.4"):
        check_framework_version(version)


@pytest.mark.parametrize("version", ["3.0.0", "3.3.1", "3.2.0+cpu", "3.3.0rc0"])
def test_versions_inside_the_range_are_accepted_local_tags_included(version):
    assert check_framework_version(version) == version


def test_missing_paddle_says_it_is_not_installed(monkeypatch):
    monkeypatch.setattr(_version_check, "DISTRIBUTIONS", ("disc-test-absent-paddle",))
    with pytest.raises(UnsupportedFrameworkError) as info:
        check_framework_version()
    message = str(info.value)
    assert message.startswith(
        "disc-paddle 0.1.0 requires paddlepaddle >=3.0,<3.4, but paddlepaddle is not installed"
    )
    assert message.endswith("install it with: pip install 'paddlepaddle>=3.0,<3.4'")


def _import_in_subprocess(prelude: str) -> subprocess.CompletedProcess[str]:
    code = prelude + "\nimport sys, disc_paddle\nprint('paddle' in sys.modules)\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_import_checks_without_importing_paddle():
    result = _import_in_subprocess("")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_import_fails_with_the_fix_when_paddle_is_unsupported():
    prelude = (
        "import importlib.metadata as m\n"
        "real = m.version\n"
        "m.version = lambda name: '2.6.2' if name.startswith('paddlepaddle') else real(name)\n"
    )
    result = _import_in_subprocess(prelude)
    assert result.returncode != 0
    assert "disc_paddle._version_check.UnsupportedFrameworkError" in result.stderr
    assert "pip install 'paddlepaddle>=3.0,<3.4'" in result.stderr
