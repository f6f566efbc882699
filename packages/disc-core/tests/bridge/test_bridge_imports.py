"""No import cycles inside the bridge kit or any bridge package.

Every import counts, including the ones inside functions: a cycle hidden behind a lazy
import is still two modules that cannot be understood (or loaded) one without the other.
The fix is moving the shared piece into a module of its own (as ``disc_torch.context``,
``disc_torch.compilers`` and ``disc_core.bridge`` did), not a later import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGES = Path(__file__).resolve().parents[3]
TREES = {
    "disc_core.bridge": PACKAGES / "disc-core/src/disc_core/bridge",
    "disc_torch": PACKAGES / "disc-torch/src/disc_torch",
    "disc_tf": PACKAGES / "disc-tf/src/disc_tf",
    "disc_paddle": PACKAGES / "disc-paddle/src/disc_paddle",
}


def _modules(root: str, tree: Path) -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in tree.rglob("*.py"):
        parts = [*root.split("."), *path.relative_to(tree).with_suffix("").parts]
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _imports(name: str, path: Path, is_pkg: bool, known: set[str]) -> set[str]:
    package = name if is_pkg else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                      for a in node.names}
    return {m for m in found if m in known and m != name}


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(edges[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        state[m] = 2
        stack.pop()
        return None

    for m in sorted(edges):
        if m not in state and (found := visit(m)):
            return found
    return None


@pytest.mark.parametrize("root", sorted(TREES))
def test_no_import_cycles(root):
    tree = TREES[root]
    if not tree.is_dir():
        pytest.skip(f"{tree} is not in this checkout")
    mods = _modules(root, tree)
    edges = {m: _imports(m, p, pkg, set(mods)) for m, (p, pkg) in mods.items()}
    assert _cycle(edges) is None, " -> ".join(_cycle(edges) or [])


def test_the_checker_finds_a_lazy_cycle(tmp_path):
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "a.py").write_text("from . import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import x\n")
    mods = _modules("pkg", tmp_path)
    edges = {m: _imports(m, p, pkg, set(mods)) for m, (p, pkg) in mods.items()}
    assert _cycle(edges) == ["pkg.a", "pkg.b", "pkg.a"]
