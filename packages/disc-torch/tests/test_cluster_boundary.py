"""What crosses the boundary between a DISC cluster and torch: layouts, forward and backward.

A cluster returns row-major tensors; torch traced the graph with its own layouts, and a
torch op after the cluster (a view, ``as_strided``) may depend on them. These run ops
forced to stay in torch right after clusters whose traced results are not row-major.
"""

from __future__ import annotations

import pytest
import torch
from helpers import assert_gradients_match, assert_same, fallbacks

import disc_torch
from disc_torch.layout import match_layout, memory_order, restore_layouts


def _permuted_then_viewed(x):
    a = x.permute(0, 2, 1) * 2  # torch keeps x's memory order: a is not row-major
    return a.permute(0, 2, 1).view(x.shape[0], -1) + 1  # a valid view only in that order


def test_a_torch_view_after_a_cluster_sees_the_traced_layout():
    compiled = disc_torch.optimize(_permuted_then_viewed, min_cluster_size=1,
                                   excluded_ops=["aten.permute", "aten.view"])
    for shape in [(2, 3, 4), (5, 7, 3), (1, 4, 1)]:
        x = torch.randn(shape)
        assert_same(compiled(x), _permuted_then_viewed(x))
    assert {op for op, _, _ in fallbacks()} >= {"aten.view.default"}
    assert disc_torch.report().summary().compiled > 0


def test_gradients_through_torch_views_between_clusters():
    w = torch.randn(4, 4, requires_grad=True)

    def fn(x):
        h = (x @ w).permute(0, 2, 1).tanh()  # cluster; its result keeps a permuted layout
        return (h.permute(0, 2, 1).reshape(x.shape[0], -1) * 3).sum(-1)

    compiled = disc_torch.optimize(fn, min_cluster_size=1,
                                   excluded_ops=["aten.permute", "aten.view"])
    for b, s in [(2, 5), (3, 9), (1, 2)]:
        x = torch.randn(b, s, 4, requires_grad=True)
        want = torch.autograd.grad(fn(x).square().sum(), [x, w])
        got = torch.autograd.grad(compiled(x).square().sum(), [x, w])
        assert_gradients_match(got, want)


def test_results_returned_to_the_user_have_eager_layouts():
    def fn(x):
        return x.permute(0, 2, 1) * 2, x.transpose(0, 1).exp()

    compiled = disc_torch.optimize(fn, min_cluster_size=1)
    for shape in [(2, 3, 4), (4, 5, 6)]:
        x = torch.randn(shape)
        got, want = compiled(x), fn(x)
        assert_same(got, want)
        assert [t.stride() for t in got] == [t.stride() for t in want]
    assert disc_torch.report().summary().compiled > 0


@pytest.mark.parametrize("shape,strides,order", [
    ((2, 3, 4), (12, 4, 1), None),        # row-major
    ((2, 3, 4), (12, 1, 3), (0, 2, 1)),   # permuted
    ((2, 1, 4), (4, 4, 1), None),         # a size-1 dim's stride does not matter
    ((2, 3, 4), (0, 4, 1), None),         # expanded: not dense
    ((2, 3), (6, 2), None),               # a gap: not dense
])
def test_memory_order(shape, strides, order):
    base = torch.empty(64)
    assert memory_order(base.as_strided(shape, strides)) == order


def test_match_layout_copies_only_when_the_layout_differs():
    x = torch.randn(2, 3, 4)
    y = match_layout(x, (0, 2, 1))
    assert torch.equal(y, x) and y.stride() == (12, 1, 3)
    assert match_layout(y, (0, 2, 1)) is y


def test_graph_inputs_a_cluster_may_have_made_get_their_traced_layout():
    """A backward graph's inputs are tensors the forward saved, which a forward cluster
    may have produced row-major although torch traced them permuted: torch ops reading
    them (here a view valid only in the traced layout) get that layout back, also in a
    graph without clusters of its own."""
    def g(a):  # ATen calls, as in aot_autograd's graphs
        return torch.ops.aten.view.default(torch.ops.aten.permute.default(a, [0, 2, 1]),
                                           [2, 12])

    gm = torch.fx.symbolic_trace(g)
    placeholder = next(n for n in gm.graph.nodes if n.op == "placeholder")
    placeholder.meta["val"] = torch.empty(2, 4, 3).permute(0, 2, 1)  # traced layout
    row_major = torch.randn(2, 3, 4)  # what a cluster returns
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        gm(row_major)
    assert restore_layouts(gm, lambda n: False, visible=None) == 1
    gm.recompile()
    assert torch.equal(gm(row_major), row_major.permute(0, 2, 1).reshape(2, 12))


def test_an_in_place_op_writes_into_the_tensor_it_was_given():
    """``copy_`` into a mutated graph input must reach the caller's tensor, never a
    re-laid-out copy of it."""
    def g(a, b):
        return torch.ops.aten.copy_.default(a, b)

    gm = torch.fx.symbolic_trace(g)
    for p in (n for n in gm.graph.nodes if n.op == "placeholder"):
        p.meta["val"] = torch.empty(2, 4, 3).permute(0, 2, 1)
    assert restore_layouts(gm, lambda n: False, visible=None) == 0
    gm.recompile()
    a, b = torch.zeros(2, 3, 4), torch.randn(2, 3, 4)
    gm(a, b)
    assert torch.equal(a, b)
