from hypothesis import given, settings
from hypothesis import strategies as st

from corefold.ir import Graph, Node, Value, parse
from corefold.passes.order import key_nodes, segments

DIAMONDS = """\
graph d
input x: float32[1]
node a = Relu(x) -> (a0: float32[1])
node b = Neg(a0) -> (b0: float32[1])
node c = Exp(a0) -> (c0: float32[1])
node d = Add(b0, c0) -> (d0: float32[1])
node e = Relu(d0) -> (e0: float32[1])
node f = Neg(e0) -> (f0: float32[1])
node g = Exp(e0) -> (g0: float32[1])
node h = Add(f0, g0) -> (h0: float32[1])
output h0
"""


def test_key_nodes_and_segments_of_two_diamonds():
    g = parse(DIAMONDS)
    assert [n.name for n in key_nodes(g)] == ["a", "d", "e", "h"]
    # {a} is alone but first; {e} is merged into the segment before it
    assert [[n.name for n in s] for s in segments(g)] == [["a"], ["b", "c", "d", "e"], ["f", "g", "h"]]
    assert [[n.name for n in s] for s in segments(g, key_nodes_per_segment=2)] == [
        ["a", "b", "c", "d"], ["e", "f", "g", "h"]]


def test_a_node_reading_only_the_input_late_breaks_key_nodes():
    g = parse(DIAMONDS.replace("node h = Add(f0, g0)", "node k = Neg(x) -> (k0: float32[1])\n"
                               "node h = Sum(f0, g0, k0)"))
    assert [n.name for n in key_nodes(g)] == ["h"]


@st.composite
def random_dags(draw):
    n = draw(st.integers(1, 14))
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=30))
    ctrl = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=6))
    perm = draw(st.permutations(range(n)))
    n_out = draw(st.integers(1, 2))
    g = Graph("rand")
    x = g.add_input("x", (2,), "float32")
    outs: list[Value] = []
    nodes: list[Node] = []
    for i in range(n):
        preds = sorted({min(a, b) for a, b in edges if max(a, b) == i and a != b})
        node = Node("Sum", [outs[p] for p in preds] or [x], [Value(f"v{i}", (2,), "float32")], name=f"n{i}")
        nodes.append(node)
        outs.append(node.outputs[0])
    for i in perm:
        g.add_node(nodes[i])
    for a, b in ctrl:
        if a < b:
            g.add_control_edge(nodes[a], nodes[b])
    g.outputs = outs[-n_out:]
    return g


def _brute_force_key_nodes(g: Graph) -> set:
    exits = {v.producer for v in g.outputs} | {n for n in g.nodes if not n.successors()}
    keys = set()
    for k in g.nodes:
        reach = set()
        for node in g.topological_order():
            if node is k:
                continue
            preds = node.predecessors()
            if not preds or any(p in reach for p in preds):
                reach.add(node)
        if not reach & exits:
            keys.add(k)
    return keys


@given(random_dags())
@settings(max_examples=120, deadline=None)
def test_key_nodes_are_exactly_the_nodes_on_every_path(g):
    assert set(key_nodes(g)) == _brute_force_key_nodes(g)


@given(random_dags(), st.integers(1, 3))
@settings(max_examples=120, deadline=None)
def test_segments_partition_the_graph_in_topological_order(g, per):
    segs = segments(g, per)
    flat = [n for s in segs for n in s]
    assert sorted(n.name for n in flat) == sorted(n.name for n in g.nodes)
    pos = {n: i for i, n in enumerate(flat)}
    for n in g.nodes:
        for p in n.predecessors():
            assert pos[p] < pos[n]
    assert all(len(s) > 1 for s in segs[1:])
    keys = key_nodes(g)
    if per == 1:  # every segment but the last ends with a key node
        assert all(s[-1] in keys for s in segs[:-1])
