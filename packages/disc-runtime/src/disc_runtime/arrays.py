"""Zero-copy conversion of framework tensors to numpy arrays.

Bridges hand the runtime whatever their framework produces (torch, paddle, TF eager, JAX,
numpy). Copying inputs would double memory traffic on every call, so :func:`as_numpy` only
ever creates *views*, through the framework-neutral DLPack protocol or numpy's array
interface. Only the ``__array__`` fallback may copy, and it is the last resort.

The executable runs on the CPU, so a tensor that lives elsewhere (a CUDA tensor, ...) is
rejected with a clear :class:`~disc_runtime.errors.InputError` instead of being moved
silently: an implicit device-to-host copy per call is exactly the kind of hidden cost the
user should decide about.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._dlpack import array_from_capsule_owner
from .errors import InputError

__all__ = ["DLPACK_DEVICE_NAMES", "as_numpy"]

_DL_CPU = 1

#: DLDeviceType codes -> readable names used in error messages.
DLPACK_DEVICE_NAMES: dict[int, str] = {
    1: "cpu",
    2: "cuda",
    3: "cuda_host",
    4: "opencl",
    7: "vulkan",
    8: "metal",
    9: "vpi",
    10: "rocm",
    11: "rocm_host",
    12: "ext_dev",
    13: "cuda_managed",
    14: "oneapi",
    15: "webgpu",
    16: "hexagon",
    17: "maia",
}


def _device_label(device: Any) -> str:
    try:
        kind, index = int(device[0]), int(device[1])
    except (TypeError, ValueError, IndexError):
        return repr(device)
    return f"{DLPACK_DEVICE_NAMES.get(kind, f'device type {kind}')}:{index}"


def as_numpy(x: Any, *, what: str = "input") -> np.ndarray:
    """Return a numpy array sharing memory with ``x`` (never a copy, except via ``__array__``).

    Tried in order:

    1. ``np.ndarray`` (and subclasses): returned unchanged.
    2. ``__dlpack_device__``: anything not on the CPU raises :class:`InputError` naming the
       device, before any conversion is attempted.
    3. ``__dlpack__`` (torch, paddle, JAX, TF eager where supported, cupy-on-host, ...):
       ``np.from_dlpack``. numpy's importer rejects some dtypes, notably bfloat16 (e.g. a
       torch bfloat16 tensor); those go through a ctypes reader of the DLPack capsule that
       still shares memory (see ``disc_runtime._dlpack``) - no framework import needed.
       bfloat16 additionally needs ml_dtypes to be loaded by someone (disc-core, the
       framework, the user); the runtime itself never imports it.
    4. ``__array_interface__`` / ``__array_struct__``: ``np.asarray`` (shares memory).
    5. ``__array__`` (e.g. older TF eager tensors): ``np.asarray``; this MAY copy.
    6. numpy scalars: a 0-d array.

    Anything else (lists, Python numbers, ...) raises :class:`InputError`: silently turning a
    list into an int64/float64 array hides dtype mistakes. ``what`` prefixes error messages
    (e.g. ``"input #0 'x'"``).
    """
    if isinstance(x, np.ndarray):
        return x
    device_fn = getattr(x, "__dlpack_device__", None)
    if device_fn is not None:
        device = device_fn()
        try:
            is_cpu = int(device[0]) == _DL_CPU
        except (TypeError, ValueError, IndexError):
            is_cpu = False
        if not is_cpu:
            raise InputError(
                f"{what}: tensor is on device {_device_label(device)}, but this executable "
                "runs on the CPU; move the tensor to the CPU first"
            )
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x)
        except Exception as first:  # producers raise all sorts (BufferError, RuntimeError...)
            try:
                return array_from_capsule_owner(x)
            except Exception as second:
                raise InputError(
                    f"{what}: cannot view {type(x).__name__} as a numpy array without "
                    f"copying: {first}; {second}"
                ) from first
    if hasattr(x, "__array_interface__") or hasattr(x, "__array_struct__"):
        return np.asarray(x)
    if hasattr(x, "__array__"):
        return np.asarray(x)
    if isinstance(x, np.generic):
        return np.asarray(x)
    raise InputError(
        f"{what}: expected an array (numpy array or a tensor supporting DLPack or the numpy "
        f"array interface), got {type(x).__name__}"
    )
