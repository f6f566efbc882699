from __future__ import annotations

import numpy as np
import pytest
from disc_runtime_testkit import FakeDLPackTensor

from disc_runtime import InputError, as_numpy


class DLPackWrapper:
    """A framework-like tensor exporting a numpy array through DLPack."""

    def __init__(self, array: np.ndarray, device: tuple[int, int] = (1, 0)) -> None:
        self.array = array
        self.device = device

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)


class InterfaceOnly:
    def __init__(self, array: np.ndarray) -> None:
        self.__array_interface__ = array.__array_interface__
        self._keep = array


def test_numpy_passes_through() -> None:
    a = np.ones((2, 3), np.float32)
    assert as_numpy(a) is a


def test_dlpack_is_zero_copy() -> None:
    base = np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1:]  # non-contiguous view
    out = as_numpy(DLPackWrapper(base))
    assert np.shares_memory(out, base)
    np.testing.assert_array_equal(out, base)


def test_array_interface_is_zero_copy() -> None:
    base = np.arange(5, dtype=np.int64)
    out = as_numpy(InterfaceOnly(base))
    assert np.shares_memory(out, base)


def test_non_cpu_device_rejected_before_conversion() -> None:
    fake = DLPackWrapper(np.zeros(3, np.float32), device=(2, 0))
    with pytest.raises(InputError) as e:
        as_numpy(fake, what="input #0 'x'")
    msg = str(e.value)
    assert msg.startswith("input #0 'x': ")
    assert "cuda:0" in msg and "runs on the CPU" in msg


def test_unknown_device_type_named() -> None:
    with pytest.raises(InputError, match="device type 99:3"):
        as_numpy(DLPackWrapper(np.zeros(1), device=(99, 3)))


def test_bfloat16_dlpack_falls_back_to_capsule_reader_without_copy() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    storage = np.zeros((3, 4), np.uint16)
    tensor = FakeDLPackTensor(storage, code=4, bits=16)  # like a torch bfloat16 tensor
    out = as_numpy(tensor)
    assert out.dtype.name == "bfloat16" and out.shape == (3, 4)
    assert np.shares_memory(out.view(np.uint16), storage)
    storage[1, 2] = np.array(2.5, ml_dtypes.bfloat16).view(np.uint16)
    assert float(out[1, 2]) == 2.5


def test_capsule_reader_honours_strides() -> None:
    storage = np.arange(20, dtype=np.int32).reshape(4, 5)[::2, 1::2]
    # code 0/bits 32 is int32; numpy could import it, so call the fallback directly.
    from disc_runtime._dlpack import array_from_capsule_owner

    out = array_from_capsule_owner(FakeDLPackTensor(storage, code=0, bits=32))
    np.testing.assert_array_equal(out, storage)
    assert np.shares_memory(out, storage)


def test_unsupported_dlpack_dtype_is_input_error() -> None:
    tensor = FakeDLPackTensor(np.zeros(2, np.uint64), code=3, bits=64)  # opaque handle
    with pytest.raises(InputError, match="input #3 'c': cannot view FakeDLPackTensor"):
        as_numpy(tensor, what="input #3 'c'")


class RefusingExporter:
    """Like a torch tensor that requires grad: __dlpack__ itself raises."""

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)

    def __dlpack__(self, **kwargs):
        raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")


def test_exporter_errors_become_input_errors() -> None:
    with pytest.raises(InputError, match="input #0 'x': cannot view .* use tensor.detach()"):
        as_numpy(RefusingExporter(), what="input #0 'x'")


def test_non_arrays_rejected() -> None:
    with pytest.raises(InputError, match="got list"):
        as_numpy([1.0, 2.0])


def test_numpy_scalar_becomes_0d() -> None:
    out = as_numpy(np.float32(3))
    assert out.shape == () and out.dtype.name == "float32"
