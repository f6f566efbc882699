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

from typing import Any

__all__ = ["StableHLOError", "StableHLOModule", "UnsupportedStableHLOError", "export",
           "exportable", "import_"]

_WHERE = {"StableHLOModule": "exporter", "export": "exporter", "exportable": "exporter",
          "import_": "importer", "StableHLOError": "types",
          "UnsupportedStableHLOError": "types"}


def __getattr__(name: str) -> Any:
    """Load the MLIR-backed parts on first use, so that ``disc_core.stablehlo.mapping``
    (plain data: the CLI's and the docs' op table) imports without jaxlib."""
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
