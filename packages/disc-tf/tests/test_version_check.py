"""disc_tf's TensorFlow requirement, against the TensorFlow really installed.

The check itself (ranges, local tags, pre-releases, messages) is tested once, in
disc-core's tests/test_frameworks.py.
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest
from packaging.requirements import Requirement

import disc_tf
from disc_tf._version_check import (
    REQUIREMENT,
    SUPPORTED,
    UnsupportedFrameworkError,
    check_framework_version,
)


def test_installed_tensorflow_passes_the_check_and_works():
    found = REQUIREMENT.installed()
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
    (tf_req,) = [r for r in requirements if r.name == REQUIREMENT.framework == "tensorflow"]
    assert tf_req.specifier == Requirement(f"tensorflow{SUPPORTED}").specifier


@pytest.mark.parametrize("dist", ["tensorflow", "tensorflow-cpu"])
def test_either_distribution_is_accepted_and_named_in_the_fix(monkeypatch, dist):
    # Only `dist` is installed: at a supported version, then at an unsupported one.
    real = metadata.version
    installed = {dist: "2.21.0"}

    def fake_version(name):
        if name.startswith("tensorflow"):
            if name in installed:
                return installed[name]
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "version", fake_version)
    assert check_framework_version() == "2.21.0"
    installed[dist] = "2.22.0"
    with pytest.raises(UnsupportedFrameworkError) as info:
        check_framework_version()
    assert str(info.value) == (
        f"disc-tf 0.1.0 supports tensorflow >=2.16,<2.22, but {dist} 2.22.0 is installed; "
        f"install a supported version with: pip install '{dist}>=2.16,<2.22'"
    )


def test_import_fails_with_the_fix_when_tensorflow_is_unsupported():
    code = (
        "import importlib.metadata as m\n"
        "real = m.version\n"
        "m.version = lambda name: '2.15.1' if name.startswith('tensorflow') else real(name)\n"
        "import disc_tf\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode != 0
    assert "disc_core.frameworks.UnsupportedFrameworkError: disc-tf 0.1.0" in result.stderr
    assert "install a supported version with: pip install 'tensorflow>=2.16,<2.22'" in (
        result.stderr
    )
