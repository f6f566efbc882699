"""How an op is defined: one class per op, in one place.

A subclass of :class:`OpDef` with a ``name`` registers itself. It declares its operands
and attributes as data, and implements

* ``infer``: the verifier and the symbolic shape rule in one (raise through ``ctx.fail``
  with a message naming the operand and what was expected; return the result types);
* ``reference``: numpy semantics, the oracle for every backend;
* optionally ``facts``: the shape equalities its semantics imply (for the shape-constraint
  analysis), and ``canonicalize``: local rewrites used by the canonicalizer;
* for the native backend: its ``fusion`` role (:class:`Fusion`), the flags fusion must
  know, ``index_map`` (how its operands index a kernel's loop nest) and its C emission
  (``c_expr`` / ``c_kernel``, or the role-specific declarations ``red_axes``,
  ``reduction_kind``, ``scan_spec``, ``scatter_dims``). See "The native backend
  interface" below.

Nothing else in disc-core switches on op names to learn these; the printer, parser,
interpreter and passes all go through this interface, so a new op is one class.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from .dtypes import DType
from .ir import Op, TensorType, Value
from .symbolic import Expr, ExprLike, as_expr, evaluate_shape

if TYPE_CHECKING:
    from .dtypes import DType as _DType
    from .index_map import DimMap, OperandMap
    from .shape_facts import Fact


from .attrs import (  # noqa: F401  (re-exported: the op definitions' vocabulary)
    ARRAY,
    BOOL,
    DIM,
    DIMS,
    DTYPE,
    FLOAT,
    INT,
    INT_PAIRS,
    INTS,
    REQUIRED,
    STR,
    Attr,
    AttrKind,
    DenseArray,
    InterpretError,
    VerifyError,
)

# -- verification context -------------------------------------------------------------

class Ctx:
    """Helpers for ``infer``: every failure names the op and the operand."""

    def __init__(self, opdef: type[OpDef], types: Sequence[TensorType]):
        self.opdef = opdef
        self.types = list(types)

    def fail(self, msg: str) -> None:
        raise VerifyError(f"{self.opdef.name}: {msg}")

    def operand_name(self, i: int) -> str:
        names = self.opdef.operands
        if i < len(names) and not names[i].startswith("*"):
            label = names[i]
        elif names and names[-1].startswith("*"):
            label = f"{names[-1][1:]}[{i - len(names) + 1}]"
        else:
            label = "?"
        return f"operand #{i} '{label}'"

    def dtype_in(self, i: int, allowed: Iterable[DType], what: str = "") -> None:
        allowed = tuple(allowed)
        if self.types[i].dtype not in allowed:
            names = ", ".join(d.short for d in allowed)
            self.fail(f"{self.operand_name(i)} has dtype {self.types[i].dtype.short}, expected "
                      f"{what or 'one of'} {names}")

    def same_dtype(self, i: int, j: int) -> None:
        if self.types[i].dtype != self.types[j].dtype:
            self.fail(f"{self.operand_name(j)} has dtype {self.types[j].dtype.short}, expected "
                      f"{self.types[i].dtype.short} (the dtype of {self.operand_name(i)})")

    def rank(self, i: int, rank: int) -> None:
        if self.types[i].rank != rank:
            self.fail(f"{self.operand_name(i)} has rank {self.types[i].rank} "
                      f"({self.types[i]}), expected rank {rank}")

    def axis(self, axis: int, rank: int, attr: str = "axis") -> None:
        if not 0 <= axis < rank:
            self.fail(f"attribute {attr}={axis} is out of range for rank {rank} "
                      f"(expected 0 <= {attr} < {rank})")

    def axes(self, axes: Sequence[int], rank: int, attr: str) -> None:
        for a in axes:
            self.axis(a, rank, attr)
        if len(set(axes)) != len(axes):
            self.fail(f"attribute {attr}={list(axes)} repeats an axis")

    def permutation(self, perm: Sequence[int], rank: int, attr: str = "permutation") -> None:
        if sorted(perm) != list(range(rank)):
            self.fail(f"attribute {attr}={list(perm)} is not a permutation of "
                      f"{list(range(rank))}")

    def unify(self, a: Expr, b: Expr, where: str) -> Expr:
        """The dim two dims that must be equal share; fail only if provably different."""
        u = unify_dims(a, b)
        if u is None:
            self.fail(f"{where}: dimension {a} does not match {b}")
        return u  # type: ignore[return-value]

    def same_shape(self, indices: Sequence[int]) -> tuple[Expr, ...]:
        first = indices[0]
        shape = list(self.types[first].shape)
        for j in indices[1:]:
            t = self.types[j]
            if t.rank != len(shape):
                self.fail(f"{self.operand_name(j)} has shape {t}, expected rank {len(shape)} "
                          f"like {self.operand_name(first)} ({self.types[first]})")
            for k, d in enumerate(t.shape):
                u = unify_dims(shape[k], d)
                if u is None:
                    self.fail(f"{self.operand_name(j)} has shape {t}, expected dim {k} to be "
                              f"{shape[k]} like {self.operand_name(first)} "
                              f"({self.types[first]})")
                shape[k] = u  # type: ignore[assignment]
        return tuple(shape)


def unify_dims(a: Expr, b: Expr) -> Expr | None:
    """The representative of two dims asserted equal, or None if they provably differ.

    Static beats symbolic (more information); otherwise the first wins and the equality is
    left to the shape-constraint analysis and to run-time checks.
    """
    if a == b:
        return a
    if a.is_const and b.is_const:
        return None
    if (a - b).is_const:  # S and S + 1 can never be equal
        return None
    return a if a.is_const or not b.is_const else b


# -- evaluation environment -----------------------------------------------------------

class Env:
    """Concrete values of dimension symbols while a graph runs."""

    __slots__ = ("values",)

    def __init__(self, values: Mapping[str, int] | None = None):
        self.values: dict[str, int] = dict(values or {})

    def eval(self, e: ExprLike) -> int:
        return as_expr(e).evaluate(self.values)

    def shape(self, dims: Iterable[ExprLike]) -> tuple[int, ...]:
        """Each expression's value (attributes such as slice starts: a division by zero
        raises ZeroDivisionError)."""
        return tuple(self.eval(d) for d in dims)

    def tensor_shape(self, dims: Iterable[ExprLike]) -> tuple[int, ...]:
        """The dims of a tensor: a dim that divides by zero is allowed only in an empty
        tensor (:func:`~disc_core.symbolic.evaluate_shape`), else DimDivisionError."""
        return evaluate_shape(dims, self.values)


class Rewriter:
    """Creates ops in front of the op being rewritten (used by ``canonicalize``)."""

    def __init__(self) -> None:
        self.created: list[Op] = []

    def op(self, name: str, *operands: Value, **attrs: Any) -> Value:
        new = get_op(name).build(list(operands), attrs)
        self.created.append(new)
        return new.results[0]


# -- the native backend interface -------------------------------------------------------

class Fusion:
    """How the native backend places an op: the value of ``OpDef.fusion``.

    Fusion planning and code generation read only these roles, the flags next to them
    on ``OpDef`` and these traits, never op names, so a new op states here what it is to
    the backend:

    * ``"elementwise"``: with ``ELEMENTWISE`` (also read by the reshape passes);
    * ``"reduction"``: with ``REDUCTION``;
    * ``"broadcast"``: replicates its operand (fusion sees through it: a broadcast of a
      duplicable value is duplicable, of a value constant along a row is row-level);
    * ``"constant"``: its data is an attribute (a C literal or static array, never a step);
    * ``"shape"``: reads only its operand's shape, never its data (the operand puts no
      demand on a kernel's layout and need not be computed);
    * ``"math_call"``: its C form calls a math function (exp, erf, libm): a loop computing
      it is bound by the call's throughput, not by a chain of adds (a row kernel sums
      such operands through a row buffer, ``kernel_emit.split_sum``).
    """

    #: no native code path: a graph containing it stays on another engine
    NONE = "none"
    #: one C expression per element from the operands at the same index (``c_expr``)
    ELEMENTWISE = "elementwise"
    #: reads its operands at other indices (``index_map``), no arithmetic of its own but
    #: what ``c_kernel`` adds (a pad's guard, a gather's clamp)
    INDEXING = "indexing"
    #: combines one axis (or several) away: ``red_axes`` and ``reduction_kind`` (a fold
    #: such as sum) or ``arg_compare`` (argmax / argmin)
    REDUCTION = "reduction"
    #: recomputed in every kernel that reads it instead of being written to memory
    #: (constants, iotas, dim sizes); ``c_kernel`` says how
    DUPLICABLE = "duplicable"
    #: shares its operand's buffer when it is a kernel's root (a reshape of contiguous
    #: memory); inside a kernel it may still be fused where ``fuses`` says so
    ALIAS = "alias"
    #: a library call: GEMM through the BLAS the runtime finds
    LIBRARY = "library"
    #: a serial accumulation into a copy of operand 0 (``scatter_dims``)
    SCATTER = "scatter"
    #: an inclusive scan along one axis (``scan_spec``)
    SCAN = "scan"
    #: the roles whose ops may be computed inside a fused kernel
    IN_KERNEL = frozenset({ELEMENTWISE, INDEXING, REDUCTION, DUPLICABLE})


class KernelContext(Protocol):
    """What ``OpDef.c_kernel`` may ask of the kernel emitter about the op being emitted, at
    the current point of the kernel's loop nest."""

    def operand(self, i: int) -> str:
        """C expression of operand ``i``'s element at this point."""

    def read_at(self, i: int, index: str) -> str:
        """C expression loading operand ``i`` (in memory, ``indirect`` ops) with its
        data-indexed dim (``DATA`` in its index map) at C index ``index``."""

    def index(self, dim: int) -> str:
        """C expression of the index of the result's dim ``dim`` at this point."""

    def dim(self, e: Expr) -> str:
        """C int64 expression of a symbolic dim."""

    def ctype(self, dt: _DType) -> str:
        """The C type of elements of ``dt``."""

    def literal(self, value: float | int | bool, dt: _DType) -> str:
        """A C literal of ``value`` as ``dt``."""

    def uses(self, v: Value) -> list[tuple[Op, int]] | None:
        """The ops of this kernel reading ``v`` and at which operand position; None when
        ``v`` also leaves the kernel (an output), so readers elsewhere are unknown."""


