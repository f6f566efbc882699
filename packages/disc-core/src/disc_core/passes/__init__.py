"""Graph-to-graph passes and the pass manager that runs them."""

from .canonicalize import Canonicalize
from .cse import CSE
from .dce import DCE
from .fold import ConstantFold
from .manager import Pass, PassManager
from .pipelines import default_pipeline
from .propagate import ShapePropagation
from .reshapes import MoveReshapes

__all__ = ["CSE", "DCE", "Canonicalize", "ConstantFold", "MoveReshapes", "Pass", "PassManager",
           "ShapePropagation", "default_pipeline"]
