"""The StableHLO bridge is an optional extra: disc-core must import, compile and run without
jaxlib, and ``disc_core.stablehlo`` without it must say which extra to install."""

from __future__ import annotations

import subprocess
import sys

_NO_JAXLIB = """
import sys
import disc_core, disc_core.compiler, disc_core.cli, disc_core.stablehlo.mapping
assert "jaxlib" not in sys.modules and "jax" not in sys.modules, sorted(
    m for m in sys.modules if m.startswith("jax"))
"""

_BLOCKED = """
import sys
sys.modules["jaxlib"] = None  # as if the extra were not installed
try:
    from disc_core.stablehlo import export  # noqa: F401
except ImportError as exc:
    assert "disc-core[mlir]" in str(exc), exc
else:
    raise AssertionError("disc_core.stablehlo imported without jaxlib")
"""


def _run(code: str) -> None:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_core_does_not_import_jaxlib() -> None:
    _run(_NO_JAXLIB)


def test_stablehlo_without_jaxlib_names_the_extra() -> None:
    _run(_BLOCKED)
