"""disc-core: the framework-free compiler of DISC.

A closed primitive IR with symbolic dims (``ir``, ``opdef``, ``ops``), the shape-constraint
analysis, passes, the text form, the reference interpreter, clustering shared by every
bridge, and the compiler front door (``jit``/``Compiler``) that produces disc-runtime
executables.
"""

from .builder import GraphBuilder
from .compiler import Compiler, CompileStats, JitFunction, __version__, jit, signature_of
from .dtypes import DType, dtype_of
from .interpreter import InputMismatchError, interpret
from .ir import Graph, Op, SymbolInfo, TensorType, Value
from .opdef import InterpretError, OpDef, VerifyError, get_op, registry
from .parser import ParseError, parse_graph
from .shape_constraints import ShapeConstraints
from .symbolic import Expr, as_expr, parse_expr

__all__ = [
    "CompileStats", "Compiler", "DType", "Expr", "Graph", "GraphBuilder", "InputMismatchError",
    "InterpretError", "JitFunction", "Op", "OpDef", "ParseError", "ShapeConstraints",
    "SymbolInfo", "TensorType", "Value", "VerifyError", "__version__", "as_expr", "dtype_of",
    "get_op", "interpret", "jit", "parse_expr", "parse_graph", "registry", "signature_of",
]
