"""Subprocess worker for the cache race test (not a test module).

Usage: python cache_race_worker.py CACHE_DIR KEY GO_FILE RESULT_FILE
Waits until GO_FILE exists so that all workers enter get_or_build together, builds slowly
so that the builds overlap, then writes a JSON result.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from disc_runtime_testkit import register_test_engines, slow_affine_builder

from disc_runtime import CompileCache, Executable


def main() -> None:
    cache_dir, key, go_file, result_file = sys.argv[1:5]
    register_test_engines()
    cache = CompileCache(cache_dir)
    built: list = []
    Path(result_file + ".ready").write_text("ready")
    deadline = time.monotonic() + 30
    while not Path(go_file).exists() and time.monotonic() < deadline:
        time.sleep(0.001)
    artifact, source = cache.get_or_build(key, slow_affine_builder(key, delay=0.5, log=built))
    import numpy as np

    x = np.ones((2, 2), np.float32)
    (z,) = Executable.load(artifact)(x, x)
    Path(result_file).write_text(
        json.dumps(
            {
                "source": source,
                "built": len(built),
                "directory": str(artifact.directory),
                "z": z.tolist(),
            }
        )
    )


if __name__ == "__main__":
    main()
