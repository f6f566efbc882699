"""Run an exported module on XLA's CPU backend through jax: the cross-check's other side.

jax runs a StableHLO module only through its export machinery, so the module becomes a
``jax.export.Exported`` by hand (the exported function, symbolic input avals, the output
avals as jax dim expressions) and ``Exported.call`` runs it. The call inlines the module
and runs StableHLO shape refinement at the call's concrete shapes, which resolves every
``get_dimension_size`` / ``dynamic_*`` op the export wrote: XLA compiles the module DISC
wrote, dynamic ops included, not a re-lowering of it.

jax's dimension variables are at least 1, so a call where a symbol is 0 (or where an
input dim is not linear in one symbol, which jax cannot solve) exports the graph again with the
symbols bound (``export(graph, bindings=...)``, a static module) and runs that: ``mode``
in the result says which path ran. Needs ``jax``: a test helper, kept out of disc_core,
which may not import a framework (tests-integration/test_dependency_rule.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from disc_core.ir import Graph
from disc_core.stablehlo.exporter import _linear
from disc_core.symbolic import Expr

__all__ = ["XlaResult", "bind_symbols", "run_on_xla"]


@dataclass
class XlaResult:
    outputs: list[np.ndarray]
    #: "dynamic": the module with ``?`` dims, refined by jax at the call; "static": the
    #: module exported with the symbols bound
    mode: str


def bind_symbols(graph: Graph, inputs: Sequence[np.ndarray]) -> dict[str, int]:
    """Symbol values read off the inputs' shapes (as the interpreter binds them: plain
    symbols, then linear dims such as ``B + 1``)."""
    from disc_core.interpreter import bind_inputs

    _, env = bind_inputs(graph, list(inputs))
    return dict(env.values)


def _jax_dim(e: Expr, env: Mapping[str, Any]) -> Any:
    """A DISC dim expression as a jax dim expression over the symbols in ``env``."""
    from jax import core as jcore

    total: Any = 0
    for mono, coeff in e.terms:
        term: Any = coeff
        for atom in mono:
            fn = getattr(atom, "fn", None)
            if fn is None:
                val = env[atom.name]
            else:
                args = [_jax_dim(a, env) for a in atom.args]
                if fn == "floordiv":
                    val = args[0] // args[1]
                elif fn == "mod":
                    val = args[0] % args[1]
                elif fn == "ceildiv":
                    val = -((-args[0]) // args[1])
                elif fn == "max":
                    val = jcore.max_dim(*args)
                else:
                    val = jcore.min_dim(*args)
            term = term * val
        total = total + term
    return total


def _exported(module_bytes: bytes, in_avals: tuple, out_avals: tuple) -> Any:
    import jax
    from jax import export as jexport

    n_in, n_out = len(in_avals), len(out_avals)
    return jexport.Exported(
        fun_name="main", in_tree=jax.tree.structure((tuple(range(n_in)), {})),
        in_avals=in_avals, out_tree=jax.tree.structure(tuple(range(n_out))),
        out_avals=out_avals, _has_named_shardings=False,
        _in_named_shardings=(None,) * n_in, _out_named_shardings=(None,) * n_out,
        in_shardings_hlo=(None,) * n_in, out_shardings_hlo=(None,) * n_out, nr_devices=1,
        platforms=("cpu",), ordered_effects=(), unordered_effects=(),
        disabled_safety_checks=(), mlir_module_serialized=module_bytes,
        calling_convention_version=10, module_kept_var_idx=tuple(range(n_in)),
        uses_global_constants=any(not all(isinstance(d, int) for d in a.shape)
                                  for a in in_avals),
        _get_vjp=None)


def _serialize(graph: Graph, bindings: Mapping[str, int] | None) -> bytes:
    """The module in jax's portable-artifact form (what ``Exported`` carries)."""
    from jax._src.export._export import _module_to_bytecode
    from jax._src.interpreters import mlir as jmlir
    from jaxlib.mlir import ir

    from disc_core.stablehlo import export

    text = export(graph, bindings=bindings).text
    with jmlir.make_ir_context():
        return _module_to_bytecode(ir.Module.parse(text))


def run_on_xla(graph: Graph, inputs: Sequence[np.ndarray]) -> XlaResult:
    """Run ``export(graph)`` on XLA CPU at the inputs' shapes (see the module docstring)."""
    import jax
    from jax import core as jcore
    from jax import export as jexport

    # DISC graphs use i64 and f64; jax truncates them to 32 bits unless x64 is on (a
    # process-wide switch: this helper is for tests and tools, not library code paths)
    jax.config.update("jax_enable_x64", True)
    values = bind_symbols(graph, inputs)
    # jax solves its dimension variables from input dims linear in one symbol (and checks
    # the other dims, such as S*B, against the solution)
    solvable = {lin[0] for v in graph.inputs for d in v.shape
                if (lin := _linear(d)) is not None}
    simple = all(d.free_symbols() <= solvable for v in graph.inputs for d in v.shape)
    names = sorted(graph.free_symbols() | set(values))
    if simple and names and all(values.get(n, 0) >= 1 for n in names) \
            and set(names) <= set(values):
        scope = jexport.symbolic_shape(", ".join(names))
        env = dict(zip(names, scope))
        in_avals = tuple(jcore.ShapedArray(tuple(_jax_dim(d, env) for d in v.shape),
                                           v.dtype.np) for v in graph.inputs)
        out_avals = tuple(jcore.ShapedArray(tuple(_jax_dim(d, env) for d in v.shape),
                                            v.dtype.np) for v in graph.outputs)
        exp = _exported(_serialize(graph, None), in_avals, out_avals)
        mode = "dynamic"
    else:
        def static(shape: Sequence[Expr]) -> tuple[int, ...]:
            return tuple(d.evaluate(values) for d in shape)

        in_avals = tuple(jcore.ShapedArray(static(v.shape), v.dtype.np) for v in graph.inputs)
        out_avals = tuple(jcore.ShapedArray(static(v.shape), v.dtype.np)
                          for v in graph.outputs)
        exp = _exported(_serialize(graph, values), in_avals, out_avals)
        mode = "static"
    outs = jax.jit(exp.call)(*inputs)
    return XlaResult([np.asarray(o) for o in outs], mode)
