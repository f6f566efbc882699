"""benchmarks/allocator.py: every contender of a benchmark runs on one heap behaviour, and the
result file says which. Each check runs in a new process: the thresholds are process-wide."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"

_PROBE = """
import ctypes, json, os, sys
sys.path.insert(0, sys.argv[1])
import allocator, provenance
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks "
                "keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
if sys.argv[2] == "pin":
    allocator.pin()
before = libc.mallinfo2().hblkhd
block = libc.malloc(8 << 20)  # a tensor-sized block: mapped by default, heap once pinned
mapped = libc.mallinfo2().hblkhd - before
print(json.dumps({"mapped": mapped, "heap": provenance.machine(1, {}, {})["heap"],
                  "env": {k: os.environ.get(k) for k in
                          ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")}}))
"""


def _probe(mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", _PROBE, str(BENCH), mode], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallinfo2"), reason="needs glibc >= 2.33")
def test_pinned_thresholds_keep_tensor_sized_blocks_on_the_heap_and_say_so():
    default = _probe("plain")
    assert default["mapped"] >= 8 << 20  # glibc maps such a block by default: pin() matters
    assert default["heap"]["allocator"].startswith("malloc as the process started")
    pinned = _probe("pin")
    assert pinned["mapped"] == 0
    assert pinned["heap"] == {"allocator": "glibc malloc, thresholds fixed for every contender",
                              "mmap_threshold": 32 << 20, "trim_threshold": 256 << 20}
    # processes the benchmark starts (fresh-process first passes) inherit the same set-up
    assert pinned["env"] == {"MALLOC_MMAP_THRESHOLD_": str(32 << 20),
                             "MALLOC_TRIM_THRESHOLD_": str(256 << 20)}
