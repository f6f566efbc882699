"""The on-disk artifact: one directory holding ``manifest.json`` plus arbitrary named files.

A directory (rather than one archive file) because engines need real files: the native engine
will ``ctypes.CDLL`` a ``native/module.so`` straight from the artifact, and the compile cache
publishes artifacts with one atomic ``os.rename``. The manifest records a sha256 per file so
that a truncated write, a half-copied directory or a tampered file is *detected* instead of
being executed; the runtime never trusts an artifact that fails that check. The manifest
itself is sealed by ``manifest.sha256`` (the sha256 of its bytes): a damaged manifest that
is still valid JSON (a flipped byte in a dim name, the engine, the metadata) is detected too.
Artifacts written before the seal existed load without it; the compile cache requires it.

Manifest (``manifest.json``, format_version 1)::

    {
      "format": "disc-artifact",
      "format_version": 1,
      "name": "my_graph",
      "engine": "reference",             # engine registry name that runs it
      "target": "cpu",                   # free-form target string chosen by the compiler
      "key": "3fa9...",                  # compile-cache key, or null
      "signature": {"inputs": [...], "outputs": [...]},
      "producer": {"disc-runtime": "0.1.0", "disc-core": "0.1.0"},
      "files": {"graph.disc": "<sha256 hex>", "native/module.so": "<sha256 hex>"},
      "metadata": {...}                  # free JSON for the compiler/engine
    }
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._version import __version__
from .errors import ArtifactFormatError, ArtifactNotFoundError, CorruptArtifactError
from .signature import Signature

__all__ = [
    "ARTIFACT_FORMAT",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "SUPPORTED_FORMAT_VERSIONS",
    "Artifact",
    "sha256_bytes",
    "sha256_file",
]

ARTIFACT_FORMAT = "disc-artifact"
FORMAT_VERSION = 1
SUPPORTED_FORMAT_VERSIONS: tuple[int, ...] = (1,)
MANIFEST_NAME = "manifest.json"
MANIFEST_DIGEST_NAME = "manifest.sha256"

_HEX64 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20


def sha256_bytes(data: bytes | bytearray | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    """sha256 hex of a file, streamed so large native modules do not need to fit in memory."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _check_relpath(rel: object) -> str:
    """Validate a file name inside an artifact: relative, POSIX separators, no escaping."""
    if not isinstance(rel, str) or not rel:
        raise ValueError(f"artifact file names must be non-empty strings, got {rel!r}")
    parts = rel.split("/")
    if (
        "\\" in rel
        or "\0" in rel
        or rel.startswith("/")
        or any(p in ("", ".", "..") for p in parts)
        or (len(parts) == 1 and rel in (MANIFEST_NAME, MANIFEST_DIGEST_NAME))
        or ":" in parts[0]
    ):
        raise ValueError(
            f"invalid artifact file name {rel!r}: use a relative POSIX path without '.', '..' "
            f"or empty components, other than {MANIFEST_NAME!r} and {MANIFEST_DIGEST_NAME!r}"
        )
    return rel


def _as_bytes(rel: str, data: object) -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"artifact file {rel!r}: expected bytes (or str), got {type(data).__name__}")


