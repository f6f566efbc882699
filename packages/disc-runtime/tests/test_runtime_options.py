"""Declared options (disc_runtime.options): parsing, precedence, tables, their docs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from disc_runtime.options import (
    RUNTIME_OPTIONS,
    Option,
    OptionTable,
    markdown,
    parse_bool,
    parse_flag,
    parse_int,
    parse_names,
    parse_not_zero,
)

TABLE = OptionTable("pkg", (
    Option("size", "X_SIZE", 2, "How many.", parse=parse_int),
    Option("names", "X_NAMES", frozenset(), "Which.", parse=parse_names),
    Option("check", "X_CHECK", False, "Whether.", parse=parse_bool),
    Option("path", "X_PATH", None, "Where.", env_only=True),
    Option("tol", None, 1e-4, "How close."),
))


def test_environment_values_override_defaults_and_empty_means_unset() -> None:
    env = {"X_SIZE": "5", "X_NAMES": "a, b,,", "X_CHECK": "yes", "X_PATH": "/r"}
    assert [TABLE.value(o.name, env) for o in TABLE] == [5, {"a", "b"}, True, "/r", 1e-4]
    assert TABLE.value("size", {"X_SIZE": ""}) == 2
    assert TABLE["size"].from_env({}) == (False, 2)
    assert TABLE["tol"].from_env({"X_TOL": "1"}) == (False, 1e-4)  # code only


@pytest.mark.parametrize("env, message", [({"X_SIZE": "x"}, "X_SIZE='x': expected an integer"),
                                          ({"X_CHECK": "maybe"}, "X_CHECK='maybe': expected")])
def test_bad_values_name_the_variable(env, message) -> None:
    with pytest.raises(ValueError, match=message):
        TABLE.value(next(iter(o.name for o in TABLE if o.env in env)), env)


def test_parsers() -> None:
    assert [parse_bool(s) for s in ("1", "TRUE", "yes", "0", "False", "no")] == [True] * 3 + [
        False] * 3
    assert parse_flag("anything") and not parse_flag("")
    assert parse_not_zero("1") and parse_not_zero("x") and not parse_not_zero("0")
    assert parse_names(" a,b ,, c") == {"a", "b", "c"}


def test_tables() -> None:
    assert "size" in TABLE and "bogus" not in TABLE
    with pytest.raises(KeyError, match="pkg has no option 'bogus'"):
        TABLE["bogus"]
    assert TABLE.env_vars() == {"size": "X_SIZE", "names": "X_NAMES", "check": "X_CHECK",
                                "path": "X_PATH"}
    sub = TABLE.extend("child", [Option("own", "X_OWN", 1, "Own.")], only=("check", "size"))
    assert [o.name for o in sub] == ["size", "check", "own"] and sub.layer == "child"
    assert sub["size"] is TABLE["size"]
    with pytest.raises(ValueError, match="duplicate"):
        OptionTable("dup", (TABLE["size"], TABLE["size"]))


def test_markdown_lists_every_option() -> None:
    text = markdown([TABLE])
    assert text.startswith("### pkg\n")
    assert "| `size` | `X_SIZE` | `2` | int | How many. |" in text
    assert "| (environment only) | `X_PATH` | unset | text | Where. |" in text
    assert "| `tol` | (code only) | `0.0001` | float | How close. |" in text
    assert "| `names` | `X_NAMES` | empty | names | Which. |" in text


def test_runtime_table_is_what_the_runtime_reads(monkeypatch, tmp_path) -> None:
    from disc_runtime import default_cache_dir

    assert set(RUNTIME_OPTIONS.env_vars().values()) == {
        "DISC_CACHE_DIR", "DISC_CACHE_LOCK_TIMEOUT", "DISC_BLAS_LIB", "DISC_BLAS_TUNE",
        "DISC_DEBUG"}
    assert RUNTIME_OPTIONS.value("cache_lock_timeout") == 600
    monkeypatch.setenv("DISC_CACHE_DIR", str(tmp_path))
    assert default_cache_dir() == tmp_path
    monkeypatch.setenv("DISC_BLAS_TUNE", "0")
    assert RUNTIME_OPTIONS.value("blas_tune") is False
    monkeypatch.setenv("DISC_BLAS_TUNE", "")
    assert RUNTIME_OPTIONS.value("blas_tune") is True


def test_options_module_and_package_import_without_numpy() -> None:
    code = ("import sys, disc_runtime, disc_runtime.options\n"
            "assert 'numpy' not in sys.modules, 'numpy imported'\n"
            "from disc_runtime import CompileCache\n"
            "assert disc_runtime.cache.CompileCache is CompileCache\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
