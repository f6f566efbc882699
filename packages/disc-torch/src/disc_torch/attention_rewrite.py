"""Hand-written causal attention in a dynamo graph becomes ``scaled_dot_product_attention``.

Why here, before aot_autograd: in a training graph the probabilities of an unfused
softmax are saved for the backward, so the core ``fuse-attention`` pass (which fuses the
forward wherever nothing else reads them) leaves training graphs alone. Rewritten to SDPA
before autograd, the forward and its backward both become torch's flash-attention ops,
which DISC compiles as its fused ``attention`` / ``attention_grad`` (converters/
attention.py).

Only what is provably the same computation is rewritten::

    softmax(masked_fill(q @ kᵀ * c, ~ones(S, S).tril(), -inf), dim=-1) @ v

(or ``/ c``, ``torch.where(tril, scores, -inf)``, ``torch.matmul``, ``F.softmax``), with
q, k, v 4-d float32/float64 of one shape, the tril's size provably the query and key
length, and ``c`` a number or 1/sqrt(head size). A causal mask never masks a whole row,
so SDPA's convention for such rows (0, where a softmax gives NaN) cannot differ. Dropout
between the softmax and the product, other masks, or an intermediate read elsewhere
keep the graph as it is. ``DISC_FUSED_ATTENTION=0`` turns it off.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
import torch.nn.functional as F
from torch.fx.experimental.symbolic_shapes import statically_known_true

__all__ = ["rewrite_causal_attention"]

_MATMUL = {operator.matmul, torch.matmul}
_FLOATS = (torch.float32, torch.float64)


def _val(n: Any) -> Any:
    return n.meta.get("example_value") if isinstance(n, torch.fx.Node) else n


def _is(n: Any, op: str, targets: Any) -> bool:
    return (isinstance(n, torch.fx.Node) and n.op == op
            and (n.target in targets if isinstance(targets, (set, tuple)) else
                 n.target == targets))


def _same(a: Any, b: Any) -> bool:
    return a is b or (not isinstance(a, torch.SymInt) and not isinstance(b, torch.SymInt)
                      and a == b) or statically_known_true(a == b)


def _arg(n: torch.fx.Node, i: int, name: str, default: Any = None) -> Any:
    return n.args[i] if len(n.args) > i else n.kwargs.get(name, default)


def _softmax_input(n: Any) -> Any:
    """x of ``softmax(x, -1)`` (method, torch or F), else None."""
    if _is(n, "call_method", "softmax") or _is(n, "call_function",
                                                 {torch.softmax, F.softmax}):
        x = n.args[0]
        dim = _arg(n, 1, "dim")
        # dtype: torch.softmax(x, dim, dtype), F.softmax(x, dim, _stacklevel, dtype)
        dtype = _arg(n, 3 if n.target is F.softmax else 2, "dtype")
        v = _val(x)
        if dtype is None and isinstance(v, torch.Tensor) and dim in (-1, v.dim() - 1):
            return x
    return None


def _tril_of_ones(n: Any, size: Any) -> bool:
    """``n`` is ``ones(size, size, dtype=bool).tril()`` (diagonal 0)."""
    if _is(n, "call_method", "tril"):
        src, diag = n.args[0], _arg(n, 1, "diagonal", 0)
    elif _is(n, "call_function", torch.tril):
        src, diag = n.args[0], _arg(n, 1, "diagonal", 0)
    else:
        return False
    if diag != 0 or not _is(src, "call_function", torch.ones):
        return False
    v = _val(src)
    return (isinstance(v, torch.Tensor) and v.dtype == torch.bool and v.dim() == 2
            and _same(v.shape[0], size) and _same(v.shape[1], size))


def _causal_scores(n: Any, size: Any) -> Any:
    """The scores under a causal -inf fill (masked_fill(~tril, -inf) or
    where(tril, s, -inf)), else None."""
    if _is(n, "call_method", "masked_fill") or _is(n, "call_function", torch.masked_fill):
        s, cond, value = n.args[0], n.args[1], n.args[2]
        if value == -math.inf and _is(cond, "call_function", operator.invert) and \
                _tril_of_ones(cond.args[0], size):
            return s
    if _is(n, "call_function", torch.where) and len(n.args) == 3:
        cond, s, value = n.args
        if value == -math.inf and _tril_of_ones(cond, size):
            return s
    return None


_BAD = object()


def _split_scale(n: Any) -> tuple[Any, Any, bool] | None:
    """(tensor operand, factor operand, divides) of ``s * c`` / ``c * s`` / ``s / c``."""
    if not _is(n, "call_function", {operator.mul, operator.truediv}):
        return None
    a, b = n.args
    if n.target is operator.mul and not isinstance(_val(a), torch.Tensor):
        a, b = b, a
    if not isinstance(_val(a), torch.Tensor) or isinstance(_val(b), torch.Tensor):
        return None
    return a, b, n.target is operator.truediv


def _scale_value(c: Any, divides: bool, head: Any) -> Any:
    """The factor as a float, None for 1/sqrt(head) traced from sizes, else _BAD."""
    if isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) and c > 0:
        return 1.0 / float(c) if divides else float(c)
    if not isinstance(c, torch.fx.Node):
        return _BAD
    if not divides and _is(c, "call_function", operator.truediv) and c.args[0] == 1.0:
        c, divides = c.args[1], True
    if divides and _is(c, "call_function", torch._sym_sqrt) and _same(_val(c.args[0]), head):
        return None
    return _BAD


def _k_transposed(n: Any) -> Any:
    """k of ``k.transpose(-2, -1)`` (or (2, 3), or ``.mT``), else None."""
    if _is(n, "call_method", "transpose") or _is(n, "call_function", torch.transpose):
        k, a, b = n.args[0], n.args[1], n.args[2]
        if {a, b} in ({-2, -1}, {2, 3}):
            return k
    return None


def _single_use(*nodes: torch.fx.Node) -> bool:
    return all(len(n.users) == 1 for n in nodes)


def rewrite_causal_attention(gm: torch.fx.GraphModule) -> int:
    """Rewrite every matched causal attention in ``gm`` (in place); how many."""
    from disc_core.options import CORE_OPTIONS

    if not CORE_OPTIONS.value("fused_attention"):
        return 0
    count = 0
    for node in list(gm.graph.nodes):
        if not _is(node, "call_function", _MATMUL) or len(node.args) != 2:
            continue
        probs, v = node.args
        masked = _softmax_input(probs)
        qv = _val(v)
        if masked is None or not isinstance(qv, torch.Tensor) or qv.dim() != 4:
            continue
        scaled = _causal_scores(masked, qv.shape[-2])
        if scaled is None:
            continue
        split = _split_scale(scaled)
        qk_node = split[0] if split is not None else scaled
        if not _is(qk_node, "call_function", _MATMUL):
            continue
        q, kt = qk_node.args
        k = _k_transposed(kt)
        if k is None:
            continue
        vals = [_val(x) for x in (q, k, v)]
        if not all(isinstance(t, torch.Tensor) and t.dim() == 4 and t.dtype in _FLOATS
                   and t.dtype == vals[0].dtype for t in vals):
            continue
        vq, vk, vv = vals
        if not (all(_same(vq.shape[i], vk.shape[i]) and _same(vq.shape[i], vv.shape[i])
                    for i in range(2)) and _same(vq.shape[-1], vk.shape[-1])
                and _same(vk.shape[-2], vv.shape[-2]) and _same(vq.shape[-2], vk.shape[-2])):
            continue
        scale: Any = 1.0
        if split is not None:
            scale = _scale_value(split[1], split[2], vq.shape[-1])
            if scale is _BAD:
                continue
        chain = [kt, qk_node, masked, probs] + ([scaled] if split is not None else [])
        if not _single_use(*chain):
            continue
        kwargs: dict[str, Any] = {"is_causal": True}
        if scale is not None:
            kwargs["scale"] = scale
        with gm.graph.inserting_before(node):
            fused = gm.graph.call_function(F.scaled_dot_product_attention, (q, k, v), kwargs)
        fused.meta.update(node.meta)
        node.replace_all_uses_with(fused)
        gm.graph.erase_node(node)
        count += 1
    if count:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return count
