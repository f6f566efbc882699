"""What the kernel, host and library-call emitters share: the module's facts
(:class:`ModuleInfo`), symbol and constant naming, strides and the combine steps of
reductions, and the C sources shipped with the package (``csrc/``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from ..dtypes import DType
from ..ir import Graph, Value
from ..symbolic import Expr, product
from .cexpr import ctype, dim_c, literal

#: elements below which a kernel, scatter or scan runs on one thread
PAR_MIN = 1 << 15


@cache
def c_source(name: str) -> str:
    """The text of ``csrc/<name>``, a C file shipped as package data."""
    return resources.files(__package__).joinpath("csrc", name).read_text()


@dataclass
class ModuleInfo:
    """What the runtime and tests need to know about a generated module."""

    #: C translation units; the first holds the host entry point. More than one when the
    #: module is split so that the C compiler can build its parts in parallel.
    sources: list[str]
    needs_blas: bool
    counters: list[str] = field(default_factory=list)  # name of each counter slot
    #: what each step slot of ``disc_env.profile`` times (slot 2 + i): name, kind, ops and
    #: the iteration space or GEMM shape (see :func:`_profile_entry`)
    profile: list[dict] = field(default_factory=list)
    kernels: list[dict] = field(default_factory=list)
    gemm_dtypes: set[DType] = field(default_factory=set)  # dtypes of its GEMM calls
    #: inputs some GEMM reads as a weight it may keep packed when the caller stamps them
    #: (``disc_env.in_stamps``, csrc/gemm.c)
    pack_inputs: list[int] = field(default_factory=list)
    #: C helpers of library calls other than GEMMs (``OpDef.library_call``), by name:
    #: compiled into the module, or (``linked_helpers``) into objects of their own
    helpers: dict[str, str] = field(default_factory=dict)
    linked_helpers: dict[str, str] = field(default_factory=dict)
    #: the library helpers (GEMM, attention) as units of their own, each compiled once
    #: into an object every module that calls it links (``native/helper_objects.py``)
    helper_units: list[str] = field(default_factory=list)


class Symbols:
    def __init__(self, graph: Graph):
        self.index: dict[str, int] = {}
        for name in sorted(graph.free_symbols()):
            self.index[name] = len(self.index)

    def c(self, e: Expr) -> str:
        return dim_c(e, self.index)



# -- constants ----------------------------------------------------------------------------

class Constants:
    """Non-scalar constants become static read-only arrays (no mutable global state)."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.decls: list[str] = []

    def array(self, v: Value) -> str:
        if id(v) not in self.names:
            arr = v.producer.attrs["value"].array  # type: ignore[union-attr]
            name = f"cst{len(self.names)}"
            flat = arr.reshape(-1)
            body = ", ".join(literal(x.item(), v.dtype) for x in flat) or "0"
            self.decls.append(f"static const {ctype(v.dtype)} {name}[{max(flat.size, 1)}] = "
                              f"{{{body}}};")
            self.names[id(v)] = name
        return self.names[id(v)]

    def source(self) -> str:
        return "\n".join(self.decls)


def entry_signature(fn: str, decls: list[str]) -> str:
    """A kernel entry as the host calls it (definitions and, across units, prototypes)."""
    return (f"DISC_ENTRY void {fn}({', '.join(decls)}, const int64_t *restrict S, "
            "int parallel)")


def scalar_constant(v: Value) -> str | None:
    p = v.producer
    if p is not None and p.opdef.has_trait("constant") and v.rank == 0:
        return literal(p.attrs["value"].array.item(), v.dtype)
    return None


def strides(shape: tuple[Expr, ...]) -> list[Expr]:
    return [product(shape[j + 1:]) for j in range(len(shape))]



def identity(kind: str, dt: DType) -> str:
    if kind == "sum":
        return literal(0, dt)
    if kind == "prod":
        return literal(1, dt)
    if kind == "and":
        return "1"
    if kind == "or":
        return "0"
    if dt.is_float:
        return ("-" if kind == "max" else "") + "INFINITY"
    if dt.is_bool:
        return "0" if kind == "max" else "1"
    import numpy as np

    info = np.iinfo(dt.np)
    return literal(info.min if kind == "max" else info.max, dt)


def combine(kind: str, dt: DType, acc: str, x: str) -> str:
    if kind == "sum":
        return f"{acc} += {x};"
    if kind == "prod":
        return f"{acc} *= {x};"
    if kind in ("and", "or"):
        return f"{acc} = {acc} {'&&' if kind == 'and' else '||'} ({x});"
    cmp = ">" if kind == "max" else "<"
    if dt.is_float:
        return f"{{ const {ctype(dt)} t = {x}; {acc} = (t {cmp} {acc} || t != t) ? t : {acc}; }}"
    return f"{{ const {ctype(dt)} t = {x}; {acc} = t {cmp} {acc} ? t : {acc}; }}"


