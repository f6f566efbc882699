"""tests-integration/distributed/: multi-process jobs through each framework's own
distributed engine (torchrun + DDP, tf.distribute, paddle.distributed.launch).

These need the framework installed, so the framework-free `integration` env leaves this
folder out; each framework's tox env runs its own file here after its package tests.
``ranks.py`` starts the processes and enforces the time limit.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
