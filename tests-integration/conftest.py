"""tests-integration/: tests that span packages or frameworks.

What belongs here: tests that need more than one DISC package at once (runtime + core + a
bridge), or more than one framework in one process, and repository-wide rules such as
test_dependency_rule.py. A test of one package alone belongs in that package's tests/.

The `integration` tox env installs disc-runtime and disc-core, and the bridges with --no-deps
(no framework). A test that needs a framework imports it with pytest.importorskip() so this env
stays framework-free; run such tests where the framework is installed.

Paddle and TensorFlow in one process: import paddle FIRST. Importing paddle after tensorflow
segfaults (protobuf inside paddle's libphi_core.so); torch can go anywhere. The guard below
turns that segfault into an ImportError naming the fix.
"""

from __future__ import annotations

import sys


class _PaddleAfterTensorflowGuard:
    """Refuse `import paddle` once tensorflow is loaded, instead of crashing the process."""

    def find_spec(self, name, path=None, target=None):
        if name == "paddle" and "tensorflow" in sys.modules:
            raise ImportError(
                "paddle imported after tensorflow segfaults: import paddle before tensorflow "
                "(see tests-integration/conftest.py)"
            )
        return None


sys.meta_path.insert(0, _PaddleAfterTensorflowGuard())
