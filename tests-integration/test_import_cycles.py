"""No import cycles inside DISC's packages.

Every import counts: at module level, inside functions, in try/except; only imports under
``if TYPE_CHECKING:`` are left out (they never run). ``from pkg import name`` counts as an
import of ``pkg.name`` when that is a module of ours, else of ``pkg``; importing a module
is not counted as importing its parent packages (every submodule would otherwise sit in a
cycle with an ``__init__`` that re-exports it). A cycle is reported as its strongly
connected component with the imports that close it, so the fix (moving the shared piece
into a module of its own) can be read off the message.

The bridges are checked by adding them to ``CHECKED`` (one line each).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: top-level package -> its source folder
PACKAGE_DIRS = {
    "disc_runtime": REPO / "packages/disc-runtime/src/disc_runtime",
    "disc_core": REPO / "packages/disc-core/src/disc_core",
    "disc_torch": REPO / "packages/disc-torch/src/disc_torch",
    "disc_tf": REPO / "packages/disc-tf/src/disc_tf",
    "disc_paddle": REPO / "packages/disc-paddle/src/disc_paddle",
}
#: the packages that must be free of cycles: all of them
CHECKED = ("disc_runtime", "disc_core", "disc_torch", "disc_tf", "disc_paddle")

#: Cycles known and owned elsewhere, each as the set of modules of its component. Every
#: entry must still exist (the test says when one can go) and no other cycle may appear.
KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()


def module_files(package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``package``."""
    root = PACKAGE_DIRS[package]
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _statements(body: Iterable[ast.AST]) -> Iterable[ast.AST]:
    """Every node under ``body``, skipping the bodies of ``if TYPE_CHECKING:``."""
    for node in body:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _statements(node.orelse)
            continue
        yield node
        yield from _statements(ast.iter_child_nodes(node))


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules among ``known`` that module ``name`` (at ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in _statements(ast.parse(path.read_text(), str(path)).body):
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            submodules = {f"{source}.{a.name}" for a in node.names} & known
            targets.update(submodules if len(submodules) == len(node.names) else
                           {source, *submodules})
    resolved = set()
    for target in targets:
        parts = target.split(".")
        while parts and ".".join(parts) not in known:
            parts.pop()
        if parts and ".".join(parts) != name:
            resolved.add(".".join(parts))
    return resolved


def import_graph(packages: Iterable[str]) -> dict[str, set[str]]:
    files: dict[str, Path] = {}
    for package in packages:
        files.update(module_files(package))
    known = set(files)
    return {name: imports_of(name, path, known) for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def describe(component: list[str], graph: dict[str, set[str]]) -> str:
    inside = set(component)
    return "\n".join(f"  {m} -> {', '.join(sorted(graph[m] & inside))}" for m in component)


def test_no_import_cycles() -> None:
    graph = import_graph(CHECKED)
    found = cycles(graph)
    new = [c for c in found if frozenset(c) not in KNOWN_CYCLES]
    assert not new, "import cycles:\n" + "\n\n".join(describe(c, graph) for c in new)
    gone = KNOWN_CYCLES - {frozenset(c) for c in found}
    assert not gone, f"no longer cycles, remove them from KNOWN_CYCLES: {sorted(map(sorted, gone))}"


def test_the_scan_sees_cycles_through_function_level_imports(tmp_path, monkeypatch) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import x\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from .a import y\nfrom . import a\n")
    monkeypatch.setitem(PACKAGE_DIRS, "pkg", pkg)
    graph = import_graph(["pkg"])
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.a"}
    assert graph["pkg.c"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