class RowContext(Protocol):
    """What ``OpDef.c_row_sum`` may ask of a row kernel about the row of the reduction
    phase being emitted."""

    def row(self, op: Op, i: int) -> str | None:
        """Pointer to the current row of operand ``i`` of ``op`` (an op of the kernel) when
        all of it is in memory before this phase: an input laid out as the kernel's rows,
        or a value an earlier phase left in a row buffer; else None."""

    def row_scalar(self, op: Op, i: int) -> str | None:
        """C expression, valid before this phase's loops, of operand ``i`` of ``op`` when
        it is one value per row computed in the kernel (a reduction's result, a broadcast
        of one); else None."""

    def producer(self, v: Value) -> Op | None:
        """The op of this kernel computing ``v``; None when ``v`` comes from memory."""


@dataclass(frozen=True)
class RowSum:
    """A row-sum helper call (``OpDef.c_row_sum``). ``call``: a C expression whose value is
    the sum, after which the destination row holds the op's results. ``fills``: the row
    loop must first store the op's operand 0 into the destination row (the call then
    works in place); otherwise the call reads what it needs from memory itself."""

    call: str
    fills: bool = False


@dataclass(frozen=True)
class LibraryCode:
    """A ``Fusion.LIBRARY`` op's own step (``OpDef.library_call``): the host's C lines
    that run it, and the C helper functions they call, by name (each included once per
    module however many steps call it). ``linked``: the helpers declare their entry
    points with ``DISC_HELPER_ENTRY`` and hide their bodies under
    ``DISC_HELPER_DECLARE_ONLY`` (``csrc/prelude.h``), so each is compiled once into an
    object that modules link (``native/helper_objects.py``) rather than into every module."""

    lines: list[str]
    helpers: dict[str, str]
    linked: bool = False


