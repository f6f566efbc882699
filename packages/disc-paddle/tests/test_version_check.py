"""disc_paddle's Paddle requirement, against the Paddle really installed.

The check itself (ranges, local tags, pre-releases, messages) is tested once, in
disc-core's tests/test_frameworks.py.
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest
from packaging.requirements import Requirement

import disc_paddle
from disc_paddle._version_check import REQUIREMENT, SUPPORTED, check_framework_version


def test_installed_paddle_passes_the_check_and_works():
    found = REQUIREMENT.installed()
    assert found is not None
    dist, version = found
    assert dist in ("paddlepaddle", "paddlepaddle-gpu")
    assert check_framework_version() == version == metadata.version(dist)
    assert disc_paddle.FRAMEWORK_VERSION == version
    assert disc_paddle.__version__ == "0.1.0"

    import paddle

    assert paddle.__version__ == version
    assert (paddle.to_tensor([1.0, 2.0, 3.0]) * 2 + 1).numpy().tolist() == [3.0, 5.0, 7.0]


def test_supported_range_matches_the_declared_requirement():
    requirements = [Requirement(r) for r in metadata.requires("disc-paddle") or ()]
    (paddle_req,) = [r for r in requirements if r.name == REQUIREMENT.framework == "paddlepaddle"]
    assert paddle_req.specifier == Requirement(f"paddlepaddle{SUPPORTED}").specifier


@pytest.mark.parametrize("dist", ["paddlepaddle", "paddlepaddle-gpu"])
def test_either_distribution_is_accepted(monkeypatch, dist):
    real = metadata.version

    def fake_version(name):
        if name.startswith("paddlepaddle"):
            if name == dist:
                return "3.3.1"
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "version", fake_version)
    assert REQUIREMENT.installed() == (dist, "3.3.1")
    assert check_framework_version() == "3.3.1"


def test_import_fails_with_the_fix_when_paddle_is_unsupported():
    code = (
        "import importlib.metadata as m\n"
        "real = m.version\n"
        "m.version = lambda name: '2.6.2' if name.startswith('paddlepaddle') else real(name)\n"
        "import disc_paddle\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode != 0
    assert result.stderr.rstrip().endswith(
        "disc_core.frameworks.UnsupportedFrameworkError: disc-paddle 0.1.0 supports paddlepaddle "
        ">=3.0,<3.4, but paddlepaddle 2.6.2 is installed; install a supported version with: "
        "pip install 'paddlepaddle>=3.0,<3.4'"
    )


def test_paddle_version_tuple():
    """disc_paddle.versions: what converters with version-dependent semantics ask."""
    import paddle

    from disc_paddle.versions import paddle_version, parse_version

    assert parse_version("3.1.1") == (3, 1, 1)
    assert parse_version("3.0.0rc1") == (3, 0, 0)
    assert parse_version("3.2") == (3, 2, 0)
    assert parse_version("0.0.0") > (3, 3, 1)  # a develop build
    assert paddle_version() == parse_version(paddle.__version__)
