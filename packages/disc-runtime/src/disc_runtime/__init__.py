"""DISC runtime: load compiled artifacts and run them, standalone or inside any framework.

Imports only the standard library and numpy - never another DISC package or a deep-learning
framework - so every bridge (and the ``disc-run`` command) can depend on it cheaply.
Engines (e.g. disc-core's reference interpreter) plug in via the ``disc_runtime.engines``
entry-point group; see :mod:`disc_runtime.engines` for the protocol.
"""

from ._version import __version__
from .arrays import as_numpy
from .artifact import (
    ARTIFACT_FORMAT,
    FORMAT_VERSION,
    MANIFEST_NAME,
    SUPPORTED_FORMAT_VERSIONS,
    Artifact,
)
from .cache import (
    CACHE_LAYOUT_VERSION,
    CacheStats,
    CompileCache,
    cache_key,
    default_cache,
    default_cache_dir,
)
from .dtypes import SUPPORTED_DTYPES, dtype_name, numpy_dtype
from .engines import (
    ENTRY_POINT_GROUP,
    KNOWN_ENGINE_PROVIDERS,
    available_engines,
    get_engine,
    register_engine,
    unregister_engine,
)
from .errors import (
    ArtifactFormatError,
    ArtifactNotFoundError,
    CacheCorruptionWarning,
    CorruptArtifactError,
    DiscRuntimeError,
    EngineError,
    EngineNotFoundError,
    InputError,
)
from .executable import AllocateOutput, Executable, ExecutableStats
from .signature import Signature, TensorSpec

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
