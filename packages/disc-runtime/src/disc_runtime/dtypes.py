"""Element types, identified everywhere by their numpy dtype *name* (a plain string).

Names rather than ``np.dtype`` objects because ``bfloat16`` is not a numpy builtin: its arrays
come from ``ml_dtypes`` (which frameworks and disc-core load), and the runtime must not import
it. Every array, whatever created it, reports ``arr.dtype.name == "bfloat16"``, so comparing
names works without the type object. Names are also what the manifest stores as JSON.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = [
    "SUPPORTED_DTYPES",
    "check_dtype_name",
    "dtype_name",
    "is_supported_dtype",
    "numpy_dtype",
]

#: Every element type a DISC signature may use, in a stable order.
SUPPORTED_DTYPES: tuple[str, ...] = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "float16",
    "bfloat16",
    "float32",
    "float64",
)

_SUPPORTED = frozenset(SUPPORTED_DTYPES)


def is_supported_dtype(name: str) -> bool:
    """True if ``name`` is one of :data:`SUPPORTED_DTYPES`."""
    return name in _SUPPORTED


def check_dtype_name(name: object) -> str:
    """Return ``name`` if it is a supported dtype name, else raise ``ValueError`` listing them."""
    if not isinstance(name, str) or name not in _SUPPORTED:
        raise ValueError(f"unsupported dtype {name!r}; DISC supports {', '.join(SUPPORTED_DTYPES)}")
    return name


def dtype_name(array: Any) -> str:
    """The dtype name of anything with a numpy-like ``.dtype`` (``arr.dtype.name``)."""
    return str(array.dtype.name)


def numpy_dtype(name: str) -> np.dtype:
    """The ``np.dtype`` for a supported name.

    ``bfloat16`` resolves only if some package already registered it with numpy (ml_dtypes,
    loaded by disc-core and by frameworks); the runtime never imports ml_dtypes itself, so
    this raises ``TypeError`` explaining that otherwise.
    """
    check_dtype_name(name)
    if name != "bfloat16":
        return np.dtype(name)
    ml_dtypes = sys.modules.get("ml_dtypes")
    if ml_dtypes is not None:
        return np.dtype(ml_dtypes.bfloat16)
    try:
        return np.dtype("bfloat16")
    except TypeError:
        raise TypeError(
            "bfloat16 is not known to numpy in this process: it comes from the ml_dtypes "
            "package, which disc-runtime does not import; import ml_dtypes first"
        ) from None
