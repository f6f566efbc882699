"""Which built clusters may run compiled, by their compile-cache key; and the input dump
that turns one of them into a standalone reproducer.

``disc bisect`` finds the cluster that makes a model's answer differ by running the user's
program many times, each time with a different set of clusters compiled. It needs a name
for a cluster that is the same in every process: the compile-cache key of its lowered core
graph (the artifact's key, in the report as ``ClusterRecord.key``). ``DISC_BISECT_CLUSTERS``
names a file of allowed keys; every bridge asks :func:`allows` once a cluster is built (the
key exists only then) and leaves a cluster that is not allowed in its framework, reported as
``excluded_by_user``. Deciding after the build keeps the rule the same for a cluster that
the bridge kit halved after a native compile failure: each piece is judged by its own key,
the keys the report listed.

``DISC_BISECT_DUMP`` names a directory where a bridge that runs clusters from Python
(disc-torch) saves an allowed cluster's inputs on its first call (:func:`dump_inputs`).

Nothing here may break the user's program: an unreadable key file warns once and leaves
every cluster in the framework (the conservative reading of a restriction), and a failed
dump warns once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..options import CORE_OPTIONS
from ..report.model import ReasonCode
from .fallback import warn_once

__all__ = ["EXCLUDED_DETAIL", "MIN_PREFIX", "admit", "allowed_keys", "allows", "dump_dir",
           "dump_inputs", "parse_keys"]

#: the report's detail for a cluster left out by the key file
EXCLUDED_DETAIL = "not listed in DISC_BISECT_CLUSTERS"
#: a line of the key file may hold a key's first characters, at least this many
MIN_PREFIX = 8

_lock = threading.Lock()
_read: dict[str, tuple[int, frozenset[str]]] = {}
_dumped: set[str] = set()


def parse_keys(text: str) -> frozenset[str]:
    """The keys of a key file: the first word of each line, ``#`` starting a comment."""
    keys = set()
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            keys.add(words[0])
    return frozenset(keys)


def allowed_keys() -> frozenset[str] | None:
    """The allowed keys (or key prefixes), or None when no selection is set (all allowed).
    An unreadable file allows nothing, with a warning."""
    path = CORE_OPTIONS.value("bisect_clusters")
    if not path:
        return None
    try:
        stamp = os.stat(path).st_mtime_ns
        with _lock:
            cached = _read.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        keys = parse_keys(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        warn_once(f"DISC: DISC_BISECT_CLUSTERS={path} cannot be read ({exc}); every cluster "
                  "stays in the framework")
        return frozenset()
    with _lock:
        _read[path] = (stamp, keys)
    return keys


def allows(key: str | None) -> bool:
    """May the cluster built with compile-cache key ``key`` run compiled? A line of the
    file matches a key equal to it or starting with it (at least :data:`MIN_PREFIX`
    characters). A cluster without a key is allowed only when no selection is set."""
    keys = allowed_keys()
    if keys is None:
        return True
    if key is None:
        return False
    return key in keys or any(len(k) >= MIN_PREFIX and key.startswith(k) for k in keys)


def admit(recorder: Any, cluster_id: int, key: str | None) -> bool:
    """Record the built cluster's key in the report and apply the selection: False, with
    the cluster recorded as ``excluded_by_user`` (and one warning per process that a
    selection is in force), when it may not run compiled."""
    if key is not None:
        recorder.cluster_key(cluster_id, key)
    if allows(key):
        return True
    recorder.cluster_failed(cluster_id, ReasonCode.EXCLUDED_BY_USER, EXCLUDED_DETAIL)
    warn_once("DISC: DISC_BISECT_CLUSTERS is set: clusters it does not list run in the "
              "framework")
    return False


def dump_dir() -> Path | None:
    """Where allowed clusters save their first call's inputs (``DISC_BISECT_DUMP``)."""
    path = CORE_OPTIONS.value("bisect_dump")
    return Path(path) if path else None


def dump_inputs(key: str, inputs: Sequence[Any],
                framework_outputs: Callable[[], Sequence[Any]] | None = None) -> Path | None:
    """Save ``inputs`` (numpy arrays, in the artifact's input order) as
    ``<dump dir>/<key>/input_<i>.npy``, and what ``framework_outputs()`` returns (the
    framework's own results for the same inputs) as ``framework_<i>.npy``: once per key
    and process, and not over a dump another process finished. Returns the folder, or
    None when there is nothing to do or it failed (one warning, never an exception)."""
    base = dump_dir()
    with _lock:
        if base is None or key in _dumped:
            return None
        _dumped.add(key)
    target = base / key
    if (target / "done").exists():
        return None
    try:
        import numpy as np

        target.mkdir(parents=True, exist_ok=True)
        for i, array in enumerate(inputs):
            np.save(target / f"input_{i}.npy", np.asarray(array), allow_pickle=False)
        if framework_outputs is not None:
            try:
                for i, array in enumerate(framework_outputs()):
                    np.save(target / f"framework_{i}.npy", np.asarray(array),
                            allow_pickle=False)
            except Exception as exc:  # the inputs alone still make a reproducer
                warn_once(f"DISC: the framework's outputs of cluster {key[:12]} were not "
                          f"saved: {type(exc).__name__}: {exc}")
        (target / "done").write_text(f"{len(inputs)} inputs\n")
    except Exception as exc:  # a dump must never break the user's program
        warn_once(f"DISC: saving the inputs of cluster {key[:12]} to {target} failed: "
                  f"{type(exc).__name__}: {exc}")
        return None
    return target
