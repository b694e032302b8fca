"""Timing analysis against hand-computed TAT/TRT/TTS, and the seed's candidate rule."""

import pytest

from corefold.ir import parse
from corefold.passes.memory.timing import select_candidates, timing_analysis

# a -> b -> c -> d, and a -> d (a long-lived skip), e independent
TEXT = """\
graph t
input x: float32[1000]
node a = Relu(x) -> (va: float32[1000])
node b = Neg(va) -> (vb: float32[10])
node c = Neg(vb) -> (vc: float32[10])
node e = Abs(x) -> (ve: float32[10])
node d = Add(vc, va) -> (vd: float32[1000])
output vd
output ve
"""
DELAY = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 1.0, "e": 5.0}


@pytest.fixture()
def graph():
    return parse(TEXT)


def test_parallel_timing_is_the_seeds(graph):
    t = timing_analysis(graph, {n: DELAY[n.name] for n in graph.nodes})
    n = {x.name: x for x in graph.nodes}
    assert [t.trt[n[k]] for k in "abced"] == [0, 1, 3, 0, 6]
    assert [t.tat[n[k]] for k in "abced"] == [1, 3, 6, 5, 7]
    assert t.tts[(n["d"], 0)] == 0.0  # vc arrives last
    assert t.tts[(n["d"], 1)] == 5.0  # va waits from 1 to 6
    assert t.tts[(n["a"], 0)] == 0.0  # graph input at 0, needed at 0


def test_serial_timing_follows_the_order(graph):
    order = graph.topological_order()  # a b c e d
    t = timing_analysis(graph, {n: DELAY[n.name] for n in graph.nodes}, order)
    n = {x.name: x for x in graph.nodes}
    assert [t.trt[n[k]] for k in "abced"] == [0, 1, 3, 6, 11]
    assert t.tts[(n["d"], 1)] == 10.0
    assert t.tts[(n["e"], 0)] == 6.0


def test_control_edges_delay_the_required_time(graph):
    n = {x.name: x for x in graph.nodes}
    graph.add_control_edge(n["e"], n["b"])
    t = timing_analysis(graph, {x: DELAY[x.name] for x in graph.nodes})
    assert t.trt[n["b"]] == 5.0 and t.tts[(n["b"], 0)] == 4.0


def test_candidates_by_slack_size_and_count(graph):
    t = timing_analysis(graph, {n: DELAY[n.name] for n in graph.nodes})
    n = {x.name: x for x in graph.nodes}
    si = select_candidates(graph, t, th_tts=1.0, th_size=100, max_count=5)
    assert [(c[0].name, c[1]) for c in si] == [("d", 1)]
    assert select_candidates(graph, t, th_tts=5.0, th_size=100, max_count=5) == []  # strictly greater
    assert select_candidates(graph, t, th_tts=1.0, th_size=4000, max_count=5) == []  # 4000 bytes is not > 4000
    # every input qualifies: the two largest, ties in graph order (x for a, va for b)
    top = select_candidates(graph, t, th_tts=-1.0, th_size=0, max_count=2)
    assert [(c[0], c[1], c[2].name) for c in top] == [(n["a"], 0, "x"), (n["b"], 0, "va")]
    no_inputs = select_candidates(graph, t, -1.0, 0, 10, movable=lambda v: v.producer is not None)
    assert {c[2].name for c in no_inputs} == {"va", "vb", "vc"}
