"""The ``disc`` command end to end, in subprocesses: report, merge, cache, run, --version."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
import report_samples as samples

from disc_core import Compiler, parse_graph
from disc_core.report import Report, load, write_report
from disc_runtime import CompileCache


def disc(*args: str | Path, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "disc_core.cli", *map(str, args)], capture_output=True,
        text=True, cwd=cwd, timeout=120, env={**os.environ, **env},
    )


def one_error_line(result: subprocess.CompletedProcess, code: int = 2) -> str:
    assert result.returncode == code, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def files(tmp_path):
    out = {}
    for name, make in [("torch", samples.torch_report), ("tf", samples.tf_report),
                       ("issue", samples.issue_example)]:
        out[name] = write_report(make(), tmp_path / f"{name}.json")
    return out


def test_report_prints_the_summary(files):
    result = disc("report", files["issue"])
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("142 ops, 138 compiled (97.2%; 99.7% of FLOPs), 3 clusters, "
                            "9 kernels; top fallbacks: aten.nonzero x2 (data-dependent shape)")
    assert "fallbacks by reason:" in result.stdout and result.stderr == ""


def test_report_writes_html_and_markdown(files, tmp_path):
    html_out, md_out = tmp_path / "r.html", tmp_path / "r.md"
    result = disc("report", files["torch"], "--html", html_out, "--md", md_out)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("6 ops, 5 compiled")
    assert f"wrote HTML report to {html_out}" in result.stderr
    assert html_out.read_text().startswith("<!DOCTYPE html>")
    assert md_out.read_text().startswith("# DISC coverage report")
    md = disc("report", files["torch"], "--md")
    assert md.returncode == 0 and md.stdout.startswith("# DISC coverage report\n")


def test_merge_a_torch_and_a_tf_report(files, tmp_path):
    out = tmp_path / "merged.json"
    result = disc("report", "merge", files["torch"], files["tf"], "-o", out, "--md")
    assert result.returncode == 0, result.stderr
    assert f"wrote merged report (2 runs) to {out}" in result.stderr
    merged = load(out)
    assert [r.framework for r in merged.runs] == ["torch", "tensorflow"]
    assert merged == Report.merge([load(files["torch"]), load(files["tf"])])
    assert "| forward | torch |" in result.stdout and "| serving\\_default | tensorflow |" in (
        result.stdout)
    again = disc("report", out)
    assert again.returncode == 0 and again.stdout.startswith("16 ops, 12 compiled (75.0%")
    assert "  tensorflow 2.21.0 on cpu" in again.stdout


def test_merge_refuses_the_same_run_twice(files):
    line = one_error_line(disc("report", "merge", files["torch"], files["torch"]))
    assert line == ("disc: error: run 'r-torch' appears in more than one report "
                    "(the same file twice?)")


def test_error_lines(files, tmp_path):
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"schema": "disc-report", "schema_version": 99}))
    bad_node = samples.torch_report().to_dict()
    bad_node["graphs"][0]["nodes"][2]["status"] = "maybe"
    (tmp_path / "bad.json").write_text(json.dumps(bad_node))
    (tmp_path / "notjson.json").write_text("{oops")
    (tmp_path / "other.json").write_text('{"hello": 1}')
    cases = {
        ("report", tmp_path / "missing.json"):
            f"disc: error: {tmp_path / 'missing.json'}: no such file",
        ("report", newer): f"disc: error: {newer}: schema_version 99 is newer than this "
                           "disc-core reads (2); upgrade disc-core",
        ("report", tmp_path / "bad.json"):
            f"disc: error: {tmp_path / 'bad.json'}: graphs[0].nodes[2].status: expected one "
            "of 'compiled', 'fallback', got 'maybe'",
        ("report", tmp_path / "other.json"): f"disc: error: {tmp_path / 'other.json'}: not a "
                                             'DISC report (no "schema": "disc-report" field)',
        ("report", tmp_path): f"disc: error: {tmp_path}: is a directory, not a report file",
        ("report", "merge", files["tf"], newer): f"disc: error: {newer}: schema_version 99 is "
                                                  "newer than this disc-core reads (2); "
                                                  "upgrade disc-core",
        ("report", files["tf"], "--html", tmp_path / "no" / "x.html"):
            f"disc: error: cannot write HTML report to {tmp_path / 'no' / 'x.html'}: "
            "No such file or directory",
        ("report", "merge", files["tf"], "-o", tmp_path / "no" / "m.json"):
            f"disc: error: cannot write {tmp_path / 'no' / 'm.json'}: No such file or directory",
        (): "disc: error: a command is required: report, cache or run (see disc --help)",
        ("frobnicate",): "disc: error: argument COMMAND: invalid choice: 'frobnicate' "
                         "(choose from report, cache, run) (see disc --help)",
        ("report",): "disc: error: the following arguments are required: FILE.json "
                     "(see disc report --help)",
        ("report", "merge"): "disc: error: the following arguments are required: FILE.json "
                             "(see disc report merge --help)",
        ("cache", "wipe"): "disc: error: argument action: invalid choice: 'wipe' "
                           "(choose from info, clear) (see disc cache --help)",
    }
    for args, expected in cases.items():
        line = one_error_line(disc(*args))
        assert line.replace("'info', 'clear'", "info, clear").replace(
            "'report', 'cache', 'run'", "report, cache, run") == expected, args
    line = one_error_line(disc("report", tmp_path / "notjson.json"))
    assert line.startswith(f"disc: error: {tmp_path / 'notjson.json'}: not valid JSON: ")


def test_cache_info_and_clear(tmp_path):
    cache_dir = tmp_path / "cache"
    graph = parse_graph(
        "func @f(%x: f32[N]) -> (f32[N]) {\n  %0 = exp(%x) : f32[N]\n  return %0\n}\n")
    Compiler(CompileCache(cache_dir)).compile(graph)
    info = disc("cache", "info", "--dir", cache_dir)
    assert info.returncode == 0, info.stderr
    assert info.stdout.splitlines()[:2] == [f"cache: {cache_dir / 'v1'}", "entries: 1"]
    data = json.loads(disc("cache", "info", "--dir", cache_dir, "--json").stdout)
    assert data["entries"] == 1 and data["total_bytes"] > 0
    # what DISC keeps beside the entries goes too; nothing else in the directory does
    (cache_dir / "torch-graphs-v1").mkdir()
    (cache_dir / "torch-graphs-v1" / "k.pkl").write_bytes(b"x" * 10)
    (cache_dir / "objects-v1").mkdir()
    (cache_dir / "objects-v1" / "k.o").write_bytes(b"x" * 7)
    (cache_dir / "not-disc").mkdir()
    shown = disc("cache", "info", "--dir", cache_dir).stdout
    assert "torch-graphs-v1: 10 B" in shown and "objects-v1: 7 B" in shown
    cleared = disc("cache", "clear", "--dir", cache_dir)
    assert cleared.stdout.splitlines() == [
        f"removed 1 entry from {cache_dir / 'v1'}",
        f"removed {cache_dir / 'objects-v1'} (1 file)",
        f"removed {cache_dir / 'torch-graphs-v1'} (1 file)"]
    assert not (cache_dir / "torch-graphs-v1").exists() and (cache_dir / "not-disc").is_dir()
    assert not (cache_dir / "objects-v1").exists()
    env_info = disc("cache", "info", DISC_CACHE_DIR=str(cache_dir))
    assert "entries: 0" in env_info.stdout


def test_run_is_disc_run(tmp_path):
    graph = parse_graph(
        "func @f(%x: f32[N]) -> (f32[N]) {\n  %0 = exp(%x) : f32[N]\n  return %0\n}\n")
    exe = Compiler(CompileCache(tmp_path / "cache")).compile(graph)
    x = np.arange(5, dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    result = disc("run", exe.artifact.directory, "--inputs", tmp_path / "x.npy",
                  "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("output #0 'output_0': float32 (5,)")
    np.testing.assert_allclose(np.load(tmp_path / "out" / "output_0.npy"), np.exp(x), rtol=1e-6)
    missing = one_error_line(disc("run", tmp_path / "nope"))
    assert missing.startswith("disc-run: error:")


def test_version_lists_packages_and_frameworks_without_importing_them():
    probe = textwrap.dedent(
        """
        import sys
        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name.partition(".")[0] in {"torch", "tensorflow", "paddle", "jax"}:
                    raise ImportError("framework imported: " + name)
        sys.meta_path.insert(0, Refuse())
        from disc_core.cli import main
        sys.exit(main(["--version"]))
        """
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    core = metadata.version("disc-core")
    assert lines[0] == f"disc (disc-core {core})"
    assert lines[1] == "DISC packages:"
    assert f"  disc-core     {core}" in lines
    assert f"  disc-runtime  {metadata.version('disc-runtime')}" in lines
    assert any(line.startswith("  disc-torch ") for line in lines)
    assert lines[lines.index("frameworks:") + 1:][0].startswith("  torch ")
    assert [line.split()[0] for line in lines[lines.index("frameworks:") + 1:]] == [
        "torch", "tensorflow", "paddle"]


def test_console_script_is_installed():
    entries = list(metadata.entry_points(group="console_scripts", name="disc"))
    assert [e.value for e in entries] == ["disc_core.cli:main"], (
        "disc-core's metadata declares no `disc` script: reinstall disc-core (tox -r)")
    script = Path(sys.executable).parent / "disc"
    script = script if script.exists() else shutil.which("disc")
    assert script, "the `disc` console script is not on PATH: reinstall disc-core"
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and result.stdout.startswith("disc (disc-core ")


def test_help_names_every_command_the_dispatcher_takes():
    """Commands dispatched before argparse (run, report, bisect, compile, export) are named
    in ``disc --help`` and the module docstring, so a user finds them."""
    from disc_core import cli

    result = disc("--help")
    assert result.returncode == 0, result.stderr
    dispatched = ["run", "report", "bisect", "compile", "export", "cache"]
    for command in dispatched:
        assert f"disc {command}" in " ".join(result.stdout.split()) or (
            f"    {command} " in result.stdout), command
        assert f"disc {command}" in cli.__doc__, command
