"""StableHLO interop through the MLIR Python bindings that ship in jaxlib.

``export(graph)`` writes a DISC graph as a verified StableHLO module (symbolic dims as
``?``, shape computations with the StableHLO dynamic ops); ``import_(module)`` reads
StableHLO (text, bytecode, an ``ir.Module`` or a file, e.g. what
``jax.jit(f).lower(*args).compiler_ir("stablehlo")`` or ``jax.export`` produce) into a
DISC graph. The op mapping is data in :mod:`disc_core.stablehlo.mapping`; docs/stablehlo.md
has the table.

Needs the ``mlir`` extra (``pip install 'disc-core[mlir]'``); ``import disc_core`` never
imports this package.
"""

from .export import StableHLOModule, export, exportable
from .import_ import import_
from .types import StableHLOError, UnsupportedStableHLOError

__all__ = ["StableHLOError", "StableHLOModule", "UnsupportedStableHLOError", "export",
           "exportable", "import_"]
