"""Every DISC setting is declared in one option table per layer and documented.

* No module under packages/*/src reads a ``DISC_*`` environment variable itself
  (``os.environ.get("DISC_X")``, ``os.getenv``, ``os.environ["DISC_X"]``, ``"DISC_X" in
  os.environ``): reads go through the tables (``disc_runtime.options``,
  ``disc_core.options``, each bridge's ``config.OPTIONS``), so the tables are complete.
  ``DISC_*`` names inside generated C code (``DISC_SIMD``...) are macros, not variables.
* docs/configuration.md holds the tables as generated from the declarations
  (``python tests-integration/test_configuration.py --write`` regenerates it).
* The bridges' config dataclasses have exactly their table's code options as fields, with
  the declared defaults, and resolve environment values through the table.

Bridge config modules are loaded from their files (they import only disc_core and
disc_runtime), so this runs without any framework installed.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from disc_core.options import BRIDGE_OPTIONS, CORE_OPTIONS, configuration_markdown
from disc_runtime.options import RUNTIME_OPTIONS, OptionTable

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "configuration.md"
BEGIN, END = "<!-- options:begin (generated) -->", "<!-- options:end -->"
#: bridge -> its config module (each declares OPTIONS, ENV_VARS and DiscConfig)
BRIDGE_CONFIGS = {
    "disc_torch": REPO / "packages/disc-torch/src/disc_torch/config.py",
    "disc_tf": REPO / "packages/disc-tf/src/disc_tf/config.py",
    "disc_paddle": REPO / "packages/disc-paddle/src/disc_paddle/config.py",
}


def load_config(bridge: str) -> ModuleType:
    name = f"_config_of_{bridge}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BRIDGE_CONFIGS[bridge])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def bridge_tables() -> list[OptionTable]:
    return [load_config(bridge).OPTIONS for bridge in BRIDGE_CONFIGS]


def all_tables() -> list[OptionTable]:
    return [RUNTIME_OPTIONS, CORE_OPTIONS, BRIDGE_OPTIONS, *bridge_tables()]


def generated() -> str:
    return configuration_markdown(*bridge_tables())


def _env_read(node: ast.AST) -> str | None:
    """The literal variable name a node reads from the environment, if any."""
    def literal(n: ast.AST | None) -> str | None:
        return n.value if isinstance(n, ast.Constant) and isinstance(n.value, str) else None

    def is_environ(n: ast.AST) -> bool:
        return (isinstance(n, ast.Attribute) and n.attr == "environ") or (
            isinstance(n, ast.Name) and n.id == "environ")

    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        f = node.func
        if (f.attr in ("get", "pop", "setdefault") and is_environ(f.value)) or f.attr == "getenv":
            return literal(node.args[0])
    if isinstance(node, ast.Subscript) and is_environ(node.value):
        return literal(node.slice)
    if isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
        return literal(node.left)
    return None


def direct_env_reads() -> list[str]:
    found = []
    for path in sorted((REPO / "packages").glob("*/src/**/*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            var = _env_read(node)
            if var and var.startswith("DISC_"):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {var}")
    return found


def test_disc_variables_are_read_only_through_the_option_tables() -> None:
    assert direct_env_reads() == []


def test_the_scan_sees_every_form_of_environment_read() -> None:
    forms = ['os.environ.get("DISC_A")', 'os.getenv("DISC_B", "1")', 'os.environ["DISC_C"]',
             '"DISC_D" in os.environ', 'environ.get("DISC_E")']
    got = [_env_read(ast.parse(src, mode="eval").body) for src in forms]
    assert got == ["DISC_A", "DISC_B", "DISC_C", "DISC_D", "DISC_E"]


def test_every_variable_has_one_meaning() -> None:
    names: dict[str, set[str]] = {}
    for table in all_tables():
        for option in table:
            if option.env is not None:
                names.setdefault(option.env, set()).add(option.name)
    # DISC_REPORT is disc-core's report file and the bridges' report_path option: one file
    assert {var: n for var, n in names.items() if len(n) > 1} == {
        "DISC_REPORT": {"report", "report_path"}}
    assert len(names) == 24, sorted(names)  # a new variable is a documented decision


def test_the_docs_hold_the_generated_tables() -> None:
    text = DOC.read_text()
    assert BEGIN in text and END in text, f"{DOC} lacks the {BEGIN} / {END} markers"
    body = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert body.strip() == generated().strip(), (
        "docs/configuration.md is out of date: python tests-integration/"
        "test_configuration.py --write")
    for table in all_tables():
        for option in table:
            if option.env:
                assert f"`{option.env}`" in text


@pytest.mark.parametrize("bridge", sorted(BRIDGE_CONFIGS))
def test_bridge_configs_are_built_on_their_tables(bridge) -> None:
    mod = load_config(bridge)
    table: OptionTable = mod.OPTIONS
    fields = {f.name: f for f in dataclasses.fields(mod.DiscConfig)}
    code_options = [o.name for o in table if not o.env_only]
    assert list(fields) == [n for n in fields if n in code_options]
    assert set(fields) == set(code_options)
    default = mod.DiscConfig()
    for name in fields:
        assert getattr(default, name) == table[name].default, name
    assert mod.ENV_VARS == {o.name: o.env for o in table if o.env and not o.env_only}
    for name in ("min_cluster_size", "excluded_ops", "report_path", "target"):
        assert table[name] is BRIDGE_OPTIONS[name]  # the shared declaration itself
    cfg = mod.DiscConfig.resolve({"target": "reference"}, {
        "DISC_MIN_CLUSTER_SIZE": "5", "DISC_EXCLUDE_OPS": "a, b", "DISC_TARGET": "native"})
    assert (cfg.min_cluster_size, cfg.excluded_ops, cfg.target) == (5, {"a", "b"}, "reference")
    with pytest.raises(ValueError, match="DISC_MIN_CLUSTER_SIZE='x': expected an integer"):
        mod.DiscConfig.resolve({}, {"DISC_MIN_CLUSTER_SIZE": "x"})


def write_docs() -> None:
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    DOC.write_text(f"{head}{BEGIN}\n\n{generated().strip()}\n\n{END}{tail}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_docs()
    else:
        print(generated())
