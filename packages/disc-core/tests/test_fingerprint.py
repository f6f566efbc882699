"""The compiler fingerprint (part of every cache key) changes with any source the generated
code depends on: Python, and the C files the modules include."""

from __future__ import annotations

from pathlib import Path

import pytest

from disc_core.fingerprint import compiler_fingerprint, source_fingerprint


@pytest.mark.parametrize("name", ["pass.py", "native/csrc/kernel.c", "native/csrc/prelude.h"])
def test_a_changed_source_file_changes_the_fingerprint(tmp_path: Path, name: str):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("first\n")
    before = source_fingerprint(tmp_path)
    path.write_text("second\n")
    assert source_fingerprint(tmp_path) != before


def test_unrelated_files_do_not_change_it(tmp_path: Path):
    (tmp_path / "a.py").write_text("x = 1\n")
    before = source_fingerprint(tmp_path)
    (tmp_path / "notes.txt").write_text("anything\n")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert source_fingerprint(tmp_path) == before


def test_disc_cores_fingerprint_covers_its_c_sources():
    import disc_core.fingerprint as fp

    csrc = Path(fp.__file__).parent / "native" / "csrc"
    assert any(csrc.glob("*.c")) and any(csrc.glob("*.h"))
    real = source_fingerprint(Path(fp.__file__).parent)
    assert compiler_fingerprint() == real
