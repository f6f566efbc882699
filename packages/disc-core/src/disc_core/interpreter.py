"""The reference interpreter: runs any graph on numpy arrays. The oracle for every backend.

Binding inputs assigns each dimension symbol its concrete value and rejects inconsistent
inputs with a message naming the input, the dim and the symbol. After every op the actual
result shapes are checked against the symbolic ones, so a wrong shape rule (or inputs that
violate an equality the graph relies on) is caught where it happens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .dtypes import dtype_of
from .ir import Graph, Value
from .opdef import Env, InterpretError
from .symbolic import DimDivisionError, Expr, UnboundSymbolError, evaluate_shape, solve_linear


class InputMismatchError(InterpretError, ValueError):
    """Inputs disagree with the graph signature (count, dtype, rank, dims, symbols)."""


def bind_inputs(graph: Graph, inputs: Sequence[Any]) -> tuple[list[np.ndarray], Env]:
    """Check inputs against the signature and return them as arrays plus symbol bindings."""
    if len(inputs) != len(graph.inputs):
        names = ", ".join(v.name or f"arg{i}" for i, v in enumerate(graph.inputs))
        raise InputMismatchError(f"@{graph.name}: expected {len(graph.inputs)} inputs "
                                 f"({names}), got {len(inputs)}")
    arrays = [np.asarray(x) for x in inputs]
    env = Env()
    origin: dict[str, str] = {}
    pending: list[tuple[str, int, Expr, int]] = []
    for i, (v, arr) in enumerate(zip(graph.inputs, arrays)):
        label = f"input #{i} '{v.name or f'arg{i}'}'"
        try:
            got_dt = dtype_of(arr.dtype)
        except ValueError:
            got_dt = None
        if got_dt is not v.dtype:
            raise InputMismatchError(f"{label}: expected dtype {v.dtype.short} "
                                     f"({v.dtype.np_name}), got {arr.dtype}")
        if arr.ndim != v.rank:
            raise InputMismatchError(f"{label}: expected rank {v.rank} {v.type}, got shape "
                                     f"{tuple(arr.shape)}")
        for k, (dim, size) in enumerate(zip(v.shape, arr.shape)):
            if dim.is_const:
                if dim.value != size:
                    raise InputMismatchError(f"{label}: dim {k} must be {dim.value}, got "
                                             f"{size} (shape {tuple(arr.shape)})")
            elif dim.is_symbol:
                name = dim.symbol_name
                if name in env.values and env.values[name] != size:
                    raise InputMismatchError(
                        f"{label}: dim {k} is {size} but symbol {name} = {env.values[name]} "
                        f"from {origin[name]}")
                env.values.setdefault(name, size)
                origin.setdefault(name, f"{label} dim {k}")
            else:
                pending.append((label, k, dim, size, tuple(arr.shape)))
    _resolve_expressions(pending, env, origin)
    for name, info in graph.symbols.items():
        if name in env.values:
            why = info.check(env.values[name])
            if why:
                raise InputMismatchError(f"@{graph.name}: {why} (from {origin.get(name)})")
    return arrays, env


def _resolve_expressions(pending: list[tuple[str, int, Expr, int, tuple[int, ...]]], env: Env,
                         origin: dict[str, str]) -> None:
    """Check dims like ``2*S``, binding a symbol they pin linearly when nothing else does.

    A dim that divides by zero (``floordiv(S, T)`` with ``T = 0``) is an error in a
    non-empty input; in an empty one the division counts as 0, as for every other shape
    (symbolic.evaluate_shape), so both engines see the same sizes downstream."""
    progress = True
    while pending and progress:
        progress = False
        for item in list(pending):
            label, k, dim, size, shape = item
            faults: list = []
            try:
                want = dim.evaluate(env.values, faults)
            except UnboundSymbolError:
                solved = solve_linear(dim, size, env.values)
                if solved is None:
                    continue
                env.values[solved[0]] = solved[1]
                origin[solved[0]] = f"{label} dim {k}"
                faults = []
                want = dim.evaluate(env.values, faults)
            if faults and 0 in shape[:k] + shape[k + 1:]:
                want = max(want, 0)  # an empty input: the division counts as 0
            elif faults:
                raise InputMismatchError(
                    f"{label}: dim {k} is {size} but {dim} divides by zero "
                    f"({faults[0].divisor} = 0) and the input is not empty (shape {shape}); "
                    f"expected {faults[0].divisor} != 0")
            if want != size:
                raise InputMismatchError(f"{label}: dim {k} is {size} but {dim} = {want}")
            pending.remove(item)
            progress = True
    if pending:
        label, k, dim, size, _ = pending[0]
        raise InputMismatchError(f"{label}: cannot determine the symbols of dim {k} ({dim}) "
                                 f"from the inputs")


def interpret(graph: Graph, inputs: Sequence[Any]) -> list[np.ndarray]:
    """Run ``graph`` on concrete inputs and return its outputs as numpy arrays."""
    arrays, env = bind_inputs(graph, inputs)
    values: dict[int, np.ndarray] = {id(v): a for v, a in zip(graph.inputs, arrays)}
    for n, op in enumerate(graph.ops):
        args = [values[id(v)] for v in op.operands]
        try:
            outs = op.opdef.run(args, op.attrs, env)
        except InterpretError as exc:
            raise type(exc)(f"@{graph.name} op #{n} ({op.name}): {exc}") from None
        except (UnboundSymbolError, ZeroDivisionError) as exc:  # incl. DimDivisionError
            raise InterpretError(f"@{graph.name} op #{n} ({op.name}): {exc}") from None
        if len(outs) != len(op.results):
            raise InterpretError(f"@{graph.name} op #{n} ({op.name}): reference returned "
                                 f"{len(outs)} results, expected {len(op.results)}")
        for r, out in zip(op.results, outs):
            out = np.asarray(out)
            if out.dtype != r.dtype.np:
                raise InterpretError(f"@{graph.name} op #{n} ({op.name}): reference returned "
                                     f"dtype {out.dtype}, expected {r.dtype.np_name}")
            _check_result_shape(graph, n, op.name, r, out, env)
            values[id(r)] = out
    return [values[id(v)] for v in graph.outputs]


def _check_result_shape(graph: Graph, n: int, opname: str, r: Value, out: np.ndarray,
                        env: Env) -> None:
    where = f"@{graph.name} op #{n} ({opname})"
    if out.ndim != r.rank:
        raise InterpretError(f"{where}: result has rank {out.ndim}, expected {r.type}")
    for k, (dim, size) in enumerate(zip(r.shape, out.shape)):
        try:
            dim.evaluate(env.values, [])
        except UnboundSymbolError:
            # A data-dependent dim (e.g. from dynamic_reshape) binds its symbol here.
            solved = solve_linear(dim, size, env.values) if not dim.is_symbol else (
                dim.symbol_name, size)
            if solved is None:
                raise InterpretError(f"{where}: cannot bind the symbols of result dim {k} "
                                     f"({dim})") from None
            env.values[solved[0]] = solved[1]
            info = graph.symbols.get(solved[0])
            why = info.check(solved[1]) if info else None
            if why:
                raise InterpretError(f"{where}: {why}") from None
    try:
        wants = evaluate_shape(r.shape, env.values)
    except DimDivisionError as exc:
        raise InterpretError(f"{where}: result {exc}") from None
    for k, (dim, size, want) in enumerate(zip(r.shape, out.shape, wants)):
        if want != size:
            raise InterpretError(f"{where}: result dim {k} is {size} but the graph says "
                                 f"{dim} = {want}; the inputs violate a shape equality the "
                                 f"graph relies on")
