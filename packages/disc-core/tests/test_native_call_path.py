"""The native engine's call path with outputs allocated ahead of the call.

The runtime knows a call's output shapes before it runs (the module computes them from the
input dims, ``disc_output_dims``, and the runtime remembers them per dims) and allocates
the outputs itself, handing them to the module through the module's ``disc_table_alloc``
instead of one Python callback per output (about 1.3 us each). These tests check that the
shortcut returns fresh, correct arrays, also on dims never seen before, keeps the
``allocate_output`` hook and the input checks working, and falls back to callbacks when a
module asks for shapes the table does not hold or cannot compute them.
"""

from __future__ import annotations

import numpy as np
import pytest

from disc_core import Compiler, catalog, interpret
from disc_runtime import CompileCache, DiscRuntimeError, InputError
from disc_runtime.native import _Plan


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    return Compiler(CompileCache(tmp_path_factory.mktemp("cache")), target="native")


def lnb_inputs(n: int, rng: np.random.Generator, hidden: int = 768) -> list[np.ndarray]:
    return [rng.standard_normal((n, hidden), dtype=np.float32) + 1,
            rng.standard_normal((n, hidden), dtype=np.float32),
            rng.standard_normal(hidden, dtype=np.float32)]


def check(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4)


def test_repeated_dims_take_the_planned_path_and_return_fresh_arrays(compiler):
    graph = catalog.layernorm_backward(hidden=768)
    exe = compiler.compile(graph)
    module = exe._run_fn.module
    assert module._table_alloc is not None  # disc-core's modules export the allocator
    rng = np.random.default_rng(0)
    first = lnb_inputs(5, rng)
    check(exe.run(first), interpret(graph, first))
    assert list(module._plans) == [(5, 768, 5, 768, 768)]
    results = []
    for n in (5, 5, 0, 1, 5, 33):  # repeated, empty, new dims
        inputs = lnb_inputs(n, rng)
        got = exe.run(inputs)
        check(got, interpret(graph, inputs))
        results.append(got)
    assert module._plans is not None and len(module._plans) == 4
    # every call returned its own buffers: earlier results were not overwritten
    ids = {id(a) for r in results for a in r}
    assert len(ids) == 3 * len(results)
    assert not np.shares_memory(results[0][0], results[1][0])


def test_planned_path_keeps_hook_and_input_checks(compiler):
    graph = catalog.softmax(2)
    exe = compiler.compile(graph)
    x = np.random.default_rng(1).standard_normal((3, 7), dtype=np.float32)
    exe.run([x])
    exe.run([x])  # planned now
    given = []

    def allocate(index, shape, dtype):
        buf = np.full(shape, np.nan, dtype)
        given.append(buf)
        return buf

    module = exe._run_fn.module
    planned = []
    plain_call_planned = module._call_planned

    def counting_call_planned(*args):
        planned.append(args)
        return plain_call_planned(*args)

    module._call_planned = counting_call_planned
    (got,) = exe.run([x], allocate_output=allocate)
    # the hook ran ahead of the call, on the planned path (no callback from inside C)
    assert len(planned) == 1 and len(given) == 1 and np.shares_memory(got, given[0])
    check([got], interpret(graph, [x]))
    with pytest.raises(DiscRuntimeError, match=r"expected a contiguous float32 array of shape "
                                               r"\(3, 7\)"):
        exe.run([x], allocate_output=lambda i, s, d: np.empty((7, 3), np.float32).T)
    assert len(planned) == 2
    with pytest.raises(InputError, match="rank"):
        exe.run([x[0]])
    with pytest.raises(InputError, match="dtype"):
        exe.run([x.astype(np.float64)])


def test_a_table_that_does_not_fit_falls_back_to_callbacks(compiler):
    """A request the table does not hold (as an output whose shape depended on input values
    would make) fails only the planned attempt: the call runs again with callbacks, and
    the module stops planning."""
    graph = catalog.layernorm_backward(hidden=768)
    exe = compiler.compile(graph)
    module = exe._run_fn.module
    rng = np.random.default_rng(2)
    inputs = lnb_inputs(4, rng)
    exe.run(inputs)
    module._plans[(4, 768, 4, 768, 768)] = _Plan([(4, 768), (768,), (767,)], module.out_dtypes)
    planned = []
    real = module._call_planned
    module._call_planned = lambda *args: planned.append(1) or real(*args)
    check(exe.run(inputs), interpret(graph, inputs))
    assert module._plans is None
    assert len(planned) == 1  # the planned attempt is made once, not again by the slow path
    again = lnb_inputs(6, rng)
    check(exe.run(again), interpret(graph, again))


