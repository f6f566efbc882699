"""Where DISC enters Paddle's dynamic-to-static machinery.

``paddle.jit.to_static`` traces a function or layer into a PIR program once per input
signature (dims the ``InputSpec`` leaves as ``None`` stay -1, so one program serves every
size). Its ``PartialProgramLayer`` then appends the backward, splits the whole into a
forward and a backward program, applies Paddle's own passes
(``RunnableProgram.apply_pir_program_pass``) and runs them with ``run_program``.

DISC rewrites those two programs right after Paddle's passes, in
``PartialProgramLayer._create_program``, before their value names are frozen
(``program_attr``). There, everything that crosses a program's boundary is named (the
backward program's ``%kwarg_*`` inputs, ``builtin.shadow_output`` results), so replacing
clusters with launch ops cannot leave a dangling reference behind; a rewrite after
``after_append_backward`` could, since Paddle still holds the gradient values there.

Which programs DISC rewrites: those of the functions :func:`manage` marks (what
``disc_paddle.compile`` does) and, while :func:`set_enabled` holds an owner factory, those
of every ``to_static`` function traced meanwhile. Each marked function has an *owner*
(whatever the bridge keeps per function: its options, its report entries, the clusters
that failed); the rewriter gets it with every program. Both patches are installed once
and do nothing for other programs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ProgramRewriter", "enabled", "install", "manage", "owning", "set_enabled"]

#: rewrites one program in place: (program, role, owner); the role is "infer", "forward"
#: or "backward", the owner what :func:`manage` (or the enabled factory) gave the function
ProgramRewriter = Callable[[Any, str, Any], None]

_lock = threading.Lock()
_installed = False
_rewriter: ProgramRewriter | None = None
#: while set: makes the owner of a to_static function traced without one (its cache)
_enabled: Callable[[Any], Any] | None = None


def _marker_type() -> type:
    from paddle.jit.dy2static.pir_partial_program import PartialProgramLayerHook

    class DiscProgramMarker(PartialProgramLayerHook):
        """Marks a partial program whose forward and backward programs DISC rewrites,
        for ``owner`` (the base class's hook methods are no-ops)."""

        def __init__(self, owner: Any):
            super().__init__()
            self.owner = owner

    return DiscProgramMarker


_Marker: type | None = None


def _patch() -> None:
    """Wrap ProgramCache._build_once (to mark new partial programs) and
    PartialProgramLayer._create_program (to rewrite marked ones), once per process."""
    global _installed, _Marker
    from paddle.base.dygraph.base import switch_to_static_graph
    from paddle.jit.dy2static import pir_partial_program, program_translator

    _Marker = _marker_type()
    marker = _Marker
    build_once = program_translator.ProgramCache._build_once
    create_program = pir_partial_program.PartialProgramLayer._create_program

    def _build_once(self: Any, cache_key: Any) -> Any:
        concrete, partial = build_once(self, cache_key)
        owner = getattr(self, "_disc_owner", None) or getattr(_active, "owner", None)
        if owner is not None:
            self._disc_owner = owner  # SOT's subgraph functions: traced during a DISC call
        factory = _enabled
        if owner is None and factory is not None:
            owner = self._disc_owner = factory(self)
        if owner is not None:
            if not any(isinstance(h, marker) for h in getattr(partial, "_hookers", ())):
                partial.add_hooker(marker(owner))
            adopt = getattr(owner, "adopt", None)
            if adopt is not None:
                adopt(partial)
        return concrete, partial

    @switch_to_static_graph
    def _rewrite(program: Any, role: str, owner: Any) -> None:
        if _rewriter is not None:
            _rewriter(program, role, owner)

    def _create_program(self: Any, is_infer_mode: bool = False) -> Any:
        runnable = create_program(self, is_infer_mode)
        found = next((h for h in self._hookers if isinstance(h, marker)), None)
        if found is not None:
            if is_infer_mode:
                _rewrite(runnable.forward_program, "infer", found.owner)
            else:
                _rewrite(runnable.forward_program, "forward", found.owner)
                _rewrite(runnable.backward_program, "backward", found.owner)
        return runnable

    program_translator.ProgramCache._build_once = _build_once
    pir_partial_program.PartialProgramLayer._create_program = _create_program
    _installed = True


def install(rewriter: ProgramRewriter) -> None:
    """Make ``rewriter`` the function that rewrites every program DISC manages."""
    global _rewriter
    with _lock:
        if not _installed:
            _patch()
        _rewriter = rewriter


_active = threading.local()


@contextlib.contextmanager
def owning(owner: Any) -> Iterator[None]:
    """Programs traced on this thread meanwhile belong to ``owner``, whatever function
    traces them: SOT (``full_graph=False``) traces each subgraph it captures as a
    ``to_static`` function of its own, during the call of the function DISC manages."""
    previous = getattr(_active, "owner", None)
    _active.owner = owner
    try:
        yield
    finally:
        _active.owner = previous


def set_enabled(factory: Callable[[Any], Any] | None) -> None:
    """While ``factory`` is set, rewrite the programs of every ``to_static`` function traced
    from then on; ``factory(program_cache)`` makes each such function's owner. None: stop."""
    global _enabled
    _enabled = factory


def enabled() -> bool:
    return _enabled is not None


def program_cache(static_function: Any) -> Any:
    """The ProgramCache of what ``paddle.jit.to_static`` returned (a StaticFunction, or a
    layer whose ``forward`` is one)."""
    fn = getattr(static_function, "forward", static_function)
    cache = getattr(fn, "_program_cache", None)
    if cache is None:
        raise TypeError(f"expected what paddle.jit.to_static returns, got "
                        f"{type(static_function).__name__}")
    return cache


def manage(static_function: Any, owner: Any = True) -> Any:
    """Mark one ``to_static`` function (or a layer's ``forward``) for DISC: the programs it
    traces from now on are rewritten, for ``owner``. Returns it.

    An owner with an ``adopt(partial_program)`` method is told of each partial program
    traced for it (so it can drop their programs and have them rebuilt)."""
    program_cache(static_function)._disc_owner = owner
    return static_function
