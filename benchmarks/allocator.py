"""One heap behaviour for every contender of a benchmark: glibc malloc with fixed mmap and
trim thresholds.

glibc raises its mmap threshold as a program frees large blocks, and gives the top of its
heap back to the kernel past a trim threshold. A framework step that allocates and frees
tensors of a few MB then lands, depending on the order of its first frees, in one of two
modes: it reuses heap memory, or it maps (and the kernel zeroes) fresh pages for those
tensors on every call. Measured on a 2-core Zen 3 VM: eager PyTorch's Linear + GELU at
964 x 1024 took 3.3 ms in some processes and 7 ms in others (206k page faults against 50k
for the same work); the GPT benchmark's eager inference at length 241 took 44 ms in one
process and 31 ms in the next, and DISC's ratio against it read 1.42x or 1.07-1.11x.
Eager, with one tensor per op, suffers most, so a ratio against it depended on the
process's luck. Fixing both thresholds, as ``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_`` would at start-up, leaves one mode for every contender alike
(it gives eager the heap behaviour a tuned deployment or jemalloc would).

Imports no framework; call :func:`pin` before the framework allocates much.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

#: glibc's largest mmap threshold (HEAP_MAX_SIZE / 2 on 64-bit): blocks up to it come from
#: the heap, so tensors of a few MB are reused instead of mapped per call
MMAP_THRESHOLD = 32 << 20
#: the heap keeps up to this much free memory at its top instead of returning it
TRIM_THRESHOLD = 256 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)

_state: dict[str, Any] = {"allocator": "malloc as the process started (pin() not called)"}


def pin() -> dict[str, Any]:
    """Fix glibc's thresholds in this process (``mallopt``) and in the processes it starts
    (their environment); returns what :func:`record` will report. Elsewhere (no glibc
    ``mallopt``) nothing changes, and the record says so."""
    global _state
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except AttributeError:
        _state = {"allocator": "not glibc: malloc left as it is"}
        return _state
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = (mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
          and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_THRESHOLD)
    os.environ["MALLOC_TRIM_THRESHOLD_"] = str(TRIM_THRESHOLD)
    _state = {"allocator": "glibc malloc, thresholds fixed for every contender" if ok
              else "glibc malloc: mallopt refused the thresholds",
              "mmap_threshold": MMAP_THRESHOLD, "trim_threshold": TRIM_THRESHOLD}
    return _state


def record() -> dict[str, Any]:
    """The heap set-up of this process, for the result file's ``machine`` record."""
    return dict(_state)
