"""The StableHLO tests need jaxlib's MLIR bindings (the ``mlir`` extra; tox env
``stablehlo``); without it every module here is skipped at collection."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # cases.py