@dataclass(frozen=True)
class ScanSpec:
    """What a ``Fusion.SCAN`` op computes: an inclusive ``kind`` scan (sum, prod, max, min:
    the combine steps reductions use) along ``axis`` of operand 0."""

    kind: str
    axis: int


# -- the op definition base class ------------------------------------------------------

_REGISTRY: dict[str, type[OpDef]] = {}


class OpDef:
    """Base of every op definition. See the module docstring."""

    name: ClassVar[str]
    operands: ClassVar[tuple[str, ...]] = ()  # a last name starting with '*' is variadic
    min_variadic: ClassVar[int] = 0
    attrs: ClassVar[Mapping[str, Attr]] = {}
    traits: ClassVar[frozenset[str]] = frozenset()
    summary: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
                raise ValueError(f"op {cls.name!r} is defined twice: {_REGISTRY[cls.name]} "
                                 f"and {cls}")
            _REGISTRY[cls.name] = cls

    # The interface every op implements -----------------------------------------------
    @classmethod
    def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
        raise NotImplementedError(f"{cls.name} has no shape rule")

    @classmethod
    def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any],
                  env: Env) -> list[np.ndarray]:
        raise NotImplementedError(f"{cls.name} has no reference semantics")

    @classmethod
    def facts(cls, op: Op) -> Iterable[Fact]:
        """Shape facts implied by this op beyond 'result dims are what infer said'."""
        return ()

    @classmethod
    def canonicalize(cls, op: Op, rw: Rewriter) -> Value | None:
        """Return a value that can replace the op's single result, or None.

        New ops needed by the rewrite are created with ``rw.op(...)``, which inserts them
        before ``op``. The replacement must have exactly the op's result type.
        """
        return None

    # The native backend interface (see Fusion) ---------------------------------------
    fusion: ClassVar[str] = Fusion.NONE
    #: reads its operands only where the index is in range (pad, concatenate): fusion
    #: keeps such operands in memory unless they are duplicable scalars or computed in
    #: split inner loops (``split_axis``)
    guarded: ClassVar[bool] = False
    #: operand 0 is read at indices held in data (the ``DATA`` entry of its index map), so
    #: it must be in memory; ``c_kernel`` reads it through ``KernelContext.read_at``
    indirect: ClassVar[bool] = False
    #: its C value is an operand read at other indices, no arithmetic: recomputing it in a
    #: later phase of a row kernel costs nothing, so it is never kept in a row buffer; a
    #: kernel that only permutes one input this way is emitted as a tiled transpose
    view: ClassVar[bool] = False
    #: a float ``x / s`` whose divisor is one value per row may become ``x * (1 / s)``
    reciprocal_divisor: ClassVar[bool] = False
    #: argmax / argmin: the C comparison a later element must win to replace the best
    arg_compare: ClassVar[str | None] = None

    @classmethod
    def c_row_sum(cls, op: Op, dst: str, n: str, ctx: RowContext) -> RowSum | None:
        """A helper that computes this elementwise op's results over a row of ``n``
        elements into the row buffer ``dst`` and returns their sum; None when there is
        none. A row kernel summing this op's results over long rows calls it instead of
        computing the op in its loop: a prelude helper written as vector code where the
        C compiler's vectorizer gives slower code (f32 exp: one vscalefps for its 2^k),
        which may read its operand's row where it already is in memory (``ctx``)."""
        return None

    @classmethod
    def fuses(cls, op: Op) -> bool:
        """Can ``op`` be computed inside a fused kernel?"""
        return cls.fusion in Fusion.IN_KERNEL

    @classmethod
    def index_map(cls, op: Op, i: int, result_map: DimMap, kernel_rank: int
                  ) -> OperandMap | None:
        """The dim map operand ``i`` needs so that ``op``'s result follows ``result_map``
        in a kernel of rank ``kernel_rank``, with the operand dims that may be implicit
        broadcasts at run time; None when the op cannot be fused. Elementwise ops read
        every operand at the result's index (a rank-0 operand at no index)."""
        if cls.fusion == Fusion.ELEMENTWISE:
            return (result_map if op.operands[i].rank else ()), {}
        return None

    @classmethod
    def red_axes(cls, op: Op) -> list[int] | None:
        """The axes a ``Fusion.REDUCTION`` op removes, sorted (None for other ops)."""
        return None

    @classmethod
    def reduction_kind(cls, op: Op) -> str | None:
        """The combine step of a folding reduction (sum, prod, max, min, and, or), None
        for other ops (an arg reduction declares ``arg_compare`` instead)."""
        return None

    @classmethod
    def split_axis(cls, op: Op) -> int | None:
        """The axis along which the operands lie side by side (concatenate): a kernel whose
        innermost dim it is may split its inner loop at their boundaries. None if none."""
        return None

    @classmethod
    def scan_spec(cls, op: Op) -> ScanSpec | None:
        """What a ``Fusion.SCAN`` op computes."""
        return None

    @classmethod
    def library_call(cls, op: Op, ptr: Any, syms: Any) -> LibraryCode | None:
        """A ``Fusion.LIBRARY`` op's own C (``ptr(value)``: a C pointer expression of a
        value's buffer; ``syms.c(dim)``: a dim's C expression). None: the op is a GEMM
        (``native/library.py``'s ``emit_gemm``)."""
        return None

    @classmethod
    def scatter_dims(cls, op: Op) -> tuple[int, list[int], list[int | None]] | None:
        """A ``Fusion.SCATTER`` op ``(operand, indices, updates)``: the operand axis the
        indices address, then for each indices dim the updates dim it follows, and for
        each operand dim the updates dim it follows (None: the target index)."""
        return None

    @classmethod
    def c_expr(cls, op: Op, args: list[str]) -> str | None:
        """The C expression computing one element from ``args``, the C expressions of the
        operands' elements (in their C types); None if there is none for these dtypes.
        A ``view`` is its operand read at other indices: the operand's element itself."""
        return args[0] if cls.view else None

    @classmethod
    def c_kernel(cls, op: Op, ctx: KernelContext) -> str | None:
        """The C expression of the result's element at the kernel's current point. The
        default feeds every operand's element (none for ops with trait "shape") to
        ``c_expr``; ops that index or create values override it."""
        args = [] if cls.has_trait("shape") else [ctx.operand(i) for i in range(len(op.operands))]
        return cls.c_expr(op, args)

    # Generic machinery ---------------------------------------------------------------
    @classmethod
    def has_trait(cls, trait: str) -> bool:
        return trait in cls.traits

    @classmethod
    def normalize_attrs(cls, attrs: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(attrs) - set(cls.attrs)
        if unknown:
            raise VerifyError(f"{cls.name}: unknown attribute(s) {sorted(unknown)}; expected "
                              f"{sorted(cls.attrs) or 'none'}")
        out: dict[str, Any] = {}
        for key, spec in cls.attrs.items():
            if key in attrs:
                try:
                    val = spec.kind.normalize(attrs[key])
                except (TypeError, ValueError) as exc:
                    raise VerifyError(f"{cls.name}: attribute {key}: {exc}") from None
            elif spec.default is REQUIRED:
                raise VerifyError(f"{cls.name}: missing required attribute {key!r} "
                                  f"({spec.kind.name})")
            else:
                val = spec.kind.normalize(spec.default) if spec.default is not None else None
            if spec.choices is not None and val not in spec.choices:
                allowed = ", ".join(spec.kind.format(spec.kind.normalize(c))
                                    for c in spec.choices)
                raise VerifyError(f"{cls.name}: attribute {key}={spec.kind.format(val)} is not "
                                  f"one of {allowed}")
            out[key] = val
        for key, spec in cls.attrs.items():
            if spec.fill_like is not None and out[key] is None:
                like, value = spec.fill_like
                out[key] = spec.kind.normalize([value] * len(out[like]))
        return out

    @classmethod
    def check_arity(cls, n: int) -> None:
        names = cls.operands
        if names and names[-1].startswith("*"):
            fixed = len(names) - 1
            if n < fixed + cls.min_variadic:
                raise VerifyError(f"{cls.name}: expected at least {fixed + cls.min_variadic} "
                                  f"operands ({', '.join(names)}), got {n}")
        elif n != len(names):
            raise VerifyError(f"{cls.name}: expected {len(names)} operand(s) "
                              f"({', '.join(names) or 'none'}), got {n}")

    @classmethod
    def result_types(cls, types: Sequence[TensorType], attrs: Mapping[str, Any]
                     ) -> list[TensorType]:
        """Verify and infer; ``attrs`` must already be normalized."""
        cls.check_arity(len(types))
        return list(cls.infer(Ctx(cls, types), attrs))

    @classmethod
    def build(cls, operands: Sequence[Value], attrs: Mapping[str, Any] | None = None) -> Op:
        for i, v in enumerate(operands):
            if not isinstance(v, Value):
                raise VerifyError(f"{cls.name}: operand #{i} is a {type(v).__name__}, "
                                  f"expected a Value (use a constant op for literals)")
        norm = cls.normalize_attrs(attrs or {})
        types = cls.result_types([v.type for v in operands], norm)
        return Op(cls, operands, norm, types)

    @classmethod
    def run(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
            ) -> list[np.ndarray]:
        out = cls.reference(inputs, attrs, env)
        return list(out) if isinstance(out, (list, tuple)) else [out]


def _load_all_ops() -> None:
    """Import every module of disc_core.ops: op classes register themselves on import."""
    from . import ops

    for mod in pkgutil.iter_modules(ops.__path__):
        importlib.import_module(f"{ops.__name__}.{mod.name}")


def registry() -> Mapping[str, type[OpDef]]:
    _load_all_ops()
    return dict(_REGISTRY)


def get_op(name: str) -> type[OpDef]:
    if name not in _REGISTRY:
        _load_all_ops()
    try:
        return _REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise VerifyError(f"unknown op {name!r}{hint}") from None
