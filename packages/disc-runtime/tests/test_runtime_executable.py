from __future__ import annotations

import gc
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest
from disc_runtime_testkit import write_affine

from disc_runtime import (
    Artifact,
    EngineError,
    Executable,
    InputError,
    Signature,
    TensorSpec,
)


def f32(*shape: int, start: float = 0.0) -> np.ndarray:
    return (np.arange(int(np.prod(shape)), dtype=np.float32) + start).reshape(shape)


@pytest.fixture
def affine(tmp_path: Path) -> Executable:
    return Executable.load(write_affine(tmp_path / "affine", scale=3.0).directory)


def test_run_and_call(affine: Executable) -> None:
    x, y = f32(2, 3), f32(2, 3, start=1)
    (z,) = affine.run([x, y])
    np.testing.assert_allclose(z, x * 3 + y)
    (z2,) = affine(x, y)
    np.testing.assert_allclose(z2, z)
    assert affine.stats.calls == 2
    assert affine.name == "affine" and affine.signature.inputs[0].name == "x"


def test_load_from_artifact_object(tmp_path: Path) -> None:
    art = write_affine(tmp_path / "a")
    assert Executable.load(art).artifact is art


def test_input_errors_name_the_input(affine: Executable) -> None:
    with pytest.raises(InputError, match=r"^expected 2 inputs \(x, y\), got 1$"):
        affine(f32(2, 3))
    with pytest.raises(InputError, match="input #1 'y': dim 0 is 5 but symbol B = 2"):
        affine(f32(2, 3), f32(5, 3))
    with pytest.raises(InputError, match="input #0 'x': expected dtype float32, got float64"):
        affine(np.zeros((2, 3)), f32(2, 3))
    with pytest.raises(InputError, match="inputs must be a sequence"):
        affine.run(f32(2, 3))  # type: ignore[arg-type]
    snap = affine.stats.snapshot()
    assert snap["calls"] == 4 and snap["input_errors"] == 4 and snap["engine_errors"] == 0


class FakeCudaTensor:
    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)

    def __dlpack__(self, **kwargs):
        raise AssertionError("must not be called for a non-CPU tensor")


def test_non_cpu_input_is_input_error(affine: Executable) -> None:
    with pytest.raises(InputError) as e:
        affine(f32(2, 3), FakeCudaTensor())
    assert str(e.value).startswith("input #1 'y': tensor is on device cuda:0")
    assert "CPU" in str(e.value)


def _recording_exe(tmp_path: Path, received: list, outputs=None) -> Executable:
    art = write_affine(tmp_path / "rec")

    def run(inputs: list[np.ndarray]) -> list[np.ndarray]:
        received.append(inputs)
        return outputs(inputs) if outputs else [inputs[0] + inputs[1]]

    return Executable(art, run)


class DLPackTensor:
    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)


def test_inputs_reach_engine_without_copy(tmp_path: Path) -> None:
    received: list = []
    exe = _recording_exe(tmp_path, received)
    x = f32(4, 6)[:, ::2]  # non-contiguous view: still no copy
    y = f32(4, 3)
    exe(x, DLPackTensor(y))
    got_x, got_y = received[0]
    assert got_x is x
    assert np.shares_memory(got_y, y)


def test_wrong_output_count_is_engine_error(tmp_path: Path) -> None:
    exe = _recording_exe(tmp_path, [], outputs=lambda ins: [ins[0], ins[1]])
    with pytest.raises(EngineError, match=r"returned 2 outputs .* declares 1 \(z\)"):
        exe(f32(2, 2), f32(2, 2))
    assert exe.stats.engine_errors == 1


def test_output_signature_checked(tmp_path: Path) -> None:
    exe = _recording_exe(tmp_path, [], outputs=lambda ins: [ins[0].astype(np.float64)])
    with pytest.raises(EngineError, match="output #0 'z': expected dtype float32, got float64"):
        exe(f32(2, 2), f32(2, 2))
    bad_shape = _recording_exe(tmp_path / "b", [], outputs=lambda ins: [f32(3, 2)])
    with pytest.raises(EngineError, match="output #0 'z': dim 0 is 3 but symbol B = 2"):
        bad_shape(f32(2, 2), f32(2, 2))
    unchecked = Executable(
        write_affine(tmp_path / "u"), lambda ins: [f32(3, 2)], check_outputs=False
    )
    assert unchecked(f32(2, 2), f32(2, 2))[0].shape == (3, 2)