def test_a_module_without_the_table_allocator_uses_callbacks(compiler):
    graph = catalog.softmax(2)
    exe = compiler.compile(graph)
    module = exe._run_fn.module
    module._table_alloc, module._plans = None, None  # as a module built before the export
    x = np.random.default_rng(3).standard_normal((2, 9), dtype=np.float32)
    for _ in range(3):
        check(exe.run([x]), interpret(graph, [x]))
    assert module._plans is None


def test_the_call_path_runs_on_cffis_public_from_buffer(compiler, monkeypatch):
    """The hot path takes the precompiled declarations' ``from_buffer`` (C) or a
    run-time-declared FFI's backend call; the public call of such an FFI (cffi's Python
    wrapper) must serve as well: same results, strided inputs still copied by the slow
    path, empty inputs still run."""
    import cffi

    from disc_runtime import abi, native

    ffi = cffi.FFI()
    ffi.cdef(abi.CDEF)
    monkeypatch.setattr(native, "_from_buffer", ffi.from_buffer)
    graph = catalog.layernorm_backward(hidden=768)
    exe = compiler.compile(graph)
    rng = np.random.default_rng(3)
    for n in (4, 4, 0):
        inputs = lnb_inputs(n, rng)
        check(exe.run(inputs), interpret(graph, inputs))
    strided = [a[::2] for a in lnb_inputs(6, rng)[:2]] + [lnb_inputs(1, rng)[2]]
    check(exe.run(strided), interpret(graph, [np.ascontiguousarray(a) for a in strided]))


def _addresses(arrays: list[np.ndarray], nonnull: int) -> list[int]:
    return [a.ctypes.data if a.size else nonnull for a in arrays]


def _dims(arrays: list[np.ndarray]) -> list[int]:
    return [d for a in arrays for d in a.shape]


def test_pointer_call_runs_on_addresses_from_the_first_call_on_new_dims(compiler):
    """A bridge's raw-address call (torch's hot path): a plan for dims never seen (the
    module computes the output shapes), then the same results as the interpreter in the
    caller's buffers, empty inputs and outputs included, and every call counted in the
    executable's stats; no checked call is needed first. (Each test here compiles a graph
    of its own: the module-scoped compiler shares a module between equal graphs.)"""
    graph = catalog.layernorm_backward(hidden=640)
    exe = compiler.compile(graph)
    call = exe.pointer_call
    assert call is not None and [r for _, r in call.in_specs] == [2, 2, 1]
    rng = np.random.default_rng(4)
    for n in (5, 0, 1):
        inputs = lnb_inputs(n, rng, 640)
        dims = _dims(inputs)
        plan = call.plan(tuple(dims))
        assert plan is not None and plan.shapes == [(n, 640), (640,), (640,)]
        for _ in range(2):
            inputs = lnb_inputs(n, rng, 640)
            outs = [np.full(s, np.nan, d) for s, d in zip(plan.shapes, call.out_dtypes)]
            before = exe.stats.calls
            assert call(plan, _addresses(inputs, call.nonnull), _dims(inputs),
                        _addresses(outs, call.nonnull))
            assert exe.stats.calls == before + 1
            check(outs, interpret(graph, inputs))


def test_pointer_call_reports_the_modules_own_input_errors(compiler):
    """The module still checks every dim against its symbols: dims that break the graph's
    constraints raise InputError with the module's words (nothing is written), and a wrong
    count of inputs or outputs is refused before the module runs."""
    graph = catalog.layernorm_backward(hidden=576)
    exe = compiler.compile(graph)
    call = exe.pointer_call
    rng = np.random.default_rng(5)
    inputs = lnb_inputs(3, rng, 576)
    exe.run(inputs)
    plan = call.plan(tuple(_dims(inputs)))
    outs = [np.zeros(s, d) for s, d in zip(plan.shapes, call.out_dtypes)]
    bad = [inputs[0], rng.standard_normal((4, 576), dtype=np.float32), inputs[2]]
    with pytest.raises(InputError):
        call(plan, _addresses(bad, call.nonnull), _dims(bad), _addresses(outs, call.nonnull))
    assert not outs[0].any()
    assert exe.stats.engine_errors == 1
    with pytest.raises(InputError, match="3 inputs and 2 outputs, the module takes 3 and "
                                         "gives 3"):
        call(plan, _addresses(inputs, call.nonnull), _dims(inputs),
             _addresses(outs[:2], call.nonnull))


def test_pointer_call_gives_up_on_a_plan_the_module_does_not_follow(compiler):
    """A plan whose shapes the module does not ask for (as outputs whose shapes depend on
    values would make) returns False with nothing written, and planning stops, so the
    bridge takes the checked path from then on."""
    graph = catalog.layernorm_backward(hidden=768)
    exe = compiler.compile(graph)
    module, call = exe._run_fn.module, exe.pointer_call
    inputs = lnb_inputs(4, np.random.default_rng(6))
    exe.run(inputs)
    wrong = _Plan([(4, 512), (512,), (511,)], module.out_dtypes)
    outs = [np.zeros(s, d) for s, d in zip(wrong.shapes, call.out_dtypes)]
    assert not call(wrong, _addresses(inputs, call.nonnull), _dims(inputs),
                    _addresses(outs, call.nonnull))
    assert module._plans is None and call.plan(tuple(_dims(inputs))) is None
    check(exe.run(inputs), interpret(graph, inputs))


