"""The DISC <-> StableHLO op mapping, as data.

Plain Python (no jaxlib) so that docs, tests and ``disc export --list`` can read it without
the MLIR bindings. ``export.py`` and ``import_.py`` drive their one-to-one cases from these
tables; the ops that need more than a renaming (reductions, argmax, sort, gather, the
dynamic-shape forms) are written out there and listed in :data:`STRUCTURED`.
"""

from __future__ import annotations

from dataclasses import dataclass

#: DISC elementwise op -> StableHLO (or CHLO) op with the same operands and semantics.
UNARY: dict[str, str] = {
    "neg": "stablehlo.negate",
    "abs": "stablehlo.abs",
    "exp": "stablehlo.exponential",
    "expm1": "stablehlo.exponential_minus_one",
    "log": "stablehlo.log",
    "log1p": "stablehlo.log_plus_one",
    "sqrt": "stablehlo.sqrt",
    "rsqrt": "stablehlo.rsqrt",
    "tanh": "stablehlo.tanh",
    "logistic": "stablehlo.logistic",
    "sin": "stablehlo.sine",
    "cos": "stablehlo.cosine",
    "tan": "stablehlo.tan",
    "floor": "stablehlo.floor",
    "ceil": "stablehlo.ceil",
    "round": "stablehlo.round_nearest_afz",
    "round_even": "stablehlo.round_nearest_even",
    "not": "stablehlo.not",
    "sign": "stablehlo.sign",
    "is_finite": "stablehlo.is_finite",
    "erf": "chlo.erf",
}

BINARY: dict[str, str] = {
    "add": "stablehlo.add",
    "sub": "stablehlo.subtract",
    "mul": "stablehlo.multiply",
    "div": "stablehlo.divide",
    "rem": "stablehlo.remainder",
    "pow": "stablehlo.power",
    "max": "stablehlo.maximum",
    "min": "stablehlo.minimum",
    "atan2": "stablehlo.atan2",
    "and": "stablehlo.and",
    "or": "stablehlo.or",
    "xor": "stablehlo.xor",
}

#: Ops with the same operands, renamed (select's scalar predicate and clamp's scalar
#: bounds are allowed on both sides).
RENAMED: dict[str, str] = {
    "select": "stablehlo.select",
    "clamp": "stablehlo.clamp",
    "convert": "stablehlo.convert",
    "transpose": "stablehlo.transpose",
    "reverse": "stablehlo.reverse",
    "concatenate": "stablehlo.concatenate",
    "dynamic_update_slice": "stablehlo.dynamic_update_slice",
}

#: reduce kind -> the StableHLO op of the reduction body.
REDUCE_BODY: dict[str, str] = {
    "sum": "stablehlo.add",
    "prod": "stablehlo.multiply",
    "max": "stablehlo.maximum",
    "min": "stablehlo.minimum",
    "and": "stablehlo.and",
    "or": "stablehlo.or",
}

