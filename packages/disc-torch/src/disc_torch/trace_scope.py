"""DISC's tracing settings, in force only while dynamo compiles a call of an optimized callable.

``disc_torch.optimize`` traces with settings of its own (:func:`tracing_config`) and, with
a graph package, has aot_autograd bundle what it compiles (``precompile.caching_graphs``).
Both are torch config attributes, whose writes are slow: set and restored around every
call they cost about 45 us of a tiny call's ~130 us on a 2-core AMD EPYC, while they
matter only in the calls where dynamo traces (a new rank, a guard failure), which are rare.

So a call only notes what it asks for (:func:`asking`, a thread-local attribute), and
dynamo's compile-start and compile-end callbacks (``torch._dynamo.callback_handler``, run
around every dynamo compile of the outermost frame) put the settings in force and restore
them when a compile actually happens in a call that asked. The callbacks are registered
again whenever they are missing: ``torch._dynamo.reset()`` clears them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch._dynamo
import torch._dynamo.config as dynamo_config

from .logging_calls import skipping_logging_calls
from .precompile import caching_graphs

__all__ = ["asking", "tracing_config"]


@contextlib.contextmanager
def tracing_config(specialize_floats: bool) -> Iterator[None]:
    """How ``optimize`` asks dynamo to trace.

    * sizes 0 and 1 are traced like any other size (one graph, one DISC compile per rank);
    * no duck sizing: dims that happen to be equal in the first call (a square image, a
      batch as long as the sequence) get symbols of their own. torch gives them one
      symbol and guards their equality, so the first unequal call traced and compiled
      everything again (HF ResNet training: two more 10 s builds of its two clusters);
    * Python floats (eps, scales) are constants: otherwise dynamo traces them symbolically,
      finds they must become tensors and restarts the whole analysis (about 2x the
      tracing time). A float argument that changes every call then recompiles: turn
      ``specialize_floats`` off for such code;
    * without fake-tensor caching: under the 0/1 rules above its entries can disagree with
      a size's hint (torch 2.13 asserted ``False != True`` tracing the backward of a
      ``bmm`` of a transpose with a size-1 dim, and the whole graph ran eagerly), and
      tracing without it was 7-12% faster on the benchmark models (the keys cost more
      than they save on symbolic shapes)."""
    import torch.fx.experimental._config as fx_config

    previous = (fx_config.backed_size_oblivious, fx_config.use_duck_shape,
                dynamo_config.specialize_float, dynamo_config.fake_tensor_cache_enabled)
    fx_config.backed_size_oblivious = True
    fx_config.use_duck_shape = False
    dynamo_config.specialize_float = specialize_floats or previous[2]
    dynamo_config.fake_tensor_cache_enabled = False
    try:
        yield
    finally:
        (fx_config.backed_size_oblivious, fx_config.use_duck_shape,
         dynamo_config.specialize_float, dynamo_config.fake_tensor_cache_enabled) = previous


class _Asked(threading.local):
    #: (trace with tracing_config?, its specialize_floats, bundle for a package?, its
    #: skip_logging_calls) of the optimized call running in this thread, None outside one
    settings: tuple[bool, bool, bool, bool] | None = None

    def __init__(self) -> None:
        #: one entry per compile started in this thread: the settings put in force for
        #: it (an ExitStack to close at its end), or None
        self.in_force: list[contextlib.ExitStack | None] = []


_asked = _Asked()


def _enter(stack: contextlib.ExitStack, trace: bool, specialize_floats: bool,
           caching: bool, skip_logging_calls: bool) -> None:
    if trace:
        stack.enter_context(tracing_config(specialize_floats))
    # also when a call is traced again with torch's 0/1 rules (``trace`` False)
    stack.enter_context(skipping_logging_calls(skip_logging_calls))
    stack.enter_context(caching_graphs(caching))


def _compile_started(_args: Any) -> None:
    settings = _asked.settings
    if settings is None:
        _asked.in_force.append(None)
        return
    stack = contextlib.ExitStack()
    _asked.in_force.append(stack)  # first: the end callback pairs with it even if an
    _enter(stack, *settings)       # enter raises (it then undoes what was entered)


def _compile_ended(_args: Any) -> None:
    if _asked.in_force:
        stack = _asked.in_force.pop()
        if stack is not None:
            stack.close()


def _register() -> bool:
    """Registers the callbacks where missing; False when this torch has no such API (the
    settings are then written around the whole call, as before)."""
    handler = getattr(torch._dynamo, "callback_handler", None)
    try:
        if _compile_started not in handler.start_callbacks:
            handler.register_start_callback(_compile_started)
        if _compile_ended not in handler.end_callbacks:
            handler.register_end_callback(_compile_ended)
    except AttributeError:
        return False
    return True


class asking:  # noqa: N801 (used as a function: ``with asking(...):``)
    """Within it, a dynamo compile in this thread runs with :func:`tracing_config` (when
    ``trace``), ``caching_graphs(caching)`` and logging calls skipped (when
    ``skip_logging_calls``, :mod:`disc_torch.logging_calls`); calls that compile nothing pay two
    attribute writes. A class rather than a generator-based context manager: it runs
    around every call of an optimized callable, and the generator's machinery cost more
    than the call's own bookkeeping."""

    __slots__ = ("_previous", "_settings", "_stack")

    def __init__(self, trace: bool, specialize_floats: bool, caching: bool,
                 skip_logging_calls: bool = True):
        self._settings = (trace, specialize_floats, caching, skip_logging_calls)
        self._stack: contextlib.ExitStack | None = None
        self._previous: tuple[bool, bool, bool, bool] | None = None

    def __enter__(self) -> None:
        if not _register():  # no compile callbacks in this torch: settings for the call
            stack = contextlib.ExitStack()
            try:
                _enter(stack, *self._settings)
            except BaseException:
                stack.close()  # undo what was entered
                raise
            self._stack = stack
            return
        self._previous = _asked.settings
        _asked.settings = self._settings

    def __exit__(self, *exc: object) -> None:
        if self._stack is not None:
            self._stack.close()
        else:
            _asked.settings = self._previous
