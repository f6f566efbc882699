"""The ``reference`` engine: runs an artifact's graph with the numpy interpreter.

disc-runtime finds it through the ``disc_runtime.engines`` entry point (so ``disc-run``
works with only disc-core and disc-runtime installed), and disc-core also registers it on
import for source-tree use. It is the oracle backend and the fallback when no native
engine can be built.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from disc_runtime import Artifact, register_engine

from .interpreter import interpret
from .parser import parse_graph

ENGINE_NAME = "reference"
GRAPH_FILE = "graph.disc"


def load_reference_engine(artifact: Artifact) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
    graph = parse_graph(artifact.read_text(GRAPH_FILE))

    def run(inputs: list[np.ndarray]) -> list[np.ndarray]:
        # The interpreter never writes to its inputs and keeps no state between calls,
        # so one parsed graph serves concurrent callers.
        return interpret(graph, inputs)

    return run


def register() -> None:
    register_engine(ENGINE_NAME, load_reference_engine, replace=True)
