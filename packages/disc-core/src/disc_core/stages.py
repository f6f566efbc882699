"""The names of the compile stages, in the order they run (``disc_core.pipeline`` runs
them). A module of its own so that the ``disc`` command can offer ``--stop-after`` choices
without importing the compiler."""

from __future__ import annotations

__all__ = ["STAGES"]

#: optimize -> lower -> fuse -> emit -> build -> package (see ``disc_core.pipeline`` for
#: why optimize comes first)
STAGES = ("optimize", "lower", "fuse", "emit", "build", "package")
