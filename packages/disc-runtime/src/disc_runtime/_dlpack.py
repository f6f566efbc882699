"""Last-resort DLPack import for dtypes ``np.from_dlpack`` rejects (above all bfloat16).

numpy's DLPack importer only understands bool, (unsigned) integers, floats and complex, so
e.g. ``np.from_dlpack(torch_bf16_tensor)`` raises ``BufferError``, and ``tensor.numpy()``
fails too. Rather than import the framework to reinterpret the tensor, this module reads the
``DLManagedTensor`` out of the DLPack capsule with ctypes and wraps its memory in a numpy
array **without copying**:

* the capsule is *not* consumed (not renamed to ``used_dltensor``); the numpy array keeps it
  alive through its ``base`` chain, and when the array dies the producer's capsule destructor
  calls the DLPack deleter, exactly as the DLPack spec requires for unconsumed capsules;
* bfloat16 data is viewed as ``uint16`` and then as the ``bfloat16`` dtype that ml_dtypes
  registered with numpy (see :func:`disc_runtime.dtypes.numpy_dtype`).

Only CPU tensors reach this module (the caller checks ``__dlpack_device__`` first).
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

import numpy as np

from .dtypes import numpy_dtype

__all__ = ["array_from_capsule_owner"]

# DLDataTypeCode values.
_INT, _UINT, _FLOAT, _BFLOAT, _BOOL = 0, 1, 2, 4, 6
_READ_ONLY_FLAG = 1  # DLPACK_FLAG_BITMASK_READ_ONLY (versioned tensors only)


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


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype = ctypes.c_int
_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


class _CapsuleView:
    """Exposes the capsule's memory through ``__array_interface__`` and keeps the capsule alive."""

    def __init__(self, capsule: object, interface: dict[str, Any]) -> None:
        self._capsule = capsule
        self.__array_interface__ = interface


def _storage_typestr(code: int, bits: int) -> tuple[str, str]:
    """(typestr of the raw storage, DISC dtype name) for a DLPack (code, bits) pair."""
    order = "<" if sys.byteorder == "little" else ">"
    table = {
        (_BOOL, 8): ("|b1", "bool"),
        (_INT, 8): ("|i1", "int8"),
        (_INT, 16): (order + "i2", "int16"),
        (_INT, 32): (order + "i4", "int32"),
        (_INT, 64): (order + "i8", "int64"),
        (_UINT, 8): ("|u1", "uint8"),
        (_FLOAT, 16): (order + "f2", "float16"),
        (_FLOAT, 32): (order + "f4", "float32"),
        (_FLOAT, 64): (order + "f8", "float64"),
        (_BFLOAT, 16): (order + "u2", "bfloat16"),
    }
    try:
        return table[(code, bits)]
    except KeyError:
        raise TypeError(f"DLPack dtype (code={code}, bits={bits}) is not a DISC dtype") from None


def array_from_capsule_owner(x: Any) -> np.ndarray:
    """Zero-copy numpy view of a CPU DLPack tensor, for dtypes numpy's importer rejects.

    Raises ``TypeError`` for dtypes DISC does not support (or bfloat16 when no package has
    registered it with numpy) and ``BufferError`` for malformed capsules.
    """
    capsule = x.__dlpack__()
    read_only = False
    if _is_valid(capsule, b"dltensor"):
        managed = _DLManagedTensor.from_address(_get_pointer(capsule, b"dltensor"))
        tensor = managed.dl_tensor
    elif _is_valid(capsule, b"dltensor_versioned"):
        versioned = _DLManagedTensorVersioned.from_address(
            _get_pointer(capsule, b"dltensor_versioned")
        )
        tensor = versioned.dl_tensor
        read_only = bool(versioned.flags & _READ_ONLY_FLAG)
    else:
        raise BufferError("__dlpack__() did not return an unconsumed DLPack capsule")
    if tensor.dtype.lanes != 1:
        raise TypeError(f"DLPack vector dtypes (lanes={tensor.dtype.lanes}) are not supported")
    typestr, name = _storage_typestr(tensor.dtype.code, tensor.dtype.bits)
    target = numpy_dtype(name)
    itemsize = tensor.dtype.bits // 8
    ndim = tensor.ndim
    shape = tuple(int(tensor.shape[i]) for i in range(ndim))
    if any(d == 0 for d in shape) or not tensor.data:
        # Nothing to share; an empty array of the right type is exact.
        return np.empty(shape, dtype=target)
    strides = None
    if tensor.strides:
        strides = tuple(int(tensor.strides[i]) * itemsize for i in range(ndim))
    interface = {
        "version": 3,
        "shape": shape,
        "typestr": typestr,
        "data": (int(tensor.data) + int(tensor.byte_offset), read_only),
        "strides": strides,
    }
    storage = np.asarray(_CapsuleView(capsule, interface))
    return storage if storage.dtype == target else storage.view(target)
