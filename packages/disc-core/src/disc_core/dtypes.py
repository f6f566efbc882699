"""Element types of the DISC IR.

The set is closed on purpose: every op states which of these it accepts, codegen needs a C
type for each, and the runtime identifies them by numpy dtype name (``float32``), so the
text form uses short names (``f32``) while the runtime signature uses numpy names.
"""

from __future__ import annotations

import enum

import numpy as np


class DType(enum.Enum):
    """An element type. ``value`` is the short name used in the text form."""

    BOOL = "bool"
    I8 = "i8"
    I16 = "i16"
    I32 = "i32"
    I64 = "i64"
    U8 = "u8"
    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"
    F64 = "f64"

    @property
    def short(self) -> str:
        return self.value

    @property
    def np(self) -> np.dtype:
        return _numpy_dtype(self)

    @property
    def np_name(self) -> str:
        """The numpy dtype name, which is what disc-runtime signatures use."""
        return _NAMES[self]

    @property
    def is_bool(self) -> bool:
        return self is DType.BOOL

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_int(self) -> bool:
        return self in _INTS

    @property
    def is_signed(self) -> bool:
        return self.is_float or self in (DType.I8, DType.I16, DType.I32, DType.I64)

    @property
    def bits(self) -> int:
        return 8 if self is DType.BOOL else _ITEMSIZE[self] * 8

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def compute_np(self) -> np.dtype:
        """The numpy dtype the reference semantics compute in.

        Half types are computed in float32 and rounded once, as frameworks do on CPU; this
        also sidesteps ml_dtypes' partial ufunc coverage for bfloat16.
        """
        return np.dtype(np.float32) if self in (DType.F16, DType.BF16) else _numpy_dtype(self)

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"DType.{self.name}"


#: numpy dtypes; bfloat16's is added by :func:`_numpy_dtype` on first use
_NUMPY: dict[DType, np.dtype] = {
    DType.BOOL: np.dtype(np.bool_),
    DType.I8: np.dtype(np.int8),
    DType.I16: np.dtype(np.int16),
    DType.I32: np.dtype(np.int32),
    DType.I64: np.dtype(np.int64),
    DType.U8: np.dtype(np.uint8),
    DType.F16: np.dtype(np.float16),
    DType.F32: np.dtype(np.float32),
    DType.F64: np.dtype(np.float64),
}
_NAMES: dict[DType, str] = {**{d: t.name for d, t in _NUMPY.items()}, DType.BF16: "bfloat16"}
_ITEMSIZE: dict[DType, int] = {**{d: t.itemsize for d, t in _NUMPY.items()}, DType.BF16: 2}


def _numpy_dtype(d: DType) -> np.dtype:
    """``d``'s numpy dtype. bfloat16's comes from ml_dtypes, imported here on first use:
    its import took about 1 s of every process start (a server loading a compiled f32
    model among them) when this module imported it unconditionally."""
    found = _NUMPY.get(d)
    if found is None:
        import ml_dtypes

        found = _NUMPY[d] = np.dtype(ml_dtypes.bfloat16)
    return found


def load_bfloat16() -> None:
    """Register numpy's bfloat16 (ml_dtypes) in this process: disc-runtime resolves the
    name only when someone has (it never imports ml_dtypes itself), so whoever hands it an
    artifact whose signature names bfloat16 calls this first."""
    _numpy_dtype(DType.BF16)
_FLOATS = frozenset({DType.F16, DType.BF16, DType.F32, DType.F64})
_INTS = frozenset({DType.I8, DType.I16, DType.I32, DType.I64, DType.U8})
_BY_NAME: dict[str, DType] = {}
for _d in DType:
    _BY_NAME[_d.value] = _d
    _BY_NAME[_NAMES[_d]] = _d
_BY_NAME["bool_"] = DType.BOOL

ALL_DTYPES: tuple[DType, ...] = tuple(DType)
FLOAT_DTYPES: tuple[DType, ...] = (DType.F16, DType.BF16, DType.F32, DType.F64)
INT_DTYPES: tuple[DType, ...] = (DType.I8, DType.I16, DType.I32, DType.I64, DType.U8)
NUMERIC_DTYPES: tuple[DType, ...] = INT_DTYPES + FLOAT_DTYPES


def dtype_of(x: object) -> DType:
    """Accept a DType, a short or numpy name, or anything numpy understands as a dtype."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        if x in _BY_NAME:
            return _BY_NAME[x]
        raise ValueError(f"unknown dtype {x!r}; expected one of "
                         f"{', '.join(d.value for d in DType)} (or their numpy names)")
    try:
        name = np.dtype(x).name  # type: ignore[arg-type]
    except TypeError as exc:
        raise ValueError(f"unknown dtype {x!r}; expected one of "
                         f"{', '.join(d.value for d in DType)}") from exc
    if name not in _BY_NAME:
        raise ValueError(f"dtype {name} is not supported by DISC; expected one of "
                         f"{[d.np_name for d in DType]}")
    return _BY_NAME[name]
