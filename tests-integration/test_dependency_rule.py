"""The dependency rule between DISC's packages, checked statically and dynamically.

    disc_runtime  <-  disc_core  <-  disc_torch | disc_tf | disc_paddle

* disc_runtime imports nothing of ours (no disc_core, no bridge) and no framework.
* disc_core may import disc_runtime; no bridge, no framework.
* a bridge may import disc_core, disc_runtime and its own framework; never another bridge,
  never another framework.
* so nothing but a bridge itself imports a bridge.

The static scan reads every .py under packages/*/src with ast, so it sees imports inside
functions, under TYPE_CHECKING or in try/except, and ``importlib.import_module("...")`` /
``__import__("...")`` with a literal name. The dynamic check imports every module of
disc_runtime, then of disc_core, in a fresh interpreter that records (and refuses) any attempt
to import a forbidden module, so it also catches imports built from non-literal names.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
import warnings
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = REPO / "packages"

RUNTIME = "disc_runtime"
CORE = "disc_core"
#: Each bridge and the frameworks it may import.
BRIDGES: dict[str, frozenset[str]] = {
    "disc_torch": frozenset({"torch", "functorch", "torchvision", "torchaudio"}),
    "disc_tf": frozenset({"tensorflow", "keras", "tf_keras"}),
    "disc_paddle": frozenset({"paddle"}),
}
#: Top-level modules that count as a framework. jaxlib is left out on purpose: it ships MLIR
#: bindings (jaxlib.mlir) that a compiler may use without importing jax.
FRAMEWORKS = frozenset({"jax", "flax"}.union(*BRIDGES.values()))
OURS = frozenset({RUNTIME, CORE, *BRIDGES})
GUARDED = OURS | FRAMEWORKS
#: What each of our top-level packages may import, among GUARDED modules.
ALLOWED: dict[str, frozenset[str]] = {
    RUNTIME: frozenset({RUNTIME}),
    CORE: frozenset({CORE, RUNTIME}),
    **{bridge: frozenset({bridge, CORE, RUNTIME}) | fws for bridge, fws in BRIDGES.items()},
}
#: Distribution folder under packages/ -> top-level import package.
EXPECTED_PACKAGES = {
    "disc-runtime": RUNTIME,
    "disc-core": CORE,
    "disc-torch": "disc_torch",
    "disc-tf": "disc_tf",
    "disc-paddle": "disc_paddle",
}
IMPORT_FUNCTIONS = {"import_module", "__import__"}


@dataclass(frozen=True)
class Import:
    module: str
    lineno: int


def imports_in(source: str, filename: str = "<string>") -> list[Import]:
    """Every absolute import in ``source``, at any depth, plus literal import_module() calls."""
    found: list[Import] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found += [Import(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:  # relative imports stay inside the package
                found.append(Import(node.module, node.lineno))
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else None
            )
            first = node.args[0]
            if (
                name in IMPORT_FUNCTIONS
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
                and not first.value.startswith(".")
            ):
                found.append(Import(first.value, node.lineno))
    return sorted(found, key=lambda imp: imp.lineno)


def violations(package: str, source: str, filename: str = "<string>") -> list[str]:
    """Rule violations in ``source``, a module of our top-level package ``package``."""
    allowed = ALLOWED[package]
    return [
        f"{filename}:{imp.lineno}: {package} must not import {imp.module}"
        for imp in imports_in(source, filename)
        if (top := imp.module.partition(".")[0]) in GUARDED and top not in allowed
    ]


def source_tree() -> dict[str, list[Path]]:
    """Our top-level package name -> its .py files, for every packages/*/src."""
    tree: dict[str, list[Path]] = {}
    for src in sorted(PACKAGES.glob("*/src")):
        for top in sorted(src.iterdir()):
            if top.name.startswith(".") or top.name.endswith(".egg-info"):
                continue
            if top.is_dir():
                tree.setdefault(top.name, []).extend(sorted(top.rglob("*.py")))
            elif top.suffix == ".py":
                tree.setdefault(top.stem, []).append(top)
    return tree


# ---------------------------------------------------------------- the scanner can fail


BAD_BRIDGE_SOURCE = textwrap.dedent(
    """
    import importlib
    import numpy
    import tensorflow as tf
    from disc_core import ir
    from . import sibling

    def lazy():
        import torch.nn
        from disc_paddle.ops import x
        importlib.import_module("disc_torch.compile")
        __import__("jax")
        importlib.import_module(".relative", package="disc_tf")

    try:
        import paddle
    except ImportError:
        pass
    """
)


