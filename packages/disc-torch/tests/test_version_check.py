"""disc_torch's torch requirement, against the torch really installed.

The check itself (ranges, local tags, pre-releases, messages) is tested once, in
disc-core's tests/test_frameworks.py.
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

from packaging.requirements import Requirement
from packaging.version import Version

import disc_torch
from disc_torch._version_check import REQUIREMENT, SUPPORTED, check_framework_version


def test_installed_torch_passes_the_check_and_works():
    version = check_framework_version()
    assert REQUIREMENT.installed() == ("torch", version)
    assert version == metadata.version("torch")
    assert disc_torch.FRAMEWORK_VERSION == version
    assert disc_torch.__version__ == "0.1.0"

    import torch

    # CUDA wheels append a local tag at run time (2.14.1 installed, torch says 2.14.1+cu130).
    assert Version(torch.__version__).public == Version(version).public
    assert (torch.tensor([1.0, 2.0, 3.0]) * 2 + 1).tolist() == [3.0, 5.0, 7.0]


def test_supported_range_matches_the_declared_requirement():
    requirements = [Requirement(r) for r in metadata.requires("disc-torch") or ()]
    (torch_req,) = [r for r in requirements if r.name == REQUIREMENT.framework == "torch"]
    assert torch_req.specifier == Requirement(f"torch{SUPPORTED}").specifier
    assert REQUIREMENT.distributions == ("torch",)


def test_import_fails_with_the_fix_when_torch_is_unsupported():
    code = (
        "import importlib.metadata as m\n"
        "real = m.version\n"
        "m.version = lambda name: '2.9.1' if name == 'torch' else real(name)\n"
        "import disc_torch\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode != 0
    assert result.stderr.rstrip().endswith(
        "disc_core.frameworks.UnsupportedFrameworkError: disc-torch 0.1.0 supports torch "
        ">=2.13,<2.15, but torch 2.9.1 is installed; install a supported version with: "
        "pip install 'torch>=2.13,<2.15'"
    )
