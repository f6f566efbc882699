"""A backward program whose DISC cluster fails at run time still gives Paddle's gradients.

A forward or inference program that fails is simply called again (:mod:`disc_paddle.api`).
A backward program runs inside ``loss.backward()``, after the forward has returned, so it
cannot be: instead each training call of a DISC function is *watched*. A hook on each of
its outputs keeps the gradient that reaches it (the hook runs before the function's
backward program does), and ``paddle.Tensor.backward`` is wrapped: when it fails because a
launch op failed (the failure is DISC's, queued by the op), the failed cluster is marked
(warning, report entry), the function's programs are dropped, and every watched call whose
output gradients arrived in this pass is run again (Paddle rebuilds its programs without
that cluster, and without the backward clusters of a function whose forward failed) and
differentiated from those same output gradients with ``paddle.autograd.backward``. The
backward then continues into whatever computed the call's inputs, which the failed pass
never reached, while what the failed pass already did (the ops after the call) is not
done twice. Nothing of the failed call's own backward reached any gradient: its program
hands its results over only when it completes.

Limits: the forward runs a second time, so a random op inside it (dropout) draws anew
(docs/paddle.md); a call reached twice in one backward pass is redone only if its own
backward did not complete, which is not observable: both are redone.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Any

from . import backend

__all__ = ["install", "watch"]

#: watched calls, newest last; a few suffice (a training step calls a model once or twice)
_calls: collections.deque[_Call] = collections.deque(maxlen=8)
_lock = threading.Lock()
_installed = False


@dataclass(eq=False)
class _Call:
    function: Any  # the DiscFunction
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    watched: list[int]  # positions (in the flattened outputs) that want a gradient
    grads: dict[int, Any] = field(default_factory=dict)

    def reached(self) -> bool:
        """Whether every watched output's gradient arrived in the current pass."""
        return bool(self.watched) and all(i in self.grads for i in self.watched)


def watch(function: Any, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> None:
    """Remember a training call of ``function`` and hook its outputs' gradients."""
    import paddle

    outs = paddle.utils.flatten(result)
    watched = [i for i, t in enumerate(outs)
               if isinstance(t, paddle.Tensor) and not t.stop_gradient]
    if not watched:
        return
    call = _Call(function, args, kwargs, watched)
    for i in watched:
        def keep(grad: Any, i: int = i) -> None:
            call.grads[i] = grad
            return None

        outs[i].register_hook(keep)
    with _lock:
        _calls.append(call)


def _redo(failed_states: set[Any], retain_graph: bool) -> bool:
    """Run again, and differentiate, every watched call of a failed function that this pass
    reached. Returns whether there was one."""
    import paddle

    with _lock:
        todo = [c for c in _calls if c.function.state in failed_states and c.reached()]
        for c in todo:
            _calls.remove(c)
    for state in failed_states:
        state.drop_programs()
    for call in todo:
        result = call.function.call_static(*call.args, **call.kwargs)
        outs = paddle.utils.flatten(result)
        paddle.autograd.backward([outs[i] for i in call.watched],
                                 [call.grads[i] for i in call.watched],
                                 retain_graph=retain_graph)
    return bool(todo)


def install() -> None:
    """Wrap ``paddle.Tensor.backward`` (once per process; it only acts on DISC's failures)."""
    global _installed
    import paddle

    with _lock:
        if _installed:
            return
        _installed = True
    original = paddle.Tensor.backward

    def backward(self: Any, grad_tensor: Any = None, retain_graph: bool = False,
                 **kwargs: Any) -> None:
        try:
            original(self, grad_tensor, retain_graph, **kwargs)
        except Exception:
            owners = backend.check_launches()
            if not owners or not _redo({o.state for o in owners}, retain_graph):
                raise  # not DISC's failure (or no call to redo): Paddle's error as raised
        finally:
            with _lock:
                for c in list(_calls):
                    if c.reached():  # this pass is done with it
                        _calls.remove(c)

    backward.__doc__ = original.__doc__
    backward.__wrapped__ = original  # type: ignore[attr-defined]
    paddle.Tensor.backward = backward
