"""disc_tf's import-time TensorFlow version check, against the TensorFlow really installed."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest
from packaging.requirements import Requirement

import disc_tf
from disc_tf import _version_check
from disc_tf._version_check import SUPPORTED, UnsupportedFrameworkError, check_framework_version


def test_installed_tensorflow_passes_the_check_and_works():
    found = _version_check.installed_framework()
    assert found is not None
    dist, version = found
    assert dist in ("tensorflow", "tensorflow-cpu")
    assert check_framework_version() == version == metadata.version(dist)
    assert disc_tf.FRAMEWORK_VERSION == version
    assert disc_tf.__version__ == "0.1.0"

    import tensorflow as tf

    assert tf.__version__ == version
    assert (tf.constant([1.0, 2.0, 3.0]) * 2 + 1).numpy().tolist() == [3.0, 5.0, 7.0]


def test_supported_range_matches_the_declared_requirement():
    requirements = [Requirement(r) for r in metadata.requires("disc-tf") or ()]
    (tf_req,) = [r for r in requirements if r.name == "tensorflow"]
    assert tf_req.specifier == Requirement(f"tensorflow{SUPPORTED}").specifier


def test_unsupported_version_gives_the_fix():
    with pytest.raises(UnsupportedFrameworkError) as info:
        check_framework_version("2.15.1")
    assert isinstance(info.value, ImportError)
    assert str(info.value) == (
        "disc-tf 0.1.0 supports tensorflow >=2.16,<2.22, but tensorflow 2.15.1 is installed; "
        "install a supported version with: pip install 'tensorflow>=2.16,<2.22'"
    )


def test_unsupported_tensorflow_cpu_names_tensorflow_cpu_in_the_fix(monkeypatch):
    monkeypatch.setattr(_version_check, "installed_framework", lambda: ("tensorflow-cpu", "2.22.0"))
    with pytest.raises(UnsupportedFrameworkError) as info:
        check_framework_version()
    assert str(info.value) == (
        "disc-tf 0.1.0 supports tensorflow >=2.16,<2.22, but tensorflow-cpu 2.22.0 is installed; "
        "install a supported version with: pip install 'tensorflow-cpu>=2.16,<2.22'"
    )


@pytest.mark.parametrize("dist", ["tensorflow", "tensorflow-cpu"])
def test_either_distribution_name_is_looked_up(monkeypatch, dist):
    # Only `dist` appears installed, at a supported version.
    real = metadata.version

    def fake_version(name):
        if name in ("tensorflow", "tensorflow-cpu"):
            if name == dist:
                return "2.21.0"
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(_version_check.metadata, "version", fake_version)
    assert _version_check.installed_framework() == (dist, "2.21.0")
    assert check_framework_version() == "2.21.0"


@pytest.mark.parametrize("version", ["2.15.1", "2.22.0", "2.22.0rc0", "3.0.0", "not-a-version"])
def test_versions_outside_the_range_are_rejected(version):
    with pytest.raises(UnsupportedFrameworkError, match="supports tensorflow >=2.16,<2.22"):
        check_framework_version(version)


@pytest.mark.parametrize("version", ["2.16.1", "2.21.0", "2.20.0+cpu", "2.21.0rc1"])
def test_versions_inside_the_range_are_accepted_local_tags_included(version):
    assert check_framework_version(version) == version


def test_missing_tensorflow_says_it_is_not_installed(monkeypatch):
    monkeypatch.setattr(_version_check, "DISTRIBUTIONS", ("disc-test-absent-tensorflow",))
    with pytest.raises(UnsupportedFrameworkError) as info:
        check_framework_version()
    message = str(info.value)
    assert message.startswith(
        "disc-tf 0.1.0 requires tensorflow >=2.16,<2.22, but tensorflow is not installed"
    )
    assert message.endswith("install it with: pip install 'tensorflow>=2.16,<2.22'")


def _import_in_subprocess(prelude: str) -> subprocess.CompletedProcess[str]:
    code = prelude + "\nimport sys, disc_tf\nprint('tensorflow' in sys.modules)\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_import_checks_without_importing_tensorflow():
    result = _import_in_subprocess("")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_import_fails_with_the_fix_when_tensorflow_is_unsupported():
    prelude = (
        "import importlib.metadata as m\n"
        "real = m.version\n"
        "m.version = lambda name: '2.15.1' if name.startswith('tensorflow') else real(name)\n"
    )
    result = _import_in_subprocess(prelude)
    assert result.returncode != 0
    assert "disc_tf._version_check.UnsupportedFrameworkError" in result.stderr
    assert "is installed; install a supported version with: pip install" in result.stderr
