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


# -- the declared tables (disc_core.options) ----------------------------------------------

def test_core_table_is_what_the_compiler_reads(monkeypatch) -> None:
    from disc_core.native import build as native_build
    from disc_core.options import CORE_OPTIONS

    assert CORE_OPTIONS.env_vars() == {"cc": "DISC_CC", "compile_units": "DISC_COMPILE_UNITS",
                                       "report": "DISC_REPORT",
                                       "bisect_clusters": "DISC_BISECT_CLUSTERS",
                                       "bisect_dump": "DISC_BISECT_DUMP",
                                       "fused_attention": "DISC_FUSED_ATTENTION",
                                       "onednn_conv": "DISC_ONEDNN_CONV",
                                       "gemm_fusion": "DISC_GEMM_FUSION"}
    monkeypatch.setenv("DISC_COMPILE_UNITS", "3")
    assert native_build.compile_units() == 3
    monkeypatch.setenv("DISC_COMPILE_UNITS", "many")
    with pytest.raises(ValueError, match="DISC_COMPILE_UNITS='many': expected an integer"):
        native_build.compile_units()


def test_bridge_tables_share_the_declarations() -> None:
    from disc_core.options import BRIDGE_OPTIONS, bridge_table, resolve_config
    from disc_runtime.options import Option, parse_bool

    table = bridge_table("pkg", ("excluded_ops", "min_cluster_size"),
                         (Option("check", "X_CHECK", False, "Whether.", parse=parse_bool),))
    assert [o.name for o in table] == ["min_cluster_size", "excluded_ops", "check"]
    assert table["excluded_ops"] is BRIDGE_OPTIONS["excluded_ops"]
    with pytest.raises(KeyError, match="no shared bridge option"):
        bridge_table("pkg", ("nope",))

    @dataclass(frozen=True)
    class Config:
        min_cluster_size: int = 2
        excluded_ops: frozenset[str] = field(default_factory=frozenset)
        check: bool = False

    env = {"DISC_MIN_CLUSTER_SIZE": "4", "DISC_EXCLUDE_OPS": "a,b", "X_CHECK": "1"}
    assert resolve_config(Config, table, None, env, "pkg") == Config(4, frozenset("ab"), True)
    assert resolve_config(Config, table, {"check": False}, env, "pkg").check is False
    with pytest.raises(TypeError, match="unknown pkg option 'bogus'"):
        resolve_config(Config, table, {"bogus": 1}, {}, "pkg")
