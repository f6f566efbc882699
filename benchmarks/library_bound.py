"""How fast any compiler could make a PyTorch step while calling the same GEMM/conv library.

A same-library comparison has a ceiling: the matrix products and convolutions eager hands to
its library (MKL, oneDNN) stay, whoever calls them, so if a compiler made everything else
free the step would still take at least their time. ``record`` captures those calls during
one eager step (what they are, on which shapes, strides and dtypes) and ``replayer`` turns
them into a step that runs only them, on fresh tensors of the same layouts, back to back.
Timed beside eager as one more contender, ``eager / library_only`` is the best ratio a
compiler can reach without a faster library; a target above it cannot be met by fusion.

The replayed calls run on warm, private inputs, which if anything makes them faster than
inside the step: the ceiling it gives is generous, never too low.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: aten ops that are library calls in eager PyTorch on CPU whose work no fusion removes:
#: the GEMMs of linear layers (MKL, forward and both gradients) and convolutions (oneDNN).
#: Batched products between activations (``bmm``: attention's QKᵀ and PV) are left out:
#: a fused causal attention skips the masked half of them, so counting eager's would put
#: the ceiling too low.
LIBRARY_OPS = frozenset({"mm", "addmm", "convolution", "convolution_backward"})


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, tuple, dict]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket.__name__ in LIBRARY_OPS:
            self.calls.append((func, _layouts(args), _layouts(kwargs)))
        return func(*args, **kwargs)


def _layouts(tree: Any) -> Any:
    """``tree`` with every tensor replaced by its (size, stride, dtype)."""
    if isinstance(tree, torch.Tensor):
        return ("tensor", tuple(tree.shape), tuple(tree.stride()), tree.dtype)
    if isinstance(tree, (list, tuple)):
        return type(tree)(_layouts(t) for t in tree)
    if isinstance(tree, dict):
        return {k: _layouts(v) for k, v in tree.items()}
    return tree


def _materialize(tree: Any) -> Any:
    if isinstance(tree, tuple) and len(tree) == 4 and tree[:1] == ("tensor",):
        _, size, stride, dtype = tree
        # one storage that the layout (expanded dims with stride 0 included) fits in
        span = 1 + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else 0
        flat = torch.randn(span).to(dtype) if dtype.is_floating_point else torch.zeros(
            span, dtype=dtype)
        return torch.as_strided(flat, size, stride)
    if isinstance(tree, (list, tuple)):
        return type(tree)(_materialize(t) for t in tree)
    if isinstance(tree, dict):
        return {k: _materialize(v) for k, v in tree.items()}
    return tree


def record(step: Callable[[Any, Any], Any], x: Any, y: Any) -> list[tuple[Any, tuple, dict]]:
    """The library calls one eager ``step(x, y)`` makes (forward, backward, optimizer)."""
    with _Recorder() as rec:
        step(x, y)
    return rec.calls


def replayer(calls: list[tuple[Any, tuple, dict]]) -> Callable[[], None]:
    """A function that runs exactly ``calls`` on inputs of their layouts, made once."""
    ready = [(func, _materialize(args), _materialize(kwargs)) for func, args, kwargs in calls]

    def run() -> None:
        for func, args, kwargs in ready:
            func(*args, **kwargs)
    return run


def library_only_step(step: Callable[[Any, Any], Any],
                      batches: list[tuple[Any, Any]]) -> Callable[[Any, Any], None]:
    """A step with ``step``'s signature that runs only the library calls ``step`` makes on
    a batch of that input shape (recorded once per shape from ``batches``)."""
    by_shape = {tuple(x.shape): replayer(record(step, x, y)) for x, y in batches}

    def run(x: Any, y: Any) -> None:
        by_shape[tuple(x.shape)]()
    return run
