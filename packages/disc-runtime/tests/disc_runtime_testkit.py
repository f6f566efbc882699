"""Shared helpers for the disc-runtime tests: tiny engines and a fake DLPack producer.

Deliberately independent of disc_core: the runtime must be testable on its own. Also
imported by subprocesses (CLI and cache-race tests), so it must stay importable with only
``src`` and ``tests`` on the path.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from disc_runtime import Artifact, Signature, TensorSpec, register_engine

SRC = Path(__file__).resolve().parents[1] / "src"
TESTS = Path(__file__).resolve().parent

AFFINE = "test-affine"
AFFINE_SIGNATURE = Signature(
    inputs=(
        TensorSpec("x", "float32", ("B", "S")),
        TensorSpec("y", "float32", ("B", "S")),
    ),
    outputs=(TensorSpec("z", "float32", ("B", "S")),),
)


def load_affine(artifact: Artifact):
    """Engine loader: ``z = x * scale + y`` with ``scale`` read from ``params.json``."""
    scale = np.float32(json.loads(artifact.read_text("params.json"))["scale"])

    def run(inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, y = inputs
        return [x * scale + y]

    return run


def write_affine(path: str | os.PathLike[str], *, scale: float = 2.0, key: str | None = None):
    return Artifact.write(
        path,
        name="affine",
        engine=AFFINE,
        target="cpu",
        signature=AFFINE_SIGNATURE,
        files={"params.json": json.dumps({"scale": scale}).encode()},
        metadata={"note": "test"},
        key=key,
        producer={"disc-runtime-tests": "0"},
    )


def slow_affine_builder(key: str, delay: float = 0.0, log: list | None = None):
    """A cache ``build`` callable writing an affine artifact (optionally slowly)."""

    def build(path: Path) -> Artifact:
        if log is not None:
            log.append(path)
        if delay:
            time.sleep(delay)
        return write_affine(path, key=key)

    return build


def register_test_engines() -> None:
    register_engine(AFFINE, load_affine, replace=True)


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(TESTS)])
    return env


# -- a fake DLPack producer (for bfloat16 and device tests, without any framework) -------


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_CAPSULE_NAME = b"dltensor"


class FakeDLPackTensor:
    """Exports ``storage`` (a numpy array) over DLPack with an arbitrary DLPack dtype.

    Models e.g. a torch bfloat16 tensor: ``code=4, bits=16`` over uint16 storage. The
    capsule has no destructor; the producer owns the memory and must outlive the views.
    """

    def __init__(self, storage: np.ndarray, *, code: int, bits: int, device=(1, 0)) -> None:
        self.storage = storage
        self.device = device
        self.exports = 0
        nd = storage.ndim
        self._shape = (ctypes.c_int64 * max(nd, 1))(*storage.shape)
        self._strides = (ctypes.c_int64 * max(nd, 1))(
            *(s // storage.itemsize for s in storage.strides)
        )
        self._managed = _DLManagedTensor()
        t = self._managed.dl_tensor
        t.data = storage.ctypes.data
        t.device = _DLDevice(1, 0)
        t.ndim = nd
        t.dtype = _DLDataType(code, bits, 1)
        t.shape = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64))
        t.byte_offset = 0

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        self.exports += 1
        return _capsule_new(ctypes.addressof(self._managed), _CAPSULE_NAME, None)


def ensure_registered_for_subprocess() -> None:
    """Called at the top of subprocess scripts."""
    sys.path.insert(0, str(SRC))
    register_test_engines()
