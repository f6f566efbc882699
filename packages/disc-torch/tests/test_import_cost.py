"""What importing disc-torch costs a process: ml_dtypes (about 1 s to import) waits for a
graph that needs numpy's bfloat16 (disc-core's dtypes import it then), so a server that
loads an f32 model never pays it."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
import torch
import disc_torch
import disc_torch.cluster
from disc_torch import aot_compile

assert "ml_dtypes" not in sys.modules, "importing disc_torch imported ml_dtypes"
f = torch.compile(lambda x: (x * 2).relu() + 1, backend="disc", dynamic=True)
x = torch.randn(3, 5)
torch.testing.assert_close(f(x), (x * 2).relu() + 1)
served = aot_compile(torch.nn.Linear(8, 4).eval(), (torch.randn(3, 8),))
served(torch.randn(5, 8))
assert "ml_dtypes" not in sys.modules, "an f32 graph imported ml_dtypes"
print(sorted({c.engine.value for gr in disc_torch.report().graphs for c in gr.clusters}))
"""


def test_f32_models_compile_and_run_without_importing_ml_dtypes():
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "['native']", r.stdout
