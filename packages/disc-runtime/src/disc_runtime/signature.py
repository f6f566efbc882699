"""Input/output signatures with symbolic dimensions, and input validation against them.

A compiled graph is specialised on dtypes and ranks but NOT on concrete sizes: a dimension is
either a static ``int``, a *symbol* (a bare identifier such as ``"B"``; every dim carrying
the same symbol must have the same size, across all inputs), or a *derived expression*
(any other string, e.g. ``"B*S"`` or ``"floordiv(S, 2)"``). The runtime checks everything it
can check cheaply and without an expression evaluator - count, rank, dtype, static dims,
shared symbols - so the user gets a precise message naming the offending input before the
engine runs; derived expressions are left to the engine, which knows their semantics.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .dtypes import check_dtype_name
from .errors import InputError

__all__ = ["Dim", "Signature", "TensorSpec", "dim_kind", "format_dims"]

Dim = int | str


def dim_kind(dim: Dim) -> str:
    """Classify a dim: ``"static"`` (int), ``"symbol"`` (identifier) or ``"expr"`` (other str)."""
    if isinstance(dim, bool) or not isinstance(dim, (int, str)):
        raise TypeError(f"a dim must be an int or a str, got {dim!r}")
    if isinstance(dim, int):
        return "static"
    return "symbol" if dim.isidentifier() else "expr"


def format_dims(dims: Iterable[Dim]) -> str:
    """``[B, S, 768]`` - the form used in error messages."""
    return "[" + ", ".join(str(d) for d in dims) + "]"


@dataclass(frozen=True)
class TensorSpec:
    """Name, dtype name (see :mod:`disc_runtime.dtypes`) and dims of one input or output."""

    name: str
    dtype: str
    dims: tuple[Dim, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"TensorSpec name must be a str, got {self.name!r}")
        check_dtype_name(self.dtype)
        # numpy integers (common in compiler code) normalise to plain ints for JSON.
        dims = tuple(
            int(d) if isinstance(d, numbers.Integral) and not isinstance(d, bool) else d
            for d in self.dims
        )
        for d in dims:
            kind = dim_kind(d)
            if kind == "static" and d < 0:  # type: ignore[operator]
                raise ValueError(f"{self.name!r}: static dim must be >= 0, got {d}")
            if kind == "expr" and not str(d).strip():
                raise ValueError(f"{self.name!r}: empty dim expression")
        object.__setattr__(self, "dims", dims)

    @property
    def rank(self) -> int:
        return len(self.dims)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "dims": list(self.dims)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TensorSpec:
        try:
            return cls(name=data["name"], dtype=data["dtype"], dims=tuple(data["dims"]))
        except KeyError as exc:
            raise ValueError(f"tensor spec {dict(data)!r} lacks field {exc.args[0]!r}") from None


def _specs(items: Iterable[TensorSpec | Mapping[str, Any]]) -> tuple[TensorSpec, ...]:
    return tuple(s if isinstance(s, TensorSpec) else TensorSpec.from_dict(s) for s in items)


@dataclass(frozen=True)
class Signature:
    """The inputs and outputs of an executable. Immutable, hence shareable across threads."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", _specs(self.inputs))
        object.__setattr__(self, "outputs", _specs(self.outputs))

    # -- serialization -------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible form: ``{"inputs": [spec, ...], "outputs": [spec, ...]}``."""
        return {
            "inputs": [s.to_dict() for s in self.inputs],
            "outputs": [s.to_dict() for s in self.outputs],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Signature:
        """Inverse of :meth:`to_dict`; raises ``ValueError``/``TypeError`` on malformed data."""
        if not isinstance(data, Mapping):
            raise TypeError(f"a signature must be a JSON object, got {type(data).__name__}")
        try:
            inputs, outputs = data["inputs"], data["outputs"]
        except KeyError as exc:
            raise ValueError(f"signature lacks field {exc.args[0]!r}") from None
        return cls(inputs=_specs(inputs), outputs=_specs(outputs))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Signature:
        return cls.from_dict(json.loads(text))

    # -- validation ----------------------------------------------------------------------

    def validate(self, arrays: Sequence[Any]) -> dict[str, int]:
        """Check ``arrays`` (numpy-like: ``.shape``, ``.dtype.name``) against the inputs.

        Checks count, rank, dtype, static dims and that every symbol has one size across all
        inputs; derived expressions are not evaluated (the engine checks them). Returns the
        symbol bindings, e.g. ``{"B": 4, "S": 5}``. Raises :class:`InputError` naming the
        input by index and name and saying what was expected.
        """
        fast = _fast_check(self._plan(), arrays)
        if fast is not None:
            return fast
        return _check(self.inputs, arrays, {}, role="input", error=InputError)

    def _plan(self) -> tuple:
        """Per input: (dtype name, rank, static (axis, size) pairs, symbol (axis, name) pairs).

        Built once: validation then is a tight loop, since it runs on every call and per-call
        overhead on small tensors matters; the slow path only runs to word an error.
        """
        plan = self.__dict__.get("_plan_cache")
        if plan is None:
            plan = tuple(
                (spec.dtype, _np_dtype_or_none(spec.dtype), spec.rank,
                 tuple((a, d) for a, d in enumerate(spec.dims) if dim_kind(d) == "static"),
                 tuple((a, d) for a, d in enumerate(spec.dims) if dim_kind(d) == "symbol"))
                for spec in self.inputs)
            object.__setattr__(self, "_plan_cache", plan)
        return plan

    def check_outputs(
        self, arrays: Sequence[Any], bindings: Mapping[str, int], *, error: type[Exception]
    ) -> dict[str, int]:
        """Check engine outputs like inputs; symbols bound by the inputs must agree.

        Symbols that appear only in outputs (data-dependent sizes) bind freely.
        """
        return _check(self.outputs, arrays, dict(bindings), role="output", error=error)


def _np_dtype_or_none(name: str) -> np.dtype | None:
    """The canonical numpy dtype object (identity-comparable), None for extension dtypes."""
    return None if name == "bfloat16" else np.dtype(name)


def _fast_check(plan: tuple, arrays: Sequence[Any]) -> dict[str, int] | None:
    """Bindings if every input matches, None if anything is off (the caller words it)."""
    if len(arrays) != len(plan):
        return None
    bindings: dict[str, int] = {}
    for (dtype, np_dtype, rank, statics, symbols), arr in zip(plan, arrays):
        shape = arr.shape
        got = arr.dtype
        if len(shape) != rank or (got is not np_dtype and got.name != dtype):
            return None
        for axis, size in statics:
            if shape[axis] != size:
                return None
        for axis, sym in symbols:
            if bindings.setdefault(sym, shape[axis]) != shape[axis]:
                return None
    return bindings


def _check(
    specs: Sequence[TensorSpec],
    arrays: Sequence[Any],
    bindings: dict[str, int],
    *,
    role: str,
    error: type[Exception],
) -> dict[str, int]:
    if len(arrays) != len(specs):
        names = ", ".join(s.name for s in specs)
        raise error(f"expected {len(specs)} {role}s ({names}), got {len(arrays)}")
    origin: dict[str, str] = {sym: "the inputs" for sym in bindings}
    for i, (spec, arr) in enumerate(zip(specs, arrays, strict=True)):
        label = f"{role} #{i} {spec.name!r}"
        shape = tuple(int(d) for d in arr.shape)
        if len(shape) != spec.rank:
            raise error(
                f"{label}: expected rank {spec.rank} {format_dims(spec.dims)}, got shape {shape}"
            )
        got_dtype = str(arr.dtype.name)
        if got_dtype != spec.dtype:
            raise error(f"{label}: expected dtype {spec.dtype}, got {got_dtype}")
        for axis, (dim, size) in enumerate(zip(spec.dims, shape, strict=True)):
            kind = dim_kind(dim)
            if kind == "static":
                if size != dim:
                    raise error(f"{label}: dim {axis} must be {dim}, got {size}")
            elif kind == "symbol":
                assert isinstance(dim, str)
                bound = bindings.get(dim)
                if bound is None:
                    bindings[dim] = size
                    origin[dim] = f"{role} #{i} {spec.name!r} dim {axis}"
                elif bound != size:
                    raise error(
                        f"{label}: dim {axis} is {size} but symbol {dim} = {bound} "
                        f"from {origin[dim]}"
                    )
    return bindings
