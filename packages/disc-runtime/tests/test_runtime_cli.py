from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from disc_runtime_testkit import AFFINE_SIGNATURE, subprocess_env, write_affine

from disc_runtime import Artifact
from disc_runtime.cli import main

# Runs the CLI in a fresh interpreter after registering the test engine programmatically,
# exactly as an engine package would make itself available.
WITH_TEST_ENGINE = (
    "import sys; from disc_runtime_testkit import register_test_engines; "
    "register_test_engines(); from disc_runtime.cli import main; sys.exit(main(sys.argv[1:]))"
)


def run_cli(*args: str, register: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", WITH_TEST_ENGINE] if register else [sys.executable, "-m"]
    if not register:
        cmd.append("disc_runtime")
    return subprocess.run(
        [*cmd, *args], env=subprocess_env(), capture_output=True, text=True, timeout=60
    )


def save(path: Path, array: np.ndarray) -> str:
    np.save(path, array)
    return str(path)


def test_end_to_end(tmp_path: Path) -> None:
    art = write_affine(tmp_path / "art", scale=2.0)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.ones((2, 3), np.float32)
    out = tmp_path / "out"
    r = run_cli(
        str(art.directory),
        "--inputs",
        save(tmp_path / "x.npy", x),
        save(tmp_path / "y.npy", y),
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert r.stdout.splitlines() == [f"output #0 'z': float32 (2, 3) -> {out / 'output_0.npy'}"]
    np.testing.assert_allclose(np.load(out / "output_0.npy"), x * 2 + y)

    quiet = run_cli(
        str(art.directory), "--inputs", str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), "--quiet"
    )
    assert quiet.returncode == 0 and quiet.stdout == ""


def _assert_one_error_line(r: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("disc-run: error: ")
    for fragment in fragments:
        assert fragment in lines[0]


def test_missing_artifact(tmp_path: Path) -> None:
    r = run_cli(str(tmp_path / "nope"), "--out", str(tmp_path / "o"), register=False)
    _assert_one_error_line(r, "does not exist", str(tmp_path / "nope"))


def test_corrupt_artifact(tmp_path: Path) -> None:
    art = write_affine(tmp_path / "art")
    (art.directory / "params.json").write_text('{"scale": 100}')
    r = run_cli(str(art.directory), register=False)
    _assert_one_error_line(r, "'params.json'", "expected sha256")


def test_bad_inputs(tmp_path: Path) -> None:
    art = write_affine(tmp_path / "art")
    x = save(tmp_path / "x.npy", np.zeros((2, 3), np.float32))
    y = save(tmp_path / "y.npy", np.zeros((4, 3), np.float32))
    r = run_cli(str(art.directory), "--inputs", x, y)
    _assert_one_error_line(r, "input #1 'y': dim 0 is 4 but symbol B = 2 from input #0 'x' dim 0")
    r = run_cli(str(art.directory), "--inputs", x)
    _assert_one_error_line(r, "expected 2 inputs (x, y), got 1")
    r = run_cli(str(art.directory), "--inputs", x, str(tmp_path / "missing.npy"))
    _assert_one_error_line(r, "input #1: file", "does not exist")
    (tmp_path / "junk.npy").write_text("not numpy")
    r = run_cli(str(art.directory), "--inputs", x, str(tmp_path / "junk.npy"))
    _assert_one_error_line(r, "input #1: cannot read")


def test_engine_missing(tmp_path: Path) -> None:
    Artifact.write(
        tmp_path / "art",
        name="g",
        engine="engine-nobody-provides",
        target="cpu",
        signature=AFFINE_SIGNATURE,
        files={},
    )
    r = run_cli(str(tmp_path / "art"), register=False)
    _assert_one_error_line(
        r, "artifact needs engine 'engine-nobody-provides', which no installed package provides"
    )


def test_reference_engine_hint(tmp_path: Path) -> None:
    from importlib.metadata import entry_points

    if any(ep.name == "reference" for ep in entry_points(group="disc_runtime.engines")):
        pytest.skip("an installed package provides the reference engine")
    Artifact.write(
        tmp_path / "art",
        name="g",
        engine="reference",
        target="cpu",
        signature=AFFINE_SIGNATURE,
        files={},
    )
    r = run_cli(str(tmp_path / "art"), register=False)
    _assert_one_error_line(r, "it comes with disc-core: pip install disc-core")


def test_engine_crash_is_internal_error_exit_1(tmp_path: Path) -> None:
    art = write_affine(tmp_path / "art")
    manifest = json.loads((art.directory / "manifest.json").read_text())
    assert manifest["engine"] == "test-affine"
    x = save(tmp_path / "x.npy", np.zeros((2, 3), np.float32))
    script = (
        "import sys; from disc_runtime import register_engine; "
        "from disc_runtime.cli import main\n"
        "def load(a):\n"
        "    def run(inputs):\n"
        "        raise ZeroDivisionError('boom')\n"
        "    return run\n"
        "register_engine('test-affine', load)\n"
        "sys.exit(main(sys.argv[1:]))"
    )
    r = subprocess.run(
        [sys.executable, "-c", script, str(art.directory), "--inputs", x, x],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1
    assert r.stderr.splitlines() == [
        "disc-run: internal error: ZeroDivisionError: boom (set DISC_DEBUG=1 for a traceback)"
    ]


def test_main_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    art = write_affine(tmp_path / "art")
    x = save(tmp_path / "x.npy", np.ones((1, 1), np.float32))
    assert main([str(art.directory), "--inputs", x, x]) == 0
    assert capsys.readouterr().out == "output #0 'z': float32 (1, 1)\n"
    assert main([str(tmp_path / "missing")]) == 2
    assert main(["--bogus"]) == 2  # usage errors return too (no SystemExit)


def test_usage_error_is_one_line() -> None:
    r = run_cli("art", "--bogus", register=False)
    _assert_one_error_line(r, "unrecognized arguments: --bogus")


def test_version_flag() -> None:
    r = run_cli("--version", register=False)
    assert r.returncode == 0 and r.stdout.startswith("disc-run ")
