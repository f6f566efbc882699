from __future__ import annotations

import json
from pathlib import Path

import pytest
from disc_runtime_testkit import AFFINE_SIGNATURE

from disc_runtime import (
    Artifact,
    ArtifactFormatError,
    ArtifactNotFoundError,
    CorruptArtifactError,
    __version__,
)
from disc_runtime.artifact import sha256_bytes

SO_BYTES = bytes(range(256)) * 10  # arbitrary binary, like a native module


def write_full(path: Path) -> Artifact:
    return Artifact.write(
        path,
        name="g",
        engine="test-affine",
        target="x86_64-avx2",
        signature=AFFINE_SIGNATURE,
        files={"graph.disc": "graph text ✓", "native/module.so": SO_BYTES},
        metadata={"passes": ["a", "b"], "n": 3},
        key="ab" * 32,
        producer={"disc-core": "9.9"},
    )


def test_round_trip(tmp_path: Path) -> None:
    dest = tmp_path / "art"
    written = write_full(dest)
    loaded = Artifact.load(dest)
    for art in (written, loaded):
        assert art.directory == dest
        assert (art.name, art.engine, art.target, art.key) == (
            "g",
            "test-affine",
            "x86_64-avx2",
            "ab" * 32,
        )
        assert art.signature == AFFINE_SIGNATURE
        assert art.producer == {"disc-core": "9.9", "disc-runtime": __version__}
        assert art.metadata == {"passes": ["a", "b"], "n": 3}
        assert art.files == {
            "graph.disc": sha256_bytes("graph text ✓".encode()),
            "native/module.so": sha256_bytes(SO_BYTES),
        }
        assert art.format_version == 1
    assert loaded.read_text("graph.disc") == "graph text ✓"
    assert loaded.read_bytes("native/module.so") == SO_BYTES
    assert loaded.path("native/module.so") == dest / "native" / "module.so"
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["format"] == "disc-artifact" and manifest["format_version"] == 1
    assert set(manifest) == {
        "format",
        "format_version",
        "name",
        "engine",
        "target",
        "key",
        "signature",
        "producer",
        "files",
        "metadata",
    }
    # Loading through manifest.json works too; the write left no temp dirs behind.
    assert Artifact.load(dest / "manifest.json").name == "g"
    assert [p.name for p in tmp_path.iterdir()] == ["art"]


def test_manifest_and_metadata_are_copies(tmp_path: Path) -> None:
    art = write_full(tmp_path / "a")
    art.metadata["n"] = 99
    art.manifest["name"] = "changed"
    assert art.metadata["n"] == 3 and art.name == "g"


def test_unknown_file_is_key_error(tmp_path: Path) -> None:
    art = write_full(tmp_path / "a")
    with pytest.raises(KeyError, match="has no file 'nope'"):
        art.read_bytes("nope")


def test_write_refuses_non_empty_destination_but_accepts_empty(tmp_path: Path) -> None:
    write_full(tmp_path / "a")
    with pytest.raises(FileExistsError):
        write_full(tmp_path / "a")
    (tmp_path / "empty").mkdir()
    assert write_full(tmp_path / "empty").directory == tmp_path / "empty"


@pytest.mark.parametrize("bad", ["../x", "/abs", "a//b", "./a", "manifest.json", "a\\b", ""])
def test_write_rejects_bad_file_names(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError):
        Artifact.write(
            tmp_path / "a",
            name="g",
            engine="e",
            target="t",
            signature=AFFINE_SIGNATURE,
            files={bad: b"x"},
        )
    assert not (tmp_path / "a").exists()


