"""DISC's CSE of the joint graph (disc_torch.joint_cse), which stands in for torch's
Inductor-importing one before the min-cut partitioner."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import torch
from torch import fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from disc_torch.joint_cse import cse_joint_graph

aten = torch.ops.aten


def _count(graph: fx.Graph, target) -> int:
    return sum(1 for n in graph.nodes if n.op == "call_function" and n.target is target)


def _run(graph: fx.Graph, *args):
    return fx.GraphModule(torch.nn.Module(), graph)(*args)


def test_duplicate_chains_merge_and_compute_the_same() -> None:
    g = fx.Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    outs = []
    for _ in range(2):  # the same t(w) and mm twice, as a decomposition may emit them
        wt = g.call_function(aten.t.default, (w,))
        mm = g.call_function(aten.mm.default, (x, wt))
        outs.append(g.call_function(aten.relu.default, (mm,)))
    g.output(g.call_function(aten.add.Tensor, tuple(outs)))
    xs, ws = torch.randn(3, 4), torch.randn(5, 4)
    want = _run(g, xs, ws)
    assert cse_joint_graph(g) == 3
    g.lint()
    assert (_count(g, aten.t.default), _count(g, aten.mm.default)) == (1, 1)
    torch.testing.assert_close(_run(g, xs, ws), want)


def test_scalars_of_another_type_do_not_merge() -> None:
    g = fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(aten.add.Tensor, (x, 1))
    b = g.call_function(aten.add.Tensor, (x, 1.0))  # int tensor + 1.0 is a float tensor
    c = g.call_function(aten.add.Tensor, (x, True))
    g.output((a, g.call_function(aten.neg.default, (b,)), g.call_function(aten.neg.default, (c,))))
    assert cse_joint_graph(g) == 0


def test_random_ops_never_merge() -> None:
    g = fx.Graph()
    x = g.placeholder("x")
    r1 = g.call_function(aten.rand_like.default, (x,))
    r2 = g.call_function(aten.rand_like.default, (x,))
    g.output(g.call_function(aten.sub.Tensor, (r1, r2)))
    assert cse_joint_graph(g) == 0
    assert (_run(g, torch.zeros(64)) != 0).any()


def test_a_mutation_ends_the_region_values_merge_in() -> None:
    g = fx.Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    a1 = g.call_function(aten.mul.Tensor, (x, 2))
    a2 = g.call_function(aten.mul.Tensor, (x, 2))  # same region: merges into a1
    g.call_function(aten.copy_.default, (x, y))  # x changes here
    b = g.call_function(aten.mul.Tensor, (x, 2))  # reads the new x: must stay
    g.output((g.call_function(aten.add.Tensor, (a1, a2)), b))
    assert cse_joint_graph(g) == 1
    got_a, got_b = _run(g, torch.ones(3), torch.full((3,), 5.0))
    torch.testing.assert_close(got_a, torch.full((3,), 4.0))
    torch.testing.assert_close(got_b, torch.full((3,), 10.0))


def test_values_the_graph_returns_stay_separate() -> None:
    g = fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(aten.neg.default, (x,))
    b = g.call_function(aten.neg.default, (x,))
    c = g.call_function(aten.neg.default, (x,))  # neither returned: c and d merge
    d = g.call_function(aten.neg.default, (x,))
    g.output((a, b, g.call_function(aten.add.Tensor, (c, d))))
    assert cse_joint_graph(g) == 1  # returned values neither merge nor absorb others
    assert _count(g, aten.neg.default) == 3
    got = _run(g, torch.ones(2))
    assert got[0].data_ptr() != got[1].data_ptr()
    torch.testing.assert_close(got[2], torch.full((2,), -2.0))


def test_values_whose_storage_is_returned_stay_separate() -> None:
    """Two equal sums each returned through a view: merging the sums (neither is returned
    itself) would make the two outputs alias one buffer, which eager never does."""
    g = fx.Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    xs, ys = torch.randn(2, 3), torch.randn(2, 3)
    outs = []
    for _ in range(2):
        s = g.call_function(aten.add.Tensor, (x, y))
        s.meta["val"] = xs + ys
        v = g.call_function(aten.view.default, (s, [6]))
        v.meta["val"] = s.meta["val"].view(6)
        outs.append(v)
    g.output(tuple(outs))
    assert cse_joint_graph(g) == 0
    a, b = _run(g, xs, ys)
    assert a.data_ptr() != b.data_ptr()


def test_empty_and_data_dependent_values_never_merge() -> None:
    g = fx.Graph()
    x = g.placeholder("x")
    e1 = g.call_function(aten.empty.memory_format, ([3],), {"dtype": torch.float32})
    e2 = g.call_function(aten.empty.memory_format, ([3],), {"dtype": torch.float32})
    n1 = g.call_function(aten.sum.default, (x,))
    n2 = g.call_function(aten.sum.default, (x,))
    u = ShapeEnv().create_unbacked_symint()
    n1.meta["val"] = n2.meta["val"] = u  # stands in for a data-dependent size
    g.output((g.call_function(aten.add.Tensor, (e1, e2)), g.call_function(aten.add.Tensor,
                                                                          (n1, n2))))
    assert cse_joint_graph(g) == 0


def test_training_compiles_without_importing_inductor(tmp_path) -> None:
    """A fresh process trains through DISC (forward and backward partitioned by min-cut)
    and never imports torch._inductor's pattern matcher; gradients match eager."""
    script = textwrap.dedent("""
        import sys, torch
        import disc_torch
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(),
                                  torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
        ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(),
                                  torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
        ref.load_state_dict(net.state_dict())
        f = disc_torch.optimize(net)
        for rows in (5, 1, 12):
            x = torch.randn(rows, 8)
            f(x).square().mean().backward()
            ref(x).square().mean().backward()
            for p, q in zip(net.parameters(), ref.parameters()):
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
            net.zero_grad(), ref.zero_grad()
        print("inductor", "torch._inductor.pattern_matcher" in sys.modules)
    """)
    env = {**os.environ, "DISC_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.split("\n")
    assert "inductor False" in lines, out.stdout
