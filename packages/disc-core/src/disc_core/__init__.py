"""disc-core: the framework-free compiler of DISC.

A closed primitive IR with symbolic dims (``ir``, ``opdef``, ``ops``), the shape-constraint
analysis, passes, the text form, the reference interpreter, clustering shared by every
bridge, the native engine (``native``), the coverage report (``report``), and the compiler
front door (``jit``/``Compiler``) that produces disc-runtime executables, through the
named compile stages of ``pipeline`` (``compile_text(text, stop_after=...)`` runs them
one at a time for inspection).

Names are imported on first use (PEP 562): the bridges import ``disc_core.frameworks`` and
``disc_core.report`` at import time, and that should not cost numpy, the op registry and
the compiler.
"""

from importlib import import_module
from typing import Any

from ._version import __version__ as __version__

_EXPORTS = {
    "GraphBuilder": "builder", "Compiler": "compiler", "CompileStats": "compiler",
    "JitFunction": "compiler", "jit": "compiler", "signature_of": "compiler",
    "DType": "dtypes", "dtype_of": "dtypes", "InputMismatchError": "interpreter",
    "interpret": "interpreter", "Graph": "ir", "Op": "ir", "SymbolInfo": "ir",
    "TensorType": "ir", "Value": "ir", "InterpretError": "opdef", "OpDef": "opdef",
    "VerifyError": "opdef", "get_op": "opdef", "registry": "opdef", "ParseError": "parser",
    "parse_graph": "parser", "ShapeConstraints": "shape_constraints", "Expr": "symbolic",
    "as_expr": "symbolic", "parse_expr": "symbolic", "STAGES": "pipeline",
    "StageResult": "pipeline", "compile_text": "pipeline",
}

__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'disc_core' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
