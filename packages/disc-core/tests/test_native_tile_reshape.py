"""Upsampling reshapes as indexing inside a kernel (``Reshape``'s tile groups).

A pooling gradient spreads each output's gradient over its window: ``g`` broadcast to
``[..., o, k, w, k]`` and viewed as ``[..., o*k, w*k]``. The reshape merges each run of a
dim and static broadcast copies, so a consumer kernel reads ``g[..., i / k, j / k]``
directly and the upsampled tensor is never written. These tests check that it fuses, that
every size (odd, 0, 1, never seen at compile time) matches the interpreter, and that a
reshape merging dims that are not broadcast copies keeps its data movement.
"""

from __future__ import annotations

import numpy as np
import pytest

from disc_core import Compiler, GraphBuilder, interpret
from disc_core.ops.shape_ops import tile_merge_groups
from disc_runtime import CompileCache

RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    return Compiler(CompileCache(tmp_path_factory.mktemp("cache")), target="native")


def kernel_shapes(exe) -> list[tuple[str, list[str]]]:
    return [(s["shape"], s["ops"]) for s in exe.artifact.metadata["native"]["profile"]
            if s["kind"] == "kernel"]


def check(exe, g, inputs) -> None:
    for got, want in zip(exe.run(inputs), interpret(g, inputs), strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def upsampled_product(k: int, cut: bool):
    """``x * upsample(g / 4, k)``, the upsampled gradient cut to x's odd size when ``cut``
    (one more zero tile on ``g``, as the avg-pool gradient converter builds it)."""
    b = GraphBuilder("tiles")
    N, P, W = b.symbol("N"), b.symbol("P"), b.symbol("W")
    g = b.input("g", "f32", [N, 3, P, W])
    x_shape = [N, 3, P * k + 1, W * k + 1] if cut else [N, 3, P * k, W * k]
    x = b.input("x", "f32", x_shape)
    h = b.div(g, b.full(4.0, "f32", [N, 3, P, W]))
    if cut:
        h = b.pad(h, b.constant(np.zeros((), np.float32)), low=[0, 0, 0, 0],
                  high=[0, 0, 1, 1], interior=[0, 0, 0, 0])
    o, w = h.shape[2], h.shape[3]
    t = b.broadcast_in_dim(h, shape=[N, 3, o, k, w, k], broadcast_dimensions=[0, 1, 2, 4])
    up = b.reshape(t, shape=[N, 3, o * k, w * k])
    if cut:
        up = b.slice(up, start=[0, 0, 0, 0], limit=x_shape, stride=[1, 1, 1, 1])
    y = b.mul(up, x)
    return b.build(y, b.reduce(y, kind="sum", axes=[0, 2, 3]))


@pytest.mark.parametrize("k, cut", [(2, False), (2, True), (3, True)])
def test_the_upsampled_gradient_is_read_in_place(compiler, k, cut) -> None:
    g = upsampled_product(k, cut)
    exe = compiler.compile(g)
    assert exe.artifact.engine == "native"
    shapes = kernel_shapes(exe)
    # no kernel over the [N, 3, O, k, W, k] spread: the consumer reads g where it needs it
    assert not any(s.count(",") == 5 for s, _ops in shapes), shapes
    assert any("reshape" in ops for _s, ops in shapes), shapes
    for n, o, w in [(2, 3, 5), (1, 1, 1), (3, 8, 7), (1, 0, 2), (2, 17, 1)]:
        x_dims = (o * k + cut, w * k + cut)
        check(exe, g, [RNG.standard_normal((n, 3, o, w)).astype(np.float32),
                       RNG.standard_normal((n, 3, *x_dims)).astype(np.float32)])


def test_merging_dims_that_are_not_copies_is_no_tile_group() -> None:
    """A reshape merging a broadcast's *mapped* dim into another (a real transpose-free
    flatten of data) or a symbolic copy run is not indexing by quotient."""
    b = GraphBuilder("flat")
    N, M = b.symbol("N"), b.symbol("M")
    x = b.input("x", "f32", [N, 4])
    b.input("m", "f32", [M])  # binds M
    t = b.broadcast_in_dim(x, shape=[N, 4, 2], broadcast_dimensions=[0, 1])
    merged_data = b.reshape(t, shape=[N * 8])  # merges the mapped 4: data moves
    copies = b.broadcast_in_dim(x, shape=[N, 4, M], broadcast_dimensions=[0, 1])
    symbolic = b.reshape(copies, shape=[N, 4 * M])  # a run of symbolic length
    tiled = b.reshape(t, shape=[N, 8])  # 4 then 2 copies: a tile group of step 2
    b.build(merged_data, symbolic, tiled)
    assert tile_merge_groups(merged_data.producer) is None
    assert tile_merge_groups(symbolic.producer) is None
    assert tile_merge_groups(tiled.producer) == [(0, 0, 1), (1, 1, 2)]


def test_a_flatten_of_copies_still_matches(compiler) -> None:
    """Each row repeated along a new inner dim and flattened ([N, 4] -> [N, 4*3]) feeding an
    elementwise op: computed in one kernel, equal to the interpreter at several sizes."""
    b = GraphBuilder("repeat")
    N = b.symbol("N")
    x = b.input("x", "f32", [N, 4])
    y = b.input("y", "f32", [N, 12])
    t = b.broadcast_in_dim(b.exp(x), shape=[N, 4, 3], broadcast_dimensions=[0, 1])
    g = b.build(b.add(b.reshape(t, shape=[N, 12]), y))
    exe = compiler.compile(g)
    assert len(kernel_shapes(exe)) == 1, kernel_shapes(exe)
    for n in (1, 5, 0, 33):
        check(exe, g, [RNG.standard_normal((n, 4)).astype(np.float32),
                       RNG.standard_normal((n, 12)).astype(np.float32)])
