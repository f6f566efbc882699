"""C spellings of DISC types, literals and symbolic dim expressions."""

from __future__ import annotations

import math

from ..dtypes import DType
from ..symbolic import Expr, Func, Sym

C_TYPES: dict[DType, str] = {
    DType.BOOL: "uint8_t", DType.I8: "int8_t", DType.I16: "int16_t", DType.I32: "int32_t",
    DType.I64: "int64_t", DType.U8: "uint8_t", DType.F32: "float", DType.F64: "double",
}


def ctype(dt: DType) -> str:
    try:
        return C_TYPES[dt]
    except KeyError:
        from .fusion import NativeUnsupported

        raise NativeUnsupported(f"dtype {dt.short} has no native code path yet") from None


def literal(value: float | int | bool, dt: DType) -> str:
    if dt.is_bool:
        return "1" if value else "0"
    if dt.is_int:
        v = int(value)
        return f"INT64_C({v})" if dt is DType.I64 else str(v)
    f = float(value)
    if math.isnan(f):
        return "NAN" if dt is DType.F64 else "NAN"
    if math.isinf(f):
        return ("-" if f < 0 else "") + "INFINITY"
    text = repr(f)
    if "e" not in text and "." not in text:
        text += ".0"
    return text + ("f" if dt is DType.F32 else "")


def dim_c(e: Expr, symbols: dict[str, int]) -> str:
    """A C int64 expression for ``e``; symbol values live in the array ``S``."""
    if e.is_const:
        return f"INT64_C({e.value})"
    parts = []
    for mono, coeff in e.terms:
        factors = [f"INT64_C({coeff})"] if coeff != 1 or not mono else []
        for atom in mono:
            if isinstance(atom, Sym):
                factors.append(f"S[{symbols[atom.name]}]")
            else:
                assert isinstance(atom, Func)
                args = [dim_c(a, symbols) for a in atom.args]
                text = args[0]
                for arg in args[1:]:  # min/max take any number of arguments: fold pairwise
                    text = f"disc_{atom.fn}({text}, {arg})"
                factors.append(text)
        parts.append("*".join(factors))
    return "(" + " + ".join(parts) + ")"
