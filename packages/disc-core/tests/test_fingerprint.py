"""The compiler fingerprint (part of every cache key) changes with any source the generated
code depends on: Python, and the C files the modules include; its memo beside the cache
spares a later process the hashing only while no source file's name, mtime or size
changed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import disc_core.fingerprint as fingerprint
from disc_core.fingerprint import compiler_fingerprint, source_fingerprint


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory, monkeypatch):
    """Memos of these throwaway trees go to a cache of the test's own."""
    monkeypatch.setenv("DISC_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


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


def test_the_hash_is_kept_and_reused_while_the_listing_stands(tmp_path: Path, monkeypatch):
    src = tmp_path / "src"
    (src / "native").mkdir(parents=True)
    (src / "a.py").write_text("x = 1\n")
    (src / "native" / "k.c").write_text("int k;\n")
    first = source_fingerprint(src)
    memo = fingerprint._memo_file(src)
    assert json.loads(memo.read_text())["hash"] == first

    def no_hashing(*args):
        raise AssertionError("hashed again")

    monkeypatch.setattr(fingerprint, "_digest", no_hashing)
    assert source_fingerprint(src) == first  # a later process: the memo, no reading


def test_a_same_size_rewrite_with_a_new_mtime_is_hashed_again(tmp_path: Path):
    path = tmp_path / "a.py"
    path.write_text("x = 1\n")
    before = source_fingerprint(tmp_path)
    st = path.stat()
    path.write_text("x = 2\n")  # the same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    after = source_fingerprint(tmp_path)
    assert after != before
    assert after == fingerprint._digest(tmp_path, fingerprint._listing(tmp_path))


def test_a_corrupt_or_unwritable_memo_still_gives_the_right_hash(tmp_path: Path,
                                                                 monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text("x = 1\n")
    right = fingerprint._digest(src, fingerprint._listing(src))
    memo = fingerprint._memo_file(src)
    memo.parent.mkdir(parents=True, exist_ok=True)
    for junk in ("{not json", '{"files": 3, "hash": 4}', "[]"):
        memo.write_text(junk)
        assert source_fingerprint(src) == right
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(fingerprint, "_memo_file", lambda root: blocker / "memo.json")
    assert source_fingerprint(src) == right  # the memo cannot be written: hashed each time
