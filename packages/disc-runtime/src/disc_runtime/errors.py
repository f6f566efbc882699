"""Exception and warning types of the DISC runtime.

Every error the runtime raises on purpose derives from :class:`DiscRuntimeError`, so a bridge
or the ``disc-run`` command can tell "the user, the artifact or the installation is wrong"
(a clear one-line message is enough) apart from a bug (a traceback is needed).
"""

from __future__ import annotations

__all__ = [
    "ArtifactFormatError",
    "ArtifactNotFoundError",
    "CacheCorruptionWarning",
    "CorruptArtifactError",
    "DiscRuntimeError",
    "EngineError",
    "EngineNotFoundError",
    "InputError",
]


class DiscRuntimeError(Exception):
    """Base class of every error the DISC runtime raises deliberately."""


class InputError(DiscRuntimeError, ValueError):
    """The caller passed inputs that do not match the executable's signature.

    Also a ``ValueError`` so that framework code that already catches ``ValueError`` for bad
    arguments keeps working without knowing about DISC.
    """


class CorruptArtifactError(DiscRuntimeError):
    """An artifact directory exists and claims to be a DISC artifact, but its content is damaged.

    Raised for a missing, truncated or modified file (sha256 mismatch), an unreadable
    manifest, or a manifest whose fields have the wrong shape. Never trust such an artifact;
    recompile it.
    """


class ArtifactFormatError(DiscRuntimeError):
    """The path is not a DISC artifact, or one in a format_version this runtime cannot read."""


class ArtifactNotFoundError(ArtifactFormatError, FileNotFoundError):
    """The artifact path does not exist (also a ``FileNotFoundError`` for generic callers)."""


class EngineNotFoundError(DiscRuntimeError, LookupError):
    """No registered engine and no installed entry point provides the engine an artifact needs."""


class EngineError(DiscRuntimeError):
    """An engine broke the engine protocol (e.g. returned the wrong number of outputs).

    This points at a bug in the engine or a mismatch between the engine and the artifact,
    not at the caller's inputs.
    """


class CacheCorruptionWarning(UserWarning):
    """A compile-cache entry was corrupt; it was discarded and rebuilt (never trusted)."""


class FastPathMiss(Exception):
    """Internal signal, never seen by users: an engine's per-call hot path
    (``run_fn.run_checked``) met inputs it does not take as they are (wrong type, dtype,
    rank, layout or count). :class:`~disc_runtime.executable.Executable` then takes its slow
    path, which copies strided inputs or raises an :class:`InputError` naming what was
    expected; the hot path itself formats no messages."""
