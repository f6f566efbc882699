"""Save the base of a permuted tensor for the backward, and permute it there.

The min-cut partitioner saves what the backward reads; for attention that is Q, K and V
as ``permute(view(split(qkv)), [0, 2, 1, 3])``, views in torch. A DISC cluster returns
every output row-major, so each saved permute costs the forward a full copy (a transpose
kernel writing [B, H, S, D]) only for the backward to read it back. Saving the permute's
input instead (here the [B, S, H, D] view, which the cluster writes anyway) and applying
the same permute as the backward's first op moves the permute where it is free: a view in
torch, and in a DISC cluster a transpose that the consumer reads through (the fused
attention folds it into its strides, ``seq_major``). The values the backward computes are
unchanged; only which tensor crosses the boundary does.

Only ``permute`` / ``transpose`` of a forward tensor are moved (a pure reordering: the
saved tensor keeps its size), and only where the forward graph's saved output and the
backward's placeholder are matched by name, as torch's partitioner makes them.
"""

from __future__ import annotations

import torch

__all__ = ["save_permute_bases"]

aten = torch.ops.aten
_PERMUTES = (aten.permute.default, aten.transpose.int)


def _output_node(graph: torch.fx.Graph) -> torch.fx.Node:
    return next(n for n in reversed(graph.nodes) if n.op == "output")


def save_permute_bases(fw: torch.fx.GraphModule, bw: torch.fx.GraphModule) -> int:
    """Rewrite the pair in place (see the module docstring); returns how many saved
    tensors now cross as their permute's base."""
    placeholders = {n.name: n for n in bw.graph.nodes if n.op == "placeholder"}
    first_op = next((n for n in bw.graph.nodes if n.op != "placeholder"), None)
    if first_op is None:
        return 0
    out = _output_node(fw.graph)
    outs = list(out.args[0])
    moved = 0
    for i, s in enumerate(outs):
        if not (isinstance(s, torch.fx.Node) and s.op == "call_function"
                and s.target in _PERMUTES and s.name in placeholders):
            continue
        base = s.args[0]
        if not (isinstance(base, torch.fx.Node)
                and isinstance(base.meta.get("val"), torch.Tensor)
                and isinstance(s.meta.get("val"), torch.Tensor)):
            continue
        p = placeholders[s.name]
        with bw.graph.inserting_before(first_op):
            again = bw.graph.call_function(s.target, (p, *s.args[1:]), dict(s.kwargs))
        again.meta = dict(p.meta)
        p.replace_all_uses_with(again, delete_user_cb=lambda user, again=again: user is not again)
        p.meta["val"] = base.meta["val"]
        for key in ("tensor_meta",):
            if key in base.meta:
                p.meta[key] = base.meta[key]
            else:
                p.meta.pop(key, None)
        outs[i] = base
        moved += 1
    if moved:
        out.args = (type(out.args[0])(outs), *out.args[1:])
        fw.graph.eliminate_dead_code()
        fw.recompile()
        bw.recompile()
    return moved
