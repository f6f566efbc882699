"""A private DISC cache per test session: compilations and the launch-op build start cold,
as on a clean CI machine, and nothing leaks into the user's cache."""

from __future__ import annotations

import os
import tempfile

_CACHE = tempfile.mkdtemp(prefix="disc-paddle-tests-")
os.environ.setdefault("DISC_CACHE_DIR", _CACHE)
