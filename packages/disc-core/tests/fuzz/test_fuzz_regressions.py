"""Every graph the fuzzer (or a bug report) found a native-engine bug with, replayed.

Each ``regressions/*.disc`` file is a graph in the text form with its shape bindings in a
``// bindings: [...]`` comment line (JSON), and comments saying what went wrong. A line
``// expect: native`` also fails the test when the graph falls back to the interpreter (for
findings where the native engine rejected a graph). Add a file per fixed fuzz finding: the
judgement is the fuzzer's own (fuzz_check.check_case).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fuzz_check import check_case
from fuzz_graphs import FuzzCase

from disc_core import Compiler, parse_graph
from disc_runtime import CompileCache

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
FILES = sorted((Path(__file__).parent / "regressions").glob("*.disc"))


def load_case(path: Path) -> FuzzCase:
    text = path.read_text()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("// bindings:")]
    return FuzzCase(parse_graph(text), json.loads(line.split(":", 1)[1]), seed=0)


def test_there_are_regressions() -> None:
    assert FILES


@pytest.fixture(scope="module")
def compiler(tmp_path_factory) -> Compiler:
    return Compiler(CompileCache(tmp_path_factory.mktemp("fuzz-regressions")),
                    target="native")


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_regression(compiler: Compiler, path: Path) -> None:
    check_case(compiler, load_case(path),
               require_native="// expect: native" in path.read_text().splitlines())