#: DISC ops whose export is more than a renaming, with the StableHLO they become.
STRUCTURED: dict[str, str] = {
    "compare": "stablehlo.compare (direction upper-cased; FLOAT / SIGNED / UNSIGNED compare "
               "type from the dtype)",
    "constant": "stablehlo.constant",
    "iota": "stablehlo.iota; stablehlo.dynamic_iota when a dim is symbolic",
    "reshape": "stablehlo.reshape; stablehlo.dynamic_reshape when a dim is symbolic",
    "dynamic_reshape": "stablehlo.dynamic_reshape (the shape tensor as is)",
    "broadcast_in_dim": "stablehlo.broadcast_in_dim; stablehlo.dynamic_broadcast_in_dim when a "
                        "result dim is symbolic",
    "dynamic_broadcast_in_dim": "stablehlo.dynamic_broadcast_in_dim (the shape tensor as is)",
    "get_dimension_size": "stablehlo.get_dimension_size (i32) + stablehlo.convert to i64",
    "slice": "stablehlo.slice; stablehlo.real_dynamic_slice when a start or limit is symbolic",
    "dynamic_slice": "stablehlo.dynamic_slice (starts converted to i64); with symbolic sizes "
                     "stablehlo.dynamic_gather of one window at the start vector (gather "
                     "clamps the start as dynamic_slice does)",
    "pad": "stablehlo.pad; stablehlo.dynamic_pad when an edge is symbolic",
    "reduce": "stablehlo.reduce with a one-op body (add, multiply, maximum, minimum, and, or) "
              "and the kind's identity as init",
    "argmax": "stablehlo.reduce over (x, iota) with a first-index, NaN-wins comparator",
    "argmin": "stablehlo.reduce over (x, iota) with a first-index, NaN-wins comparator",
    "cumulative": "stablehlo.reduce_window (window = the axis, low padding = axis - 1); the "
                  "axis must be static",
    "dot_general": "stablehlo.dot_general",
    "convolution": "stablehlo.convolution (layouts -> dimension numbers)",
    "gather": "stablehlo.gather (one collapsed index dim, batching dims for batch_dims); "
              "stablehlo.dynamic_gather when a slice size is symbolic",
    "gather_elements": "stablehlo.gather with every other dim a batching dim (the operand cut "
                       "to the indices' extent first)",
    "scatter_add": "stablehlo.scatter with an add body, indices clamped first (StableHLO "
                   "drops out-of-bounds updates, DISC clamps them)",
    "scatter_elements_add": "stablehlo.scatter with every other dim a batching dim, add body, "
                            "indices clamped first (indices and updates smaller than the "
                            "operand off the axis are zero-padded to it)",
    "sort": "stablehlo.sort over (x, iota i64), stable, NaN-largest comparator",
    "top_k": "sort descending + slice of the first k along the last dim",
}

#: DISC ops with no export (yet), and why.
NOT_EXPORTED: dict[str, str] = {}

#: StableHLO ops the importer accepts beyond the inverses of the tables above.
IMPORT_EXTRA: dict[str, str] = {
    "func.call": "inlined; an argument marked jax.global_constant names its dimension symbol",
    "func.return": "the graph's outputs",
    "stablehlo.custom_call @shape_assertion": "dropped: an EQ between two dims makes their "
                                              "symbols one",
    "stablehlo.broadcast": "broadcast_in_dim with the new dims leading",
    "stablehlo.dot": "dot_general contracting lhs's last dim with rhs's first",
    "stablehlo.real_dynamic_slice": "slice with symbolic bounds from the shape tensors",
    "stablehlo.dynamic_iota": "iota with symbolic dims from the shape tensor",
    "stablehlo.dynamic_pad": "pad with symbolic edges",
    "stablehlo.optimization_barrier": "its operands",
}


@dataclass(frozen=True)
class Row:
    """One line of the mapping table in docs/stablehlo.md."""

    disc: str
    stablehlo: str
    exported: bool
    imported: bool


def table() -> list[Row]:
    """Every core op with its StableHLO form and the directions that convert it."""
    rows: list[Row] = []
    for name, target in {**UNARY, **BINARY, **RENAMED}.items():
        rows.append(Row(name, target, True, True))
    for name, target in STRUCTURED.items():
        rows.append(Row(name, target, True, name in IMPORTED_STRUCTURED))
    for name, why in NOT_EXPORTED.items():
        rows.append(Row(name, why, False, False))
    return sorted(rows, key=lambda r: r.disc)


#: structured DISC ops the importer produces from their StableHLO form (top_k comes back as
#: sort + slice, which computes the same)
IMPORTED_STRUCTURED: frozenset[str] = frozenset({
    "compare", "constant", "iota", "reshape", "dynamic_reshape", "broadcast_in_dim",
    "dynamic_broadcast_in_dim", "get_dimension_size", "slice", "dynamic_slice", "pad",
    "reduce", "argmax", "argmin", "cumulative", "dot_general", "convolution", "gather",
    "gather_elements", "scatter_add", "scatter_elements_add", "sort",
})
