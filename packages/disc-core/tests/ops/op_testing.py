"""Helpers shared by the op test modules: build, infer and run single ops."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from disc_core.dtypes import dtype_of
from disc_core.ir import TensorType, Value
from disc_core.opdef import Env, get_op

DTYPES = ["f32", "bf16", "bool", "i8", "u8", "f16", "i32", "i64", "f64"]


def T(dtype: str, shape) -> TensorType:
    return TensorType.of(dtype, shape)


def V(dtype: str, shape) -> Value:
    return Value(T(dtype, shape))


def build(name: str, *operands: Value, **attrs):
    return get_op(name).build(list(operands), attrs)


def infer(name: str, *types: TensorType, **attrs) -> TensorType:
    op = get_op(name)
    (out,) = op.result_types(list(types), op.normalize_attrs(attrs))
    return out


def run(name: str, *inputs: np.ndarray, env: dict | None = None, **attrs) -> np.ndarray:
    op = get_op(name)
    (out,) = op.run(list(inputs), op.normalize_attrs(attrs), Env(env or {}))
    return out


def rand(shape, dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = dtype_of(dtype)
    if dt.is_bool:
        return np.asarray(rng.random(shape) < 0.5)
    if dt.is_int:
        lo = -100 if dt.is_signed else 0
        return np.asarray(rng.integers(lo, 100, size=shape), dtype=dt.np)
    return np.asarray(rng.standard_normal(shape), dtype=np.float32).astype(dt.np)


def scalar(value, dtype: str) -> np.ndarray:
    return np.array(value, dtype=dtype_of(dtype).np)


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.tobytes() == np.ascontiguousarray(want).tobytes()


def shape_st(min_rank: int = 0, max_rank: int = 4, max_dim: int = 5):
    return st.lists(st.integers(0, max_dim), min_size=min_rank, max_size=max_rank).map(tuple)


def idx(*vals, dtype=np.int32) -> list[np.ndarray]:
    return [np.array(v, dtype=dtype) for v in vals]
