"""The native engine's compiler half: fusion planning and C code generation.

The graph is partitioned into fused kernels (loop, row-reduction/stitch, column-reduction),
library calls (GEMM through the BLAS the runtime finds at load time) and zero-copy aliases;
one C module holds the kernels and a host function that binds symbols, evaluates every
symbolic size, allocates buffers and runs the steps, so a call is one native call. The
module is loaded by disc-runtime's ``native`` engine (``disc_runtime.native``).
"""

from .build import fusion_count, launch_counts
from .fusion import FusionPlan, NativeUnsupported, plan_fusion

__all__ = ["FusionPlan", "NativeUnsupported", "fusion_count", "launch_counts", "plan_fusion"]
