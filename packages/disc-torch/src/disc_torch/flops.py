"""Rough FLOP estimates per FX node, so the report can say what share of the work compiled.

Contractions count 2 FLOPs per multiply-add; everything else one per output element
(reductions: per input element). Sizes use dynamo's hints for the shapes it traced with.
"""

from __future__ import annotations

import math

import torch

__all__ = ["estimate_flops"]

aten = torch.ops.aten


def _n(size) -> int:
    if isinstance(size, torch.SymInt):
        hint = size.node.hint if hasattr(size.node, "hint") else None
        return int(hint) if hint is not None else 1
    return int(size)


def _numel(t) -> int:
    return math.prod(_n(d) for d in t.shape) if isinstance(t, torch.Tensor) else 0


def estimate_flops(node: torch.fx.Node) -> float | None:
    meta = node.meta.get("val")
    if meta is None:
        return None
    target = node.target
    args = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in node.args]
    try:
        if target in (aten.mm.default, aten.addmm.default, aten.bmm.default):
            a = args[1] if target is aten.addmm.default else args[0]
            return 2.0 * _numel(meta) * _n(a.shape[-1])
        if target is aten.convolution.default:  # weight [O, I/groups, k...]: MACs per output
            w = args[1]
            return 2.0 * _numel(meta) * (_numel(w) // max(_n(w.shape[0]), 1))
        if target is aten.convolution_backward.default:
            return 4.0 * _numel(args[0]) * _numel(args[2]) / max(_n(args[2].shape[0]), 1)
        outs = meta if isinstance(meta, (list, tuple)) else [meta]
        ins = [a for a in args if isinstance(a, torch.Tensor)]
        return float(max([_numel(o) for o in outs] + [_numel(i) for i in ins] + [0]))
    except Exception:
        return None