def test_non_list_output_is_engine_error(tmp_path: Path) -> None:
    exe = Executable(write_affine(tmp_path / "a"), lambda ins: ins[0])
    with pytest.raises(EngineError, match="expected a list of arrays"):
        exe(f32(1, 1), f32(1, 1))


def test_allocate_output_hook_used_by_engines_that_accept_it(tmp_path: Path) -> None:
    art = write_affine(tmp_path / "a")
    buffers: list[np.ndarray] = []

    def hook(index: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        buf = np.empty(shape, dtype=dtype)
        buffers.append(buf)
        return DLPackTensor(buf)  # e.g. a framework tensor

    def run(inputs, *, allocate_output=None):
        x, y = inputs
        out = allocate_output(0, x.shape, "float32")
        np.add(x, y, out=out)
        return [out]

    exe = Executable(art, run, allocate_output=hook)
    (z,) = exe(f32(2, 2), f32(2, 2, start=1))
    assert np.shares_memory(z, buffers[0])
    np.testing.assert_allclose(buffers[0], f32(2, 2) * 2 + 1)

    def bad_hook(index, shape, dtype):
        return np.empty((1,), np.float32)

    with pytest.raises(Exception, match=r"allocate_output for output #0 returned float32 \(1,\)"):
        exe.run([f32(2, 2), f32(2, 2)], allocate_output=bad_hook)


def test_allocate_output_ignored_by_engines_without_it(tmp_path: Path) -> None:
    calls: list = []
    exe = Executable(
        write_affine(tmp_path / "a"),
        lambda ins: [ins[0] + ins[1]],
        allocate_output=lambda *a: calls.append(a),
    )
    (z,) = exe(f32(2, 2), f32(2, 2))
    assert calls == [] and z.shape == (2, 2)


def test_threads_share_one_executable(affine: Executable) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def worker(t: int) -> None:
        try:
            barrier.wait()
            for i in range(50):
                b, s = 1 + (t + i) % 4, 1 + (t * i) % 5
                x, y = f32(b, s, start=t), f32(b, s, start=i)
                (z,) = affine(x, y)
                np.testing.assert_allclose(z, x * 3 + y)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert affine.stats.calls == 400


def test_stats_of_ended_threads_are_kept_without_a_cell_per_thread(affine: Executable) -> None:
    """Each thread counts into its own cell; when the thread ends, the cell is folded into
    the stats' base, so a thread per call (a server) leaves nothing behind per thread."""
    def one_call() -> None:
        affine(f32(2, 3), f32(2, 3))

    for _ in range(20):
        th = threading.Thread(target=one_call)
        th.start()
        th.join()
    gc.collect()
    snap = affine.stats.snapshot()
    assert snap["calls"] == 20 and snap["engine_seconds"] > 0
    assert affine.stats._cells == []  # every thread's cell was retired into the base
    affine(f32(2, 3), f32(2, 3))  # this thread's own cell, next to the base
    assert affine.stats.calls == 21 and len(affine.stats._cells) == 1


def test_stats_are_not_kept_alive_by_the_threads_that_counted(tmp_path: Path) -> None:
    """An executable dropped after calls from this (long-lived) thread is freed whole:
    the thread keeps no reference to its stats."""
    exe = Executable.load(write_affine(tmp_path / "gone").directory)
    exe(f32(2, 3), f32(2, 3))
    stats = weakref.ref(exe.stats)
    del exe
    gc.collect()
    assert stats() is None


def test_zero_inputs_and_static_signature(tmp_path: Path) -> None:
    sig = Signature(inputs=(), outputs=(TensorSpec("c", "int32", (3,)),))
    art = Artifact.write(
        tmp_path / "c", name="const", engine="none", target="cpu", signature=sig, files={}
    )
    exe = Executable(art, lambda ins: [np.arange(3, dtype=np.int32)])
    np.testing.assert_array_equal(exe()[0], [0, 1, 2])
