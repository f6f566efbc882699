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

The other direction too: a saved tensor the forward also permutes for its own use (the
attention output, saved as [B, H, S, D] for the backward while the output projection
reads it as [B, S, H, D]) crosses as that permute, and the backward permutes it back.
The forward then writes the tensor once, in the order its projection reads (the fused
attention writes it there directly), instead of once per order.

Only ``permute`` / ``transpose`` (a pure reordering: the saved tensor keeps its size),
``alias`` and views to the same sizes are seen through, and only where the forward graph's
saved output and the backward's placeholder are matched by name, as torch's partitioner
makes them.
"""

from __future__ import annotations

import torch

__all__ = ["save_permute_bases"]

aten = torch.ops.aten
_PERMUTES = (aten.permute.default, aten.transpose.int)
_SAME_SHAPE = (aten.alias.default, aten.view.default, aten.reshape.default)


def _output_node(graph: torch.fx.Graph) -> torch.fx.Node:
    return next(n for n in reversed(graph.nodes) if n.op == "output")


def _tensor(n: object) -> bool:
    return isinstance(n, torch.fx.Node) and isinstance(n.meta.get("val"), torch.Tensor)


def _dims(node: torch.fx.Node) -> list[int] | None:
    """The permutation a permute/transpose node applies (None for any other node)."""
    val = node.meta.get("val")
    if node.target is aten.permute.default:
        return [int(d) % val.dim() for d in node.args[1]]
    if node.target is aten.transpose.int:
        a, b = (int(d) % val.dim() for d in node.args[1:3])
        dims = list(range(val.dim()))
        dims[a], dims[b] = b, a
        return dims
    return None


def _unalias(n: torch.fx.Node) -> torch.fx.Node:
    while n.op == "call_function" and n.target is aten.alias.default and _tensor(n.args[0]):
        n = n.args[0]
    return n


def _same_shape_views(root: torch.fx.Node) -> list[torch.fx.Node]:
    """``root`` and its views that keep its shape (aliases, a ``view`` to the same sizes,
    as transformers' attention output reaches its ``transpose(1, 2)`` in torch 2.13's
    graph), transitively: a permute of any of them reorders the same tensor."""
    shape = root.meta["val"].shape
    found, todo = [], [root]
    while todo:
        n = todo.pop()
        found.append(n)
        todo += [u for u in n.users if u.op == "call_function" and u.target in _SAME_SHAPE
                 and _tensor(u) and u.meta["val"].shape == shape and u not in found]
    return found


def _cross_as(bw: torch.fx.GraphModule, first_op: torch.fx.Node, p: torch.fx.Node,
              sent: torch.fx.Node, dims: list[int]) -> None:
    """The backward's placeholder ``p`` now receives ``sent``; ``permute(p, dims)`` gives
    the backward what ``p`` held before."""
    with bw.graph.inserting_before(first_op):
        again = bw.graph.call_function(aten.permute.default, (p, dims))
    again.meta = dict(p.meta)
    p.replace_all_uses_with(again, delete_user_cb=lambda user: user is not again)
    p.meta["val"] = sent.meta["val"]
    if "tensor_meta" in sent.meta:
        p.meta["tensor_meta"] = sent.meta["tensor_meta"]
    else:
        p.meta.pop("tensor_meta", None)


def save_permute_bases(fw: torch.fx.GraphModule, bw: torch.fx.GraphModule) -> int:
    """Rewrite the pair in place (see the module docstring); returns how many saved
    tensors now cross in another order."""
    placeholders = {n.name: n for n in bw.graph.nodes if n.op == "placeholder"}
    first_op = next((n for n in bw.graph.nodes if n.op != "placeholder"), None)
    if first_op is None:
        return 0
    out = _output_node(fw.graph)
    outs = list(out.args[0])
    # the forward returns the user's outputs, then what it saves (tensors, then sizes):
    # as many as the backward's inputs that are not tangents; a user's output is never
    # touched, even when the same tensor is saved too
    n_saved = sum(1 for name in placeholders if not name.startswith("tangents"))
    moved = 0
    for i in range(max(len(outs) - n_saved, 0), len(outs)):
        s = outs[i]
        if not (_tensor(s) and s.op == "call_function" and s.name in placeholders):
            continue
        dims = _dims(s) if s.target in _PERMUTES else None
        if dims is not None and _tensor(s.args[0]):
            # saved permute(x): send x, permute in the backward
            sent = s.args[0]
        else:
            # saved x that the forward also permutes for itself: send the permute
            root = _unalias(s)
            users = [u for v in _same_shape_views(root) for u in v.users
                     if u.op == "call_function" and u.target in _PERMUTES and _tensor(u)
                     and any(w.op != "output" for w in u.users)]
            if not users or root.meta["val"].shape != s.meta["val"].shape:
                continue
            sent = users[0]
            forward = _dims(sent)
            dims = [forward.index(d) for d in range(len(forward))]  # the inverse
        _cross_as(bw, first_op, placeholders[s.name], sent, dims)
        outs[i] = sent
        moved += 1
    if moved:
        out.args = (type(out.args[0])(outs), *out.args[1:])
        fw.graph.eliminate_dead_code()
        fw.recompile()
        bw.recompile()
    return moved
