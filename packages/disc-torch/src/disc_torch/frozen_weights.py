"""Weights the caller froze, and the stamps that let native modules keep them packed.

A GEMM whose weight is the same at every call need not have the BLAS pack it again on
every call: MKL's packed GEMM (``sgemm_pack`` once, ``sgemm_compute`` after) skips that
work, 1.5-2.7x faster at the few rows of a served prompt (``csrc/gemm.c`` in disc-core,
Packed weights). A module only keeps an input packed while the caller stamps it, and a
stamp must change whenever the tensor's values may have: this module gives each frozen
tensor a stamp that changes when its version counter does (in-place ops, the optimizers',
``load_state_dict``'s ``copy_``) or its data moves (``param.data = ...``). It holds the
storage it stamped, so no other tensor can take that address while the stamp stands.

What it cannot see is a write that bypasses the version counter: ``p.data.copy_(new)``
or ``p.detach().mul_(2)`` change ``p``'s values under the same version. Freezing is
therefore the caller's promise, as Inductor's ``freezing`` and AOTInductor's constants
are: :func:`refresh` re-stamps every frozen tensor after such a write.

Two ways in: ``aot_compile(..., freeze_weights=True)`` freezes the compiled program's own
views of the weights; :func:`freeze_weights` freezes a module's parameters and buffers for
``torch.compile(model, backend="disc")`` and ``optimize``, whose clusters receive those
very tensors. Packed copies take resident memory about the size of the weights they copy
(MKL reserves about 8 MB more address space per packed panel, which stays untouched).
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any

import torch

__all__ = ["freeze", "freeze_weights", "refresh", "refresh_weights", "stamp", "unfreeze",
           "unfreeze_weights"]

_lock = threading.Lock()
_counter = itertools.count(1)


class _Entry:
    """One frozen tensor's current stamp and what it was given for."""

    __slots__ = ("ref", "address", "version", "storage", "value")

    def __init__(self, tensor: torch.Tensor) -> None:
        key = id(tensor)

        def forget(ref: weakref.ref) -> None:  # the tensor died: drop its entry
            with _lock:
                if _FROZEN.get(key) is self:
                    del _FROZEN[key]

        self.ref = weakref.ref(tensor, forget)
        self.address = -1
        self.version = -1
        self.storage: Any = None
        self.value = 0


#: frozen tensors by id(); an entry whose weak reference died, or points at another
#: object (the id was reused), is stale and gives no stamp
_FROZEN: dict[int, _Entry] = {}


def freeze(tensors: list[torch.Tensor]) -> None:
    """Let native modules keep these tensors' values packed between calls (f32 tensors
    on the CPU; others are ignored). See the module docstring for what the caller
    promises."""
    with _lock:
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.dtype is torch.float32 and t.is_cpu:
                entry = _FROZEN.get(id(t))
                if entry is None or entry.ref() is not t:
                    _FROZEN[id(t)] = _Entry(t)


def unfreeze(tensors: list[torch.Tensor]) -> None:
    """Stop stamping these tensors (packed copies are left to be replaced)."""
    with _lock:
        for t in tensors:
            entry = _FROZEN.get(id(t))
            if entry is not None and entry.ref() is t:
                del _FROZEN[id(t)]


def refresh(tensors: list[torch.Tensor] | None = None) -> None:
    """New stamps for these frozen tensors (all when None): after writes their version
    counter did not see."""
    with _lock:
        entries = (list(_FROZEN.values()) if tensors is None
                   else [_FROZEN.get(id(t)) for t in tensors])
        for entry, t in zip(entries, tensors or [None] * len(entries)):
            if entry is not None and (t is None or entry.ref() is t):
                entry.value = 0


def any_frozen() -> bool:
    """Whether any tensor is frozen (the per-call path skips stamping when none is)."""
    return bool(_FROZEN)


def stamp(t: Any) -> int:
    """``t``'s stamp, or 0 when it is not frozen: equal stamps mean equal values."""
    entry = _FROZEN.get(id(t))
    if entry is None:
        return 0
    address, version = t.data_ptr(), t._version
    if entry.value and entry.address == address and entry.version == version:
        return entry.value
    with _lock:
        if entry.ref() is not t:
            return 0
        entry.address, entry.version = address, version
        # held until the next stamp: while held, no other storage can take this address
        entry.storage = t.untyped_storage()
        entry.value = next(_counter)
        return entry.value


def _module_tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    return [*module.parameters(), *module.buffers()]


def freeze_weights(module: torch.nn.Module) -> torch.nn.Module:
    """Promise that ``module``'s parameters and buffers change only through ops torch's
    version counter sees (or :func:`refresh_weights` follows the change), so that DISC's
    compiled GEMMs may keep its f32 weights packed between calls (MKL only; see the module
    docstring). Returns ``module``. For inference: in training every step changes the
    weights, and packing them again each step gains nothing."""
    freeze(_module_tensors(module))
    return module


def unfreeze_weights(module: torch.nn.Module) -> torch.nn.Module:
    """Take back :func:`freeze_weights`; returns ``module``."""
    unfreeze(_module_tensors(module))
    return module


def refresh_weights(module: torch.nn.Module) -> None:
    """After writes to ``module``'s frozen weights that torch does not version
    (``p.data.copy_(...)``): pack them again at the next call."""
    refresh(_module_tensors(module))