def test_write_rejects_non_json_metadata_before_touching_disk(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        Artifact.write(
            tmp_path / "a",
            name="g",
            engine="e",
            target="t",
            signature=AFFINE_SIGNATURE,
            files={},
            metadata={"x": object()},
        )
    assert list(tmp_path.iterdir()) == []


def test_tampered_file(tmp_path: Path) -> None:
    write_full(tmp_path / "a")
    (tmp_path / "a" / "graph.disc").write_text("graph text X")
    with pytest.raises(CorruptArtifactError) as e:
        Artifact.load(tmp_path / "a")
    msg = str(e.value)
    assert "'graph.disc'" in msg and "expected sha256" in msg
    assert sha256_bytes("graph text ✓".encode()) in msg


def test_truncated_file(tmp_path: Path) -> None:
    write_full(tmp_path / "a")
    so = tmp_path / "a" / "native" / "module.so"
    so.write_bytes(SO_BYTES[:100])
    with pytest.raises(CorruptArtifactError, match=r"'native/module.so'.*100 bytes"):
        Artifact.load(tmp_path / "a")


def test_deleted_file(tmp_path: Path) -> None:
    write_full(tmp_path / "a")
    (tmp_path / "a" / "graph.disc").unlink()
    missing = "'graph.disc' listed in the manifest is missing"
    with pytest.raises(CorruptArtifactError, match=missing):
        Artifact.load(tmp_path / "a", verify=False)  # existence is checked even without hashing


def test_verify_false_skips_hashing_but_reads_still_check(tmp_path: Path) -> None:
    write_full(tmp_path / "a")
    (tmp_path / "a" / "graph.disc").write_text("tampered")
    art = Artifact.load(tmp_path / "a", verify=False)
    with pytest.raises(CorruptArtifactError):
        art.read_text("graph.disc")
    with pytest.raises(CorruptArtifactError):
        art.verify()
    assert art.read_text("graph.disc", verify=False) == "tampered"


def _edit_manifest(path: Path, **changes) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    manifest.update(changes)
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_wrong_format_version(tmp_path: Path) -> None:
    write_full(tmp_path / "a")
    _edit_manifest(tmp_path / "a", format_version=2)
    with pytest.raises(ArtifactFormatError) as e:
        Artifact.load(tmp_path / "a")
    msg = str(e.value)
    assert "format_version 2" in msg and "supports format_version 1" in msg
    assert "upgrade disc-runtime" in msg
    _edit_manifest(tmp_path / "a", format_version=0)
    with pytest.raises(ArtifactFormatError, match="recompile"):
        Artifact.load(tmp_path / "a")


def test_not_an_artifact(tmp_path: Path) -> None:
    with pytest.raises(ArtifactNotFoundError, match="does not exist"):
        Artifact.load(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        Artifact.load(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(ArtifactFormatError, match="has no manifest.json"):
        Artifact.load(tmp_path / "plain")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ArtifactFormatError, match="expected a directory"):
        Artifact.load(tmp_path / "file")
    write_full(tmp_path / "a")
    _edit_manifest(tmp_path / "a", format="something-else")
    with pytest.raises(ArtifactFormatError, match="format 'something-else'"):
        Artifact.load(tmp_path / "a")


def test_truncated_manifest(tmp_path: Path) -> None:
    write_full(tmp_path / "a")
    text = (tmp_path / "a" / "manifest.json").read_text()
    (tmp_path / "a" / "manifest.json").write_text(text[: len(text) // 2])
    with pytest.raises(CorruptArtifactError, match="manifest.json is not valid JSON"):
        Artifact.load(tmp_path / "a")


@pytest.mark.parametrize(
    "changes, pattern",
    [
        ({"files": {"../escape": "0" * 64}}, "invalid file name"),
        ({"files": {"graph.disc": "nothex"}}, "no valid sha256"),
        ({"engine": 3}, "'engine' must be a string"),
        ({"signature": {"inputs": []}}, "invalid signature"),
        ({"metadata": []}, "'metadata' must be an object"),
    ],
)
def test_malformed_manifest_is_corrupt(tmp_path: Path, changes: dict, pattern: str) -> None:
    write_full(tmp_path / "a")
    _edit_manifest(tmp_path / "a", **changes)
    with pytest.raises(CorruptArtifactError, match=pattern):
        Artifact.load(tmp_path / "a")


def test_symlink_escaping_artifact_is_corrupt(tmp_path: Path) -> None:
    write_full(tmp_path / "a")
    outside = tmp_path / "outside.txt"
    outside.write_text("graph text ✓")
    (tmp_path / "a" / "graph.disc").unlink()
    (tmp_path / "a" / "graph.disc").symlink_to(outside)
    with pytest.raises(CorruptArtifactError, match="outside the artifact"):
        Artifact.load(tmp_path / "a")