def _reshape_concat_graph():
    from disc_core.builder import GraphBuilder

    b = GraphBuilder("shapes")
    s0, s1 = b.symbol("s0"), b.symbol("s1")
    x = b.input("x", "f32", [s0, s1, 4])
    y = b.input("y", "f32", [s1, 4])
    flat = b.reshape_to(x, [s0 * s1, 4])
    both = b.op("concatenate", flat, y, dimension=0)  # [s0*s1 + s1, 4]
    halves = b.op("slice", both, start=[0, 0], limit=[both.shape[0], 4],
                  stride=[2, 1])  # [ceildiv(s0*s1 + s1, 2), 4]
    return b.build(both, halves, b.op("reduce", x, kind="sum", axes=[1]))


#: name -> (graph, input shapes per call): output dims that are symbols, static dims,
#: products, sums and a ceildiv, at sizes 0, 1, odd and large
SHAPE_CASES = {
    "layernorm_backward": (lambda: catalog.layernorm_backward(hidden=64),
                           [[(n, 64), (n, 64), (64,)] for n in (0, 1, 7, 300)]),
    "softmax": (lambda: catalog.softmax(3),
                [[s] for s in ((2, 3, 5), (1, 1, 1), (0, 4, 9), (3, 0, 2))]),
    "reshape_concat": (_reshape_concat_graph,
                       [[(a, b, 4), (b, 4)] for a, b in ((2, 3), (1, 1), (0, 5), (7, 0),
                                                         (5, 9))]),
}


@pytest.mark.parametrize("name", sorted(SHAPE_CASES))
def test_the_module_computes_output_shapes_for_dims_it_never_saw(compiler, name):
    """``plan_for`` asks the module (``disc_output_dims``) for the output shapes of dims it
    has not run on: they equal the interpreter's at every size (0, 1, odd, large), and a
    call on those dims runs on the planned path without having learnt them first."""
    make, shapes = SHAPE_CASES[name]
    graph = make()
    exe = compiler.compile(graph)
    module = exe._run_fn.module
    assert module._output_dims is not None
    rng = np.random.default_rng(7)
    for shape_set in shapes:
        inputs = [rng.standard_normal(s, dtype=np.float32) + 1 for s in shape_set]
        want = interpret(graph, inputs)
        dims = tuple(_dims(inputs))
        assert dims not in module._plans
        plan = module.plan_for(dims)
        assert plan is not None and plan.shapes == [w.shape for w in want], shape_set
        callbacks: list[int] = []
        real = module._call
        module._call = lambda *a, real=real, seen=callbacks: seen.append(1) or real(*a)
        try:
            check(exe.run(inputs), want)
        finally:
            module._call = real
        assert module._plans is not None and not callbacks, "the call took the callback path"


def test_dims_the_module_rejects_get_no_plan_and_the_call_says_why(compiler):
    """Input dims that break the graph's constraints: no plan (nothing is allocated from
    them) and the call raises the module's own words, as before."""
    graph = catalog.layernorm_backward(hidden=320)
    exe = compiler.compile(graph)
    module = exe._run_fn.module
    rng = np.random.default_rng(8)
    bad = [rng.standard_normal((3, 320), dtype=np.float32),
           rng.standard_normal((4, 320), dtype=np.float32),
           rng.standard_normal(320, dtype=np.float32)]
    assert module.plan_for(tuple(_dims(bad))) is None
    with pytest.raises(InputError, match="dim 0 is 4"):
        exe.run(bad)
    short = [bad[0], bad[0], bad[2][:16]]  # a static dim (the hidden size) is wrong
    assert module.plan_for(tuple(_dims(short))) is None
    with pytest.raises(InputError, match="16"):
        exe.run(short)
    assert module._plans is not None  # rejected inputs do not end planning


def test_a_module_without_the_shape_export_learns_shapes_by_a_call(compiler):
    """A module built before ``disc_output_dims``: new dims take the callback path once
    and are planned from then on, as before the export existed."""
    graph = catalog.layernorm_backward(hidden=448)
    exe = compiler.compile(graph)
    module = exe._run_fn.module
    module._output_dims = None
    rng = np.random.default_rng(9)
    inputs = lnb_inputs(3, rng, 448)
    dims = tuple(_dims(inputs))
    assert module.plan_for(dims) is None
    check(exe.run(inputs), interpret(graph, inputs))
    assert module.plan_for(dims).shapes == [(3, 448), (448,), (448,)]
