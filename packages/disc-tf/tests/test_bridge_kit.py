"""disc-tf is built on the bridge kit (disc_core.bridge), and its public names stay put."""

from __future__ import annotations

import tensorflow as tf

from disc_core import bridge


def test_the_table_errors_warning_and_compilers_are_the_kits():
    import disc_tf
    import disc_tf.api
    import disc_tf.lowering
    from disc_tf.converters import CONVERTERS, Converter, Known, lookup

    assert isinstance(CONVERTERS, bridge.ConverterTable) and Converter is bridge.Converter
    assert lookup("AddV2") is not None and Known is not None
    assert lookup("AddV2").takes(tf.float32)
    assert disc_tf.lowering.ConversionError is bridge.ConversionError
    assert issubclass(disc_tf.lowering.Lowering, bridge.LoweringContext)
    assert issubclass(disc_tf.DiscFallbackWarning, bridge.DiscFallbackWarning)
    assert disc_tf.api.get_compiler() is disc_tf.api.COMPILERS.get()
    assert disc_tf.compile_count() == disc_tf.api.COMPILERS.compile_count()


def test_unrelated_symbolic_dims_broadcast_with_the_first_standing_for_both():
    from disc_core.dtypes import DType
    from disc_core.symbolic import Expr
    from disc_tf.lowering import Lowering

    ctx = Lowering("bcast")
    x = ctx.add_input("x", DType.F32, [Expr.sym("a"), 3])
    y = ctx.add_input("y", DType.F32, [Expr.sym("b"), 1])
    xs, ys = ctx.broadcast_all(x, y)
    assert xs is x and ys.shape == x.shape
