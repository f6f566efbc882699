"""DISC runtime: load compiled artifacts and run them, standalone or inside any framework.

Imports only the standard library and numpy - never another DISC package or a deep-learning
framework - so every bridge (and the ``disc-run`` command) can depend on it cheaply.
Engines (e.g. disc-core's reference interpreter) plug in via the ``disc_runtime.engines``
entry-point group; see :mod:`disc_runtime.engines` for the protocol.

Names are imported on first use (PEP 562): disc-core and the bridges read their option
tables (:mod:`disc_runtime.options`, standard library only) at import time, and that
should not cost numpy and the rest of the runtime.
"""

from types import ModuleType
from typing import Any

from ._version import __version__ as __version__

_EXPORTS = {
    "as_numpy": "arrays",
    "ARTIFACT_FORMAT": "artifact",
    "Artifact": "artifact",
    "FORMAT_VERSION": "artifact",
    "MANIFEST_NAME": "artifact",
    "SUPPORTED_FORMAT_VERSIONS": "artifact",
    "CACHE_LAYOUT_VERSION": "cache",
    "CacheStats": "cache",
    "CompileCache": "cache",
    "cache_key": "cache",
    "default_cache": "cache",
    "default_cache_dir": "cache",
    "SUPPORTED_DTYPES": "dtypes",
    "dtype_name": "dtypes",
    "numpy_dtype": "dtypes",
    "ENTRY_POINT_GROUP": "engines",
    "KNOWN_ENGINE_PROVIDERS": "engines",
    "available_engines": "engines",
    "get_engine": "engines",
    "register_engine": "engines",
    "unregister_engine": "engines",
    "ArtifactFormatError": "errors",
    "ArtifactNotFoundError": "errors",
    "CacheCorruptionWarning": "errors",
    "CorruptArtifactError": "errors",
    "DiscRuntimeError": "errors",
    "EngineError": "errors",
    "EngineNotFoundError": "errors",
    "InputError": "errors",
    "AllocateOutput": "executable",
    "Executable": "executable",
    "ExecutableStats": "executable",
    "Signature": "signature",
    "TensorSpec": "signature",
}

__all__ = [
    "ARTIFACT_FORMAT",
    "CACHE_LAYOUT_VERSION",
    "ENTRY_POINT_GROUP",
    "FORMAT_VERSION",
    "KNOWN_ENGINE_PROVIDERS",
    "MANIFEST_NAME",
    "SUPPORTED_DTYPES",
    "SUPPORTED_FORMAT_VERSIONS",
    "AllocateOutput",
    "Artifact",
    "ArtifactFormatError",
    "ArtifactNotFoundError",
    "CacheCorruptionWarning",
    "CacheStats",
    "CompileCache",
    "CorruptArtifactError",
    "DiscRuntimeError",
    "EngineError",
    "EngineNotFoundError",
    "Executable",
    "ExecutableStats",
    "InputError",
    "Signature",
    "TensorSpec",
    "__version__",
    "as_numpy",
    "available_engines",
    "cache_key",
    "default_cache",
    "default_cache_dir",
    "dtype_name",
    "get_engine",
    "numpy_dtype",
    "register_engine",
    "unregister_engine",
]


def _submodule(name: str) -> ModuleType | None:
    """The submodule ``name`` among those the exports come from, imported statically (the
    runtime's own sources never import by computed name)."""
    if name == "arrays":
        import disc_runtime.arrays as module
    elif name == "artifact":
        import disc_runtime.artifact as module
    elif name == "cache":
        import disc_runtime.cache as module
    elif name == "dtypes":
        import disc_runtime.dtypes as module
    elif name == "engines":
        import disc_runtime.engines as module
    elif name == "errors":
        import disc_runtime.errors as module
    elif name == "executable":
        import disc_runtime.executable as module
    elif name == "signature":
        import disc_runtime.signature as module
    else:
        return None
    return module


def __getattr__(name: str) -> Any:
    # an exported name, or one of its modules (``disc_runtime.cache``), which the package
    # imported eagerly before it was lazy
    module = _submodule(_EXPORTS.get(name, name))
    if module is None:
        raise AttributeError(f"module 'disc_runtime' has no attribute {name!r}")
    if name not in _EXPORTS:
        return module
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