def test_scanner_finds_every_forbidden_import_form():
    found = violations("disc_tf", BAD_BRIDGE_SOURCE, "bad.py")
    assert found == [
        "bad.py:9: disc_tf must not import torch.nn",
        "bad.py:10: disc_tf must not import disc_paddle.ops",
        "bad.py:11: disc_tf must not import disc_torch.compile",
        "bad.py:12: disc_tf must not import jax",
        "bad.py:16: disc_tf must not import paddle",
    ]


def test_scanner_applies_each_layer_rule():
    source = "from disc_runtime import load\nfrom disc_core import ir\nimport torch\n"
    assert violations("disc_torch", source) == []
    assert violations("disc_core", source) == ["<string>:3: disc_core must not import torch"]
    assert violations("disc_runtime", source) == [
        "<string>:2: disc_runtime must not import disc_core",
        "<string>:3: disc_runtime must not import torch",
    ]
    assert violations("disc_core", "import jaxlib.mlir.ir\nimport numpy\n") == []


# ---------------------------------------------------------------- static: the real tree


def test_every_package_has_a_rule():
    tree = source_tree()
    unknown = sorted(set(tree) - set(ALLOWED))
    assert not unknown, f"top-level packages without a dependency rule: {unknown}; add them here"
    for dist, top in EXPECTED_PACKAGES.items():
        assert (PACKAGES / dist / "src" / top).is_dir(), f"missing packages/{dist}/src/{top}"


def test_sources_obey_the_dependency_rule():
    tree = source_tree()
    assert sum(len(files) for files in tree.values()) > 0, "scanned no source file"
    found = [
        problem
        for package, files in tree.items()
        for path in files
        for problem in violations(package, path.read_text(), str(path.relative_to(REPO)))
    ]
    assert not found, "dependency rule broken:\n" + "\n".join(found)


# ---------------------------------------------------------------- dynamic: fresh interpreters

PROBE = r"""
import importlib, json, pkgutil, sys

forbidden = set(json.loads(sys.argv[1]))
attempts = []


class RefuseForbidden:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in forbidden:
            attempts.append(name)
            raise ImportError(f"dependency rule: {name} must not be imported here")
        return None


sys.meta_path.insert(0, RefuseForbidden())
failed = {}
for package in json.loads(sys.argv[2]):
    module = importlib.import_module(package)  # a failure here fails the test
    for info in pkgutil.walk_packages(module.__path__, package + ".", onerror=lambda n: None):
        if info.name.rpartition(".")[2] == "__main__":
            continue
        try:
            importlib.import_module(info.name)
        except BaseException as exc:  # reported, not fatal: the static scan still covers it
            failed[info.name] = f"{type(exc).__name__}: {exc}"
leaked = sorted(m for m in sys.modules if m.partition(".")[0] in forbidden)
print(json.dumps({"attempts": attempts, "leaked": leaked, "failed": failed}))
"""


def run_probe(imports: list[str], forbidden: frozenset[str], tmp_path: Path) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(sorted(forbidden)), json.dumps(imports)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, f"importing {imports} failed:\n{result.stderr}"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    not_checked = {
        name: why for name, why in report["failed"].items() if "dependency rule:" not in why
    }
    if not_checked:
        warnings.warn(
            f"modules that failed to import, not checked dynamically: {not_checked}", stacklevel=2
        )
    return report


def test_importing_disc_runtime_pulls_in_nothing_of_ours_and_no_framework(tmp_path):
    report = run_probe([RUNTIME], GUARDED - {RUNTIME}, tmp_path)
    assert report["attempts"] == []
    assert report["leaked"] == []


def test_importing_disc_core_pulls_in_no_bridge_and_no_framework(tmp_path):
    report = run_probe([RUNTIME, CORE], FRAMEWORKS | frozenset(BRIDGES), tmp_path)
    assert report["attempts"] == []
    assert report["leaked"] == []


def test_probe_catches_a_forbidden_import(tmp_path):
    # A package (on sys.path through the probe's working directory) whose submodule imports a
    # framework through a computed name, and swallows the ImportError: only the probe sees it.
    fake = tmp_path / "disc_fake"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "sneaky.py").write_text(
        "import importlib\n"
        "try:\n"
        "    importlib.import_module('tor' + 'ch')\n"
        "except ImportError:\n"
        "    pass\n"
    )
    report = run_probe(["disc_fake"], frozenset({"torch"}), tmp_path)
    assert report["attempts"] == ["torch"]
    assert report["leaked"] == []
