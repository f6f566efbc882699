"""Ops describe themselves to the native backend (``OpDef.fusion`` and its flags,
``index_map``, ``c_expr`` / ``c_kernel``, ``scan_spec`` ...): fusion and codegen contain no
op names, and a new op is one class.

The two ops below exist only in this module (registered for its tests, unregistered after):
a new elementwise op and a new scan. Each is one class, and the native engine compiles
them with no other change, checked against the reference interpreter on shapes unseen at
compile time.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, interpret, opdef
from disc_core.dtypes import FLOAT_DTYPES, DType
from disc_core.ir import Op, TensorType
from disc_core.native import fusion
from disc_core.opdef import INT, Attr, Ctx, Env, Fusion, OpDef, ScanSpec, registry
from disc_core.ops.elementwise import Elementwise
from disc_runtime import CompileCache

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
RNG = np.random.default_rng(7)
NATIVE = Path(fusion.__file__).parent


# -- no op names in the backend ------------------------------------------------------------

def _backend_modules() -> list[Path]:
    """fusion and every module of code generation (the emitter and what it is split into)."""
    return sorted(p for p in NATIVE.glob("*.py")
                  if p.name in {"fusion.py", "cexpr.py"} or "emit" in p.name
                  or p.name in {"ccommon.py", "library.py"})


def _name_comparisons(source: str) -> list[str]:
    """Comparisons whose operands read a ``.name`` (``op.name == "reduce"``,
    ``p.name in SCATTERS``), and string literals naming a registered op compared
    against anything."""
    ops = set(registry())
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if any(isinstance(s, ast.Attribute) and s.attr == "name" for s in sides):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    # sets of op names (a module-level table of names the backend switches on)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Set, ast.Tuple, ast.List)):
            names = [e.value for e in node.elts
                     if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            named = [n for n in names if n in ops and "_" in n]
            if named:
                found.append(f"line {node.lineno}: a collection of op names {named}")
    return found


def test_the_backend_modules_exist() -> None:
    names = {p.name for p in _backend_modules()}
    assert {"fusion.py", "emit.py", "kernel_emit.py", "host_emit.py", "library.py"} <= names


@pytest.mark.parametrize("path", _backend_modules(), ids=lambda p: p.name)
def test_fusion_and_codegen_compare_no_op_names(path: Path) -> None:
    found = _name_comparisons(path.read_text())
    assert not found, f"{path.name} switches on op names:\n" + "\n".join(found)


def test_the_checker_finds_name_comparisons() -> None:
    src = 'if op.name == "reduce":\n    pass\nx = p.name in S\nT = {"broadcast_in_dim"}\n'
    assert len(_name_comparisons(src)) == 3


#: traits no code reads yet (none: a trait is declared only for a reader)
NOT_READ_YET: set[str] = set()


def test_every_declared_trait_is_read() -> None:
    """Traits are read by someone: each one an op declares is named by a ``has_trait``
    call in disc-core (the backend reads "reduction", "broadcast", "constant" and
    "shape"; "elementwise" is read by the reshape passes, "pure" by CSE and DCE)."""
    src = Path(opdef.__file__).parent
    text = "\n".join(p.read_text() for p in src.rglob("*.py"))
    declared = {t for d in registry().values() for t in d.traits}
    unread = {t for t in declared if f'has_trait("{t}")' not in text}
    assert unread <= NOT_READ_YET, f"traits nobody reads: {sorted(unread - NOT_READ_YET)}"
    for t in ("reduction", "broadcast", "constant", "shape"):
        assert f'has_trait("{t}")' in "".join(p.read_text() for p in _backend_modules())


def test_roles_are_consistent() -> None:
    """Every role's declarations are present: a reduction names its axes and either a
    combine kind or an arg comparison; a scan and a scatter describe themselves."""
    for name, d in registry().items():
        assert d.fusion in {Fusion.NONE, Fusion.ELEMENTWISE, Fusion.INDEXING,
                            Fusion.REDUCTION, Fusion.DUPLICABLE, Fusion.ALIAS,
                            Fusion.LIBRARY, Fusion.SCATTER, Fusion.SCAN}, name
        assert d.has_trait("elementwise") == (d.fusion == Fusion.ELEMENTWISE), name
        assert d.has_trait("reduction") == (d.fusion == Fusion.REDUCTION), name
        for meth in ("red_axes", "reduction_kind", "scan_spec", "scatter_dims"):
            overridden = getattr(d, meth).__func__ is not getattr(OpDef, meth).__func__
            role = {"red_axes": Fusion.REDUCTION, "reduction_kind": Fusion.REDUCTION,
                    "scan_spec": Fusion.SCAN, "scatter_dims": Fusion.SCATTER}[meth]
            if overridden:
                assert d.fusion == role, (name, meth)
        if d.fusion == Fusion.REDUCTION:
            kinds = d.reduction_kind.__func__ is not OpDef.reduction_kind.__func__
            assert kinds != (d.arg_compare is not None), name


# -- a new elementwise op and a new scan, one class each -----------------------------------

def _define_ops() -> tuple[type[OpDef], type[OpDef]]:
    """The two new ops. Defined when the fixture runs, not at import: defining registers
    an op, and the registry other test modules see must stay as shipped."""

    class Squareplus(Elementwise):
        """``(x + sqrt(x * x + 4)) / 2``, a smooth ReLU: a new elementwise op."""

        name = "test_squareplus"
        operands = ("x",)
        dtypes = FLOAT_DTYPES
        fn = staticmethod(lambda x: (x + np.sqrt(x * x + 4)) / 2)

        @classmethod
        def c_expr(cls, op: Op, args: list[str]) -> str:
            sqrt = "sqrtf" if op.operands[0].dtype is DType.F32 else "sqrt"
            x = args[0]
            return f"((({x}) + {sqrt}(({x}) * ({x}) + 4)) / 2)"

    class RunningMax(OpDef):
        """The running maximum along ``axis`` (NaN propagates): a new scan."""

        name = "test_running_max"
        operands = ("x",)
        attrs = {"axis": Attr(INT)}
        fusion = Fusion.SCAN

        @classmethod
        def infer(cls, ctx: Ctx, attrs: Mapping[str, Any]) -> list[TensorType]:
            ctx.dtype_in(0, (DType.F32, DType.F64))
            ctx.axis(attrs["axis"], ctx.types[0].rank)
            return [ctx.types[0]]

        @classmethod
        def reference(cls, inputs: list[np.ndarray], attrs: Mapping[str, Any], env: Env
                      ) -> np.ndarray:
            return np.maximum.accumulate(inputs[0], axis=attrs["axis"])

        @classmethod
        def scan_spec(cls, op: Op) -> ScanSpec:
            return ScanSpec("max", op.attrs["axis"])

    return Squareplus, RunningMax


@pytest.fixture(scope="module")
def new_ops():
    ops = _define_ops()
    yield ops
    for cls in ops:  # this module's own: later modules see the registry as shipped
        opdef._REGISTRY.pop(cls.name, None)


@pytest.fixture(scope="module")
def compiler(tmp_path_factory, new_ops):
    return Compiler(CompileCache(tmp_path_factory.mktemp("cache")), target="native")


def _check(compiler: Compiler, g, shapes: list[tuple[int, ...]], dtype: str) -> dict:
    exe = compiler.compile(g)
    assert exe.artifact.engine == "native", exe.artifact.metadata.get("native_fallback")
    for shape in shapes:
        xs = (RNG.standard_normal(shape) * 3).astype(dtype)
        if xs.size > 3:
            xs.flat[2] = np.nan
        got, want = exe.run([xs])[0], interpret(g, [xs])[0]
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == "float32" else 1e-12,
                                   equal_nan=True)
    return exe.artifact.metadata["native"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_new_elementwise_op_fuses_and_runs(compiler, new_ops, dtype) -> None:
    Squareplus = new_ops[0]
    b = GraphBuilder("squareplus")
    N, D = b.symbol("N"), b.symbol("D")
    short = "f32" if dtype == "float32" else "f64"
    x = b.input("x", short, [N, D])
    y = b.op(Squareplus.name, b.mul(x, x))
    # fused with its neighbours, including a row reduction that reads it twice
    s = b.reduce(y, kind="sum", axes=[1])
    g = b.build(b.div(y, b.broadcast_in_dim(s, shape=[N, D], broadcast_dimensions=[0])))
    native = _check(compiler, g, [(2, 3), (1, 1), (0, 4), (5, 0), (7, 33), (64, 1000)], dtype)
    assert len(native["kernels"]) == 1
    assert Squareplus.name in native["kernels"][0]["ops"]


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_a_new_scan_runs_as_a_scan(compiler, new_ops, axis) -> None:
    RunningMax = new_ops[1]
    b = GraphBuilder("running_max")
    A, B, C = b.symbol("A"), b.symbol("B"), b.symbol("C")
    x = b.input("x", "f64", [A, B, C])
    g = b.build(b.neg(b.op(RunningMax.name, b.abs(x), axis=axis)))
    native = _check(compiler, g, [(2, 3, 4), (1, 1, 1), (0, 3, 2), (3, 0, 2), (4, 300, 3),
                                  (2, 2, 700)], "float64")
    assert native["fusion"]["scancall"] == 1


def test_the_new_ops_are_one_class_each(new_ops) -> None:
    """What a new op takes: its class, nothing registered elsewhere."""
    for cls in new_ops:
        assert inspect.getmodule(cls).__name__ == __name__
        assert opdef.get_op(cls.name) is cls
