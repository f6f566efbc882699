"""Bridge options resolve the same way in every bridge: defaults < environment < code."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from disc_core.options import resolve_options


@dataclass(frozen=True)
class Opts:
    size: int = 2
    names: frozenset[str] = field(default_factory=frozenset)
    check: bool = False
    path: str | None = None


ENV = {"size": "X_SIZE", "names": "X_NAMES", "check": "X_CHECK", "path": "X_PATH"}


def test_environment_values_are_parsed_by_the_default_type_and_code_wins():
    env = {"X_SIZE": "5", "X_NAMES": "a, b,,", "X_CHECK": "yes", "X_PATH": "/r.json"}
    got = resolve_options(Opts, {}, env, ENV, "pkg")
    assert got == Opts(5, frozenset({"a", "b"}), True, "/r.json")
    assert resolve_options(Opts, {"size": 3}, env, ENV, "pkg").size == 3
    assert resolve_options(Opts, None, {"X_SIZE": ""}, ENV, "pkg") == Opts()


@pytest.mark.parametrize("env, message", [({"X_SIZE": "x"}, "X_SIZE='x': expected an integer"),
                                          ({"X_CHECK": "maybe"}, "X_CHECK='maybe': expected")])
def test_bad_environment_values_name_the_variable(env, message):
    with pytest.raises(ValueError, match=message):
        resolve_options(Opts, {}, env, ENV, "pkg")


def test_unknown_option_names_the_package_and_its_options():
    with pytest.raises(TypeError, match="unknown pkg option 'bogus'; options are check, names"):
        resolve_options(Opts, {"bogus": 1}, {}, ENV, "pkg")
