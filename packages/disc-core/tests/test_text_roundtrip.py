"""The text form: printing and parsing round-trip, and parse errors are precise."""

import numpy as np
import pytest
from graph_strategies import random_graphs
from hypothesis import given, settings

from disc_core.builder import GraphBuilder
from disc_core.dtypes import ALL_DTYPES
from disc_core.parser import ParseError, parse_graph


@settings(max_examples=200, deadline=None)
@given(random_graphs())
def test_random_graphs_round_trip(graph) -> None:
    text = str(graph)
    again = parse_graph(text)
    assert str(again) == text
    assert [v.type for v in again.inputs] == [v.type for v in graph.inputs]
    assert [op.attrs for op in again.ops] == [op.attrs for op in graph.ops]


@settings(max_examples=100, deadline=None)
@given(random_graphs())
def test_a_clone_is_the_parsed_text_and_independent(graph) -> None:
    """Compiles build from a clone instead of re-parsing the text: the two must agree, and
    passes mutating the clone must leave the original alone."""
    text = str(graph)
    copy = graph.clone()
    assert str(copy) == text == str(parse_graph(text))
    copy.verify()
    originals = {id(v) for v in graph.inputs} | {id(r) for op in graph.ops for r in op.results}
    copies = {id(v) for v in copy.inputs} | {id(r) for op in copy.ops for r in op.results}
    assert not originals & copies
    assert all(r.producer is op for op in copy.ops for r in op.results)
    for op in copy.ops:
        op.attrs.clear()
        op.operands.reverse()
    copy.ops.clear()
    copy.outputs = copy.inputs[:1]
    assert str(graph) == text


def test_a_clone_keeps_symbol_hints_apart() -> None:
    b = GraphBuilder("h")
    s = b.symbol("S", min=1, max=64, multiple_of=8)
    g = b.build(b.op("exp", b.input("x", "f32", [s])))
    copy = g.clone()
    copy.symbols["S"].max = 8
    assert g.symbols["S"].max == 64 and str(copy) != str(g)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("size", [0, 1, 5, 17, 300])
def test_constants_round_trip_exactly(dtype, size) -> None:
    rng = np.random.default_rng(size)
    vals = rng.standard_normal(size) * 100
    if dtype.is_float:
        vals = np.concatenate([vals, [np.inf, -np.inf, -0.0]])[:max(size, 0)] if size else vals
    arr = vals.astype(dtype.np) if not dtype.is_bool else vals > 0
    b = GraphBuilder("c")
    g = b.build(b.constant(arr))
    g2 = parse_graph(str(g))
    got = g2.ops[0].attrs["value"].array
    assert got.dtype == arr.dtype and got.shape == arr.shape
    assert got.tobytes() == arr.tobytes()


def test_nan_and_symbol_hints_round_trip() -> None:
    b = GraphBuilder("h")
    s = b.symbol("S", min=1, max=4096, multiple_of=8)
    x = b.input("x", "bf16", [s, 3])
    c = b.constant(np.array([np.nan, 1.5], np.float32))
    g = b.build(x, c)
    text = str(g)
    assert "symbol S {min = 1, max = 4096, multiple_of = 8}" in text
    g2 = parse_graph(text)
    assert str(g2) == text
    assert g2.symbols["S"].multiple_of == 8


@pytest.mark.parametrize("text, match", [
    ("", "empty text"),
    ("func @f(%x: f32[B]) -> (f32[B]) {\n  return %y\n}", "%y is not defined"),
    ("func @f(%x: f32[B]) -> (f32[B]) {\n  %0 = exp(%x) : f32[C]\n  return %0\n}",
     "exp infers"),
    ("func @f(%x: f32[B]) -> (f32[B]) {\n  %0 = nope(%x) : f32[B]\n  return %0\n}",
     "unknown op 'nope'"),
    ("func @f(%x: f32[B]) -> (f32[B]) {\n  %0 = exp(%x) {bad = 1} : f32[B]\n  return %0\n}",
     "unknown attribute"),
    ("func @f(%x: f32[B]) -> (i32[B]) {\n  return %x\n}", "return types"),
    ("func @f(%x: q32[B]) -> (f32[B]) {\n  return %x\n}", "bad type"),
    ("func @f(%x: f32[B]) -> (f32[B]) {\n  return %x\n", "missing closing"),
    ("func @f(%x: f32[B]) -> (f32[B]) {\n}", "missing 'return'"),
])
def test_parse_errors_name_the_problem(text: str, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        parse_graph(text)
