import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corefold.ir import (
    Graph,
    Node,
    Value,
    VerifyError,
    dominators,
    parse,
    post_dominators,
    to_text,
    verify,
)

TINY = """\
graph tiny opset 21
input x: float32[1, 4]
const w: float32[4, 2] = [0.5, -1.0, 0.25, 2.0, 1.0, 0.0, -0.5, 3.0]
const b: float32[2] = fill(0.0)
node mm = MatMul(x, w) -> (h: float32[1, 2])
node add = Add(h, b) -> (y: float32[1, 2]) after(mm) meta {"core": [0, 1]}
node relu = Relu(y) attrs {"alpha": 0.5, "t": {"__tensor__": "float32", "data": [1.5], "shape": [1]}} -> (z: float32[1, 2])
output z
"""


def test_text_round_trips_exactly():
    g = parse(TINY)
    verify(g)
    assert to_text(g) == TINY
    assert g.node("add").meta == {"core": [0, 1]}
    assert list(g.node("add").control_preds) == [g.node("mm")]
    assert g.constants["b"].const.strides == (0,)
    np.testing.assert_array_equal(g.node("relu").attrs["t"], np.array([1.5], np.float32))


def test_uses_are_ordered_snapshots_and_follow_edits():
    g = parse(TINY)
    h = g.value("h")
    (use,) = h.uses()
    assert use.node.name == "add" and use.index == 0
    new = g.make_node("Neg", [h])
    new.outputs[0].shape, new.outputs[0].dtype = (1, 2), np.dtype("float32")
    g.node("add").replace_input(0, new.outputs[0])
    assert [u.node.name for u in h.uses()] == ["neg"]
    verify(g)


def test_remove_node_with_live_uses_raises():
    g = parse(TINY)
    with pytest.raises(ValueError, match="is used by"):
        g.remove_node(g.node("mm"))
    with pytest.raises(ValueError, match="graph output"):
        g.remove_node(g.node("relu"))


def test_a_value_is_renamed_to_a_free_name_only():
    g = parse(TINY)
    h = g.value("h")
    with pytest.raises(ValueError, match="already used"):
        g.rename_value(h, "y")
    with pytest.raises(ValueError, match="constant"):
        g.rename_value(g.value("w"), "w2")
    g.rename_value(h, "hidden")
    assert g.value("hidden") is h and not g.has_name("h") and g.node("add").inputs[0].name == "hidden"
    g.rename_value(g.value("z"), "h")  # the freed name, on a graph output
    assert [v.name for v in g.outputs] == ["h"]
    verify(g)


def test_verify_catches_stale_use_and_cycle():
    g = parse(TINY)
    g.value("h")._uses.clear()
    with pytest.raises(VerifyError, match="does not list its use"):
        verify(g)
    g = parse(TINY)
    g.add_control_edge(g.node("relu"), g.node("mm"))
    with pytest.raises(VerifyError, match="cycle"):
        verify(g)


def test_verify_catches_undefined_input():
    g = parse(TINY)
    stray = Value("stray", (1, 2), "float32")
    g.add_node(Node("Relu", [stray], [Value("o", (1, 2))]))
    with pytest.raises(VerifyError, match="defined nowhere"):
        verify(g)


def test_parse_errors_name_the_line():
    with pytest.raises(ValueError, match="line 2"):
        parse("graph g\nnode a = Relu(nope) -> (y: float32[1])\n")


DIAMOND = """\
graph d
input x: float32[1]
node a = Relu(x) -> (a0: float32[1])
node b = Neg(a0) -> (b0: float32[1])
node c = Exp(a0) -> (c0: float32[1])
node d = Add(b0, c0) -> (d0: float32[1])
node e = Relu(d0) -> (e0: float32[1])
output e0
"""


def test_dominators_on_a_diamond():
    g = parse(DIAMOND)
    n = {x.name: x for x in g.nodes}
    dom = dominators(g)
    assert dom[n["a"]] is None and dom[n["b"]] is n["a"] and dom[n["d"]] is n["a"] and dom[n["e"]] is n["d"]
    pdom = post_dominators(g)
    assert pdom[n["a"]] is n["d"] and pdom[n["b"]] is n["d"] and pdom[n["d"]] is n["e"] and pdom[n["e"]] is None


