"""The pass pipelines the compile stages run, built from the passes by name.

Kept apart from the pass manager: the passes import the ``Pass`` interface, and a manager
that also imported every pass to build a pipeline made the two import each other.
"""

from __future__ import annotations

from .attention import FoldAttentionLayout, FuseAttention
from .attention_training import FuseAttentionTraining
from .canonicalize import Canonicalize
from .cse import CSE
from .dce import DCE
from .fold import ConstantFold
from .manager import PassManager
from .propagate import ShapePropagation
from .reshapes import MoveReshapes

__all__ = ["default_pipeline"]


def default_pipeline(**kwargs: object) -> PassManager:
    """The ``optimize`` stage's passes, run to a fixpoint: shape propagation,
    canonicalization, reshape moving, constant folding, CSE, DCE, then attention fusion
    (on the canonical form the others leave; its leftovers go in the next round) and the
    folding of head transposes into the fused attention ops."""
    return PassManager([ShapePropagation(), Canonicalize(), MoveReshapes(), ConstantFold(),
                        CSE(), DCE(), FuseAttention(), FuseAttentionTraining(),
                        FoldAttentionLayout()],
                       **kwargs)  # type: ignore[arg-type]
