"""Logging calls inside code ``optimize`` traces: skipped, not a graph break.

dynamo cannot trace a ``logging.Logger`` method: each call splits the graph there, unless
the method is in ``torch._dynamo.config.ignore_logging_functions``, which makes it a no-op
in compiled code (what ``torch.export`` does with every logging call). Models log inside
``forward`` more often than one would think: transformers' GPT-2 with labels calls
``logger.warning_once`` on its loss path. That one call cost a lot more than the message:

* the model became six frames (its forward, its two decorators from other modules, the
  loss property, the loss, the output's ``__init__``), each traced and guarded on its
  own, the loss's slices and matmul left in torch with data-dependent sizes;
* frames other than the callable's own cannot be kept in the traced-graph cache (their
  identity guards read their own locals, see :mod:`disc_torch.identity`): the second call
  turned the cache off and traced everything again.

Measured on a 2-core AMD EPYC (Zen 3), GPT-2 with 2 layers of width 256 and labels, its
first pass over five lengths, ``optimize`` included: inference 4 dynamo graphs and 4 DISC
compiles in 22.7 s before, 1 graph and 1 compile in 8.4 s after; training 4 graphs and 10
compiles in 28.2 s before, 1 graph and 2 compiles (forward, backward) in 10.8 s after.
Every ATen op of the model and its loss is compiled after.

So while ``optimize`` traces (:class:`disc_torch.trace_scope.asking`), the methods
that only emit a message (``debug``, ``info``, ``warning``, ``error``, ``critical``,
``exception``, ``log`` and methods named after them, such as ``warning_once``) are
skipped, and each one skipped is named in one warning, so the user knows which messages
compiled code no longer prints. ``skip_logging_calls=False`` keeps torch's behaviour.
Other logger methods (``isEnabledFor``, whose result code may branch on) still break
the graph.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import torch._dynamo.config as dynamo_config

from disc_core.bridge.fallback import warn_once

__all__ = ["EMITTERS", "SkippedLogging", "skipping_logging_calls"]

#: name prefixes of the ``logging.Logger`` methods that only emit a message (``warn``
#: covers ``warning`` and ``warning_once``); ``log`` itself is matched exactly
EMITTERS = ("debug", "info", "warn", "error", "exception", "critical", "fatal")


def _emits(name: str) -> bool:
    return name == "log" or name.startswith(EMITTERS)


class SkippedLogging(set):
    """``ignore_logging_functions`` while DISC traces: the set torch had, plus every
    message-emitting method of a ``logging.Logger`` that dynamo asks about (it asks with
    the bound method: ``method in ignore_set``); each new one is named in a warning."""

    def __contains__(self, item: object) -> bool:
        if set.__contains__(self, item):
            return True
        owner = getattr(item, "__self__", None)
        name = getattr(item, "__name__", None)
        if not (isinstance(owner, logging.Logger) and isinstance(name, str) and _emits(name)):
            return False
        warn_once(f"DISC: the call {owner.name!r}.{name}(...){_call_site()} inside the traced "
                  "code is skipped there, as torch.export skips logging calls, so that it "
                  "does not split the graph (optimize(..., skip_logging_calls=False) keeps it, "
                  "with a graph break)", UserWarning, stacklevel=3)
        return True


def _call_site() -> str:
    """`` at file:line`` of the call dynamo is tracing (the user's code, inlined calls
    included; a Python warning's own location would be inside dynamo), or nothing where
    torch does not say."""
    try:
        from torch._guards import TracingContext

        stack = TracingContext.extract_stack()
        frame = stack[-1] if stack else None
    except Exception:  # another torch: the message without its location
        return ""
    return f" at {frame.filename}:{frame.lineno}" if frame is not None else ""


@contextlib.contextmanager
def skipping_logging_calls(skip: bool) -> Iterator[None]:
    """Within it, dynamo skips message-emitting logger calls (when ``skip``)."""
    if not skip:
        yield
        return
    previous = dynamo_config.ignore_logging_functions
    dynamo_config.ignore_logging_functions = SkippedLogging(previous or ())
    try:
        yield
    finally:
        dynamo_config.ignore_logging_functions = previous
