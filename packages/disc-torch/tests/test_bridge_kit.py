"""disc-torch is built on the bridge kit (disc_core.bridge), and its public names stay put."""

from __future__ import annotations

import torch

from disc_core import bridge


def test_the_table_errors_and_warning_are_the_kits():
    import disc_torch.cluster
    import disc_torch.context
    import disc_torch.lowering
    from disc_torch.converters import CONVERTERS, Converter, converter, lookup

    assert isinstance(CONVERTERS, bridge.ConverterTable) and Converter is bridge.Converter
    assert converter == CONVERTERS.converter and lookup == CONVERTERS.lookup
    # an OpOverloadPacket registers every overload
    assert lookup(torch.ops.aten.add.Tensor) is not None and lookup(torch.ops.aten.add) is None
    assert disc_torch.lowering.ConversionError is bridge.ConversionError
    assert disc_torch.lowering.Lowering is disc_torch.context.Lowering
    assert issubclass(disc_torch.context.Lowering, bridge.LoweringContext)
    assert issubclass(disc_torch.cluster.DiscFallbackWarning, bridge.DiscFallbackWarning)


def test_compile_count_reads_the_bridges_own_registry():
    import disc_torch
    from disc_torch.backend import get_compiler
    from disc_torch.compilers import COMPILERS

    assert get_compiler() is COMPILERS.get()
    assert disc_torch.compile_count() == COMPILERS.compile_count() == 0


def test_converters_broadcast_unrelated_symbolic_dims_with_a_run_time_check():
    from disc_torch.context import Lowering

    ctx = Lowering("bcast")
    x = ctx.b.input("x", "f32", ["a"])
    out = ctx.broadcast_to(x, ["b"])
    assert [str(d) for d in out.shape] == ["b"]
    assert ctx.b.graph.ops[-1].name == "broadcast_in_dim"