def _write_synced(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    """Best effort: make a rename/creation in ``path`` durable (not possible on Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class Artifact:
    """A loaded, verified artifact directory. Immutable; safe to share between threads.

    Create one with :meth:`write` (compiler side) or :meth:`load` (runtime side).
    """

    def __init__(self, directory: Path, manifest: dict[str, Any], signature: Signature) -> None:
        """Internal: use :meth:`load` or :meth:`write`, which validate the manifest."""
        self._dir = directory
        self._manifest = manifest
        self._signature = signature
        #: whether ``manifest.sha256`` was present and matched when this was loaded/written
        self.manifest_sealed = True

    # -- writing -------------------------------------------------------------------------

    @classmethod
    def write(
        cls,
        directory: str | os.PathLike[str],
        *,
        name: str,
        engine: str,
        target: str,
        signature: Signature | Mapping[str, Any],
        files: Mapping[str, bytes],
        metadata: Mapping[str, Any] | None = None,
        key: str | None = None,
        producer: Mapping[str, str] | None = None,
    ) -> Artifact:
        """Write an artifact atomically and return it (loaded, pointing at ``directory``).

        Everything is written into a temporary directory next to ``directory`` and fsynced,
        ``manifest.json`` last, then renamed into place in one ``os.rename``: readers see
        either no artifact or a complete one. ``directory`` must not exist or be an empty
        directory (otherwise ``FileExistsError``). ``files`` maps relative POSIX paths
        (``"graph.disc"``, ``"native/module.so"``) to bytes (``str`` is stored as UTF-8).
        ``producer`` records package versions; ``disc-runtime`` is added automatically.
        """
        dest = Path(directory)
        if not isinstance(name, str) or not isinstance(target, str):
            raise TypeError("name and target must be strings")
        if not isinstance(engine, str) or not engine:
            raise ValueError(f"engine must be a non-empty string, got {engine!r}")
        if key is not None and not isinstance(key, str):
            raise TypeError(f"key must be a str or None, got {type(key).__name__}")
        sig = signature if isinstance(signature, Signature) else Signature.from_dict(signature)
        payload = {_check_relpath(rel): _as_bytes(rel, data) for rel, data in files.items()}
        producers = {str(k): str(v) for k, v in (producer or {}).items()}
        producers.setdefault("disc-runtime", __version__)
        manifest: dict[str, Any] = {
            "format": ARTIFACT_FORMAT,
            "format_version": FORMAT_VERSION,
            "name": name,
            "engine": engine,
            "target": target,
            "key": key,
            "signature": sig.to_dict(),
            "producer": producers,
            "files": {rel: sha256_bytes(data) for rel, data in sorted(payload.items())},
            "metadata": dict(metadata) if metadata is not None else {},
        }
        # Fails early (TypeError/ValueError) on non-JSON metadata, before touching the disk.
        manifest_bytes = (
            json.dumps(manifest, indent=2, sort_keys=True, allow_nan=False) + "\n"
        ).encode("utf-8")

        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise FileExistsError(f"cannot write artifact: {dest} already exists and is not empty")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
        try:
            os.chmod(tmp, 0o755)
            for rel, data in payload.items():
                _write_synced(tmp / rel, data)
            _write_synced(tmp / MANIFEST_DIGEST_NAME,
                          (sha256_bytes(manifest_bytes) + "\n").encode("ascii"))
            _write_synced(tmp / MANIFEST_NAME, manifest_bytes)
            for sub in {(tmp / rel).parent for rel in payload} | {tmp}:
                _fsync_dir(sub)
            if dest.is_dir():
                dest.rmdir()  # empty (checked above); rename cannot replace it everywhere
            os.rename(tmp, dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _fsync_dir(dest.parent)
        return cls(dest, manifest, sig)

    # -- loading -------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, verify: bool = True) -> Artifact:
        """Load an artifact directory (or its ``manifest.json``) and check it.

        Always checks the format, the format_version and that every listed file exists;
        with ``verify=True`` (default) also every file's sha256. Raises
        :class:`ArtifactNotFoundError` / :class:`ArtifactFormatError` when the path is not a
        readable artifact and :class:`CorruptArtifactError` when it is a damaged one.
        """
        root = Path(path)
        if root.name == MANIFEST_NAME and root.is_file():
            root = root.parent
        if not root.exists():
            raise ArtifactNotFoundError(f"artifact {root} does not exist")
        if not root.is_dir():
            raise ArtifactFormatError(
                f"{root} is not a DISC artifact: expected a directory containing {MANIFEST_NAME}"
            )
        manifest_path = root / MANIFEST_NAME
        if not manifest_path.is_file():
            raise ArtifactFormatError(f"{root} is not a DISC artifact: it has no {MANIFEST_NAME}")
        manifest_bytes = manifest_path.read_bytes()
        try:
            data = json.loads(manifest_bytes.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise CorruptArtifactError(
                f"artifact {root}: {MANIFEST_NAME} is not valid JSON ({exc}); "
                "truncated or overwritten?"
            ) from None
        found_format = data.get("format") if isinstance(data, dict) else None
        if found_format != ARTIFACT_FORMAT:
            raise ArtifactFormatError(
                f"{root} is not a DISC artifact: {MANIFEST_NAME} has format {found_format!r}, "
                f"expected {ARTIFACT_FORMAT!r}"
            )
        version = data.get("format_version")
        if version not in SUPPORTED_FORMAT_VERSIONS or isinstance(version, bool):
            supported = ", ".join(str(v) for v in SUPPORTED_FORMAT_VERSIONS)
            newer = isinstance(version, int) and version > max(SUPPORTED_FORMAT_VERSIONS)
            advice = "upgrade disc-runtime" if newer else "recompile the artifact"
            raise ArtifactFormatError(
                f"artifact {root} has format_version {version!r}, but this disc-runtime "
                f"({__version__}) supports format_version {supported}; {advice}"
            )
        signature = _validate_manifest(root, data)
        artifact = cls(root, data, signature)
        artifact.manifest_sealed = _check_seal(root, manifest_bytes)
        artifact._check_files(hashes=verify)
        return artifact

    def verify(self) -> None:
        """Re-check every file's sha256 now; raises :class:`CorruptArtifactError`."""
        self._check_files(hashes=True)

    def _check_files(self, *, hashes: bool) -> None:
        for rel, expected in self._manifest["files"].items():
            file = self._resolve(rel)
            if not file.is_file():
                raise CorruptArtifactError(
                    f"artifact {self._dir}: file {rel!r} listed in the manifest is missing "
                    f"(expected sha256 {expected})"
                )
            if hashes:
                actual = sha256_file(file)
                if actual != expected:
                    raise CorruptArtifactError(
                        f"artifact {self._dir}: file {rel!r} does not match the manifest "
                        f"(expected sha256 {expected}, found sha256 {actual}, "
                        f"{file.stat().st_size} bytes): truncated or modified"
                    )

    def _resolve(self, rel: str) -> Path:
        file = self._dir / rel
        try:
            inside = file.resolve().is_relative_to(self._dir.resolve())
        except OSError:
            inside = False
        if not inside:
            raise CorruptArtifactError(
                f"artifact {self._dir}: file {rel!r} resolves outside the artifact directory"
            )
        return file

    # -- accessors -----------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        """The artifact directory."""
        return self._dir

    @property
    def manifest(self) -> dict[str, Any]:
        """A copy of the parsed manifest."""
        return copy.deepcopy(self._manifest)

    @property
    def format_version(self) -> int:
        return int(self._manifest["format_version"])

    @property
    def name(self) -> str:
        return str(self._manifest["name"])

    @property
    def engine(self) -> str:
        return str(self._manifest["engine"])

    @property
    def target(self) -> str:
        return str(self._manifest["target"])

    @property
    def key(self) -> str | None:
        return self._manifest["key"]

    @property
    def signature(self) -> Signature:
        return self._signature

    @property
    def producer(self) -> dict[str, str]:
        return dict(self._manifest["producer"])

    @property
    def files(self) -> dict[str, str]:
        """``{relative path: sha256 hex}`` of every file besides the manifest."""
        return dict(self._manifest["files"])

    @property
    def metadata(self) -> dict[str, Any]:
        """A copy of the free-form metadata the compiler stored."""
        return copy.deepcopy(self._manifest["metadata"])

    def path(self, rel: str) -> Path:
        """Filesystem path of a listed file (e.g. for ``ctypes.CDLL``); not re-verified."""
        self._require(rel)
        return self._resolve(rel)

    def read_bytes(self, rel: str, *, verify: bool = True) -> bytes:
        """Contents of a listed file; by default re-checked against the manifest sha256.

        Hashing bytes that are in memory anyway is cheap and catches a file changed after
        :meth:`load`.
        """
        self._require(rel)
        expected = self._manifest["files"][rel]
        try:
            data = self._resolve(rel).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise CorruptArtifactError(
                f"artifact {self._dir}: file {rel!r} listed in the manifest is missing "
                f"(expected sha256 {expected})"
            ) from None
        if verify and sha256_bytes(data) != expected:
            raise CorruptArtifactError(
                f"artifact {self._dir}: file {rel!r} does not match the manifest "
                f"(expected sha256 {expected}, found sha256 {sha256_bytes(data)}, "
                f"{len(data)} bytes): truncated or modified"
            )
        return data

    def read_text(self, rel: str, *, encoding: str = "utf-8", verify: bool = True) -> str:
        return self.read_bytes(rel, verify=verify).decode(encoding)

    def _require(self, rel: str) -> None:
        if rel not in self._manifest["files"]:
            listed = ", ".join(sorted(self._manifest["files"])) or "none"
            raise KeyError(f"artifact {self.name!r} has no file {rel!r} (it has: {listed})")

    def __repr__(self) -> str:
        return (
            f"Artifact(name={self.name!r}, engine={self.engine!r}, target={self.target!r}, "
            f"directory={str(self._dir)!r})"
        )


def _check_seal(root: Path, manifest_bytes: bytes) -> bool:
    """Compare ``manifest.sha256`` with the manifest's bytes: False when there is no seal
    (an artifact written before seals existed), :class:`CorruptArtifactError` when it does
    not match (the manifest or the seal was damaged)."""
    seal = root / MANIFEST_DIGEST_NAME
    try:
        recorded = seal.read_bytes().decode("ascii", "replace").strip()
    except FileNotFoundError:
        return False
    except OSError as exc:  # a directory in its place, unreadable
        raise CorruptArtifactError(f"artifact {root}: {MANIFEST_DIGEST_NAME} is unreadable "
                                   f"({exc})") from None
    actual = sha256_bytes(manifest_bytes)
    if recorded != actual:
        raise CorruptArtifactError(
            f"artifact {root}: {MANIFEST_NAME} does not match {MANIFEST_DIGEST_NAME} "
            f"(sealed sha256 {recorded[:64]!r}, found sha256 {actual}): truncated or modified"
        )
    return True


def _validate_manifest(root: Path, data: dict[str, Any]) -> Signature:
    """Check field types of a format_version-1 manifest; return its parsed signature."""

    def bad(msg: str) -> CorruptArtifactError:
        return CorruptArtifactError(f"artifact {root}: {MANIFEST_NAME} {msg}")

    for field in ("name", "engine", "target"):
        if not isinstance(data.get(field), str):
            raise bad(f"field {field!r} must be a string, got {data.get(field)!r}")
    if not data["engine"]:
        raise bad("field 'engine' is empty")
    if "key" not in data or not (data["key"] is None or isinstance(data["key"], str)):
        raise bad(f"field 'key' must be a string or null, got {data.get('key')!r}")
    for field in ("producer", "files", "metadata"):
        if not isinstance(data.get(field), dict):
            raise bad(f"field {field!r} must be an object, got {data.get(field)!r}")
    for rel, digest in data["files"].items():
        try:
            _check_relpath(rel)
        except ValueError as exc:
            raise bad(f"lists an invalid file name: {exc}") from None
        if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
            raise bad(f"file {rel!r} has no valid sha256 (got {digest!r})")
    try:
        return Signature.from_dict(data.get("signature"))  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise bad(f"has an invalid signature: {exc}") from None