def test_control_edge_changes_dominance():
    g = parse(DIAMOND)
    n = {x.name: x for x in g.nodes}
    g.add_control_edge(n["b"], n["c"])  # now c waits for b: b dominates c
    assert dominators(g)[n["c"]] is n["a"]  # a still reaches c directly
    assert post_dominators(g)[n["b"]] is n["d"]


@st.composite
def random_dags(draw):
    n = draw(st.integers(1, 25))
    rng_edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=60))
    ctrl = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=15))
    perm = draw(st.permutations(range(n)))
    g = Graph("rand")
    x = g.add_input("x", (2,), "float32")
    data_preds = {i: sorted({a for a, b in rng_edges if a < b == i} | set()) for i in range(n)}
    data_preds = {i: sorted({min(a, b) for a, b in rng_edges if max(a, b) == i and a != b}) for i in range(n)}
    outs: list[Value] = []
    nodes: list[Node] = []
    for i in range(n):
        ins = [outs[p] for p in data_preds[i]] or [x]
        node = Node("Sum", ins, [Value(f"v{i}", (2,), "float32")], name=f"n{i}")
        nodes.append(node)
        outs.append(node.outputs[0])
    for i in perm:  # file order differs from the creation (topological) order
        g.add_node(nodes[i])
    for a, b in ctrl:
        if a < b:
            g.add_control_edge(nodes[a], nodes[b])
    g.outputs = [outs[-1]]
    return g


@given(random_dags())
@settings(max_examples=150, deadline=None)
def test_topological_order_respects_every_edge(g):
    order = g.topological_order()
    pos = {node: i for i, node in enumerate(order)}
    assert len(order) == len(g)
    for node in g.nodes:
        for p in node.predecessors():
            assert pos[p] < pos[node]
        for p in node.control_preds:
            assert pos[p] < pos[node]


@given(random_dags())
@settings(max_examples=100, deadline=None)
def test_text_round_trip_on_random_dags(g):
    verify(g)
    text = to_text(g)
    g2 = parse(text)
    verify(g2)
    assert to_text(g2) == text
    assert [n.name for n in g2.topological_order()] == [n.name for n in g.topological_order()]


@given(random_dags())
@settings(max_examples=60, deadline=None)
def test_dominators_match_path_definition(g):
    # brute force: a dominates b iff removing a disconnects b from the entry
    dom = dominators(g)
    order = g.topological_order()
    for b in order:
        chain = set()
        cur = dom[b]
        while cur is not None:
            chain.add(cur)
            cur = dom[cur]
        for a in order:
            if a is b:
                continue
            reach = set()
            for node in order:
                if node is a:
                    continue
                preds = node.predecessors()
                if not preds or any(p in reach for p in preds):
                    reach.add(node)
            assert (b not in reach) == (a in chain), (a.name, b.name)


def test_remove_constant_refuses_a_used_one():
    g = parse(TINY)
    with pytest.raises(ValueError, match="still used"):
        g.remove_constant("w")
    g.node("add").replace_input(1, g.value("h"))
    g.remove_constant("b")
    assert "b" not in g.constants and not g.has_name("b")
    verify(g)


def test_pickle_round_trip_keeps_everything_and_fills_stay_small():
    """Graphs travel to worker processes (parallel compiles): pickling keeps nodes, control
    edges, meta and constants, needs no deep recursion, and a fill pickles as one value."""
    import pickle

    from corefold.ops import fill
    from corefold.passes.order.random_network import random_network

    g = random_network(30, seed=3, channels=4, size=4, batch=1, ctrl_edges=3)
    g.nodes[0].meta["core"] = [1, 2]
    g.add_constant("big", fill(np.float32(0.5), (1000, 1000)))
    back = pickle.loads(pickle.dumps(g))
    verify(back)
    assert to_text(back) == to_text(g)
    assert len(pickle.dumps(g)) < 200_000
