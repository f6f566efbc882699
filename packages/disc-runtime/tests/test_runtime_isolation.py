"""disc_runtime must stand alone: stdlib, numpy and cffi (the native engine's calls) only,
never another DISC package or a deep-learning framework - not even lazily."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from disc_runtime_testkit import SRC, subprocess_env

FORBIDDEN = (
    "disc_core",
    "disc_torch",
    "disc_tf",
    "disc_paddle",
    "torch",
    "tensorflow",
    "paddle",
    "jax",
    "ml_dtypes",
)


def test_fresh_import_loads_no_framework() -> None:
    code = (
        "import sys, disc_runtime, disc_runtime.cli, disc_runtime.cache\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})\n"
        "print(','.join(bad))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], env=subprocess_env(), capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""


def test_source_imports_only_stdlib_numpy_and_cffi() -> None:
    # _cffi_backend: cffi's own C module, which the precompiled declarations import
    allowed = set(sys.stdlib_module_names) | {"numpy", "cffi", "_cffi_backend", "disc_runtime"}
    offenders = []
    for path in sorted((SRC / "disc_runtime").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Call) and getattr(
                node.func, "attr", getattr(node.func, "id", "")
            ) in (
                "import_module",
                "__import__",
            ):
                offenders.append(f"{path.name}:{node.lineno} dynamic import")
            offenders += [
                f"{path.name}:{node.lineno} {n}" for n in names if n.split(".")[0] not in allowed
            ]
    assert offenders == []


def test_package_metadata_has_no_framework_dependency() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

    project = tomllib.loads((Path(SRC).parent / "pyproject.toml").read_text())["project"]
    assert project["dependencies"] == ["numpy>=1.24", "cffi>=1.15"]
    assert project["scripts"]["disc-run"] == "disc_runtime.cli:main"
