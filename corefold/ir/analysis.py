"""Dominator and post-dominator trees over data and control edges.

A virtual entry precedes every node without predecessors, a virtual exit follows every
node without successors and every producer of a graph output. ``idom[n] is None`` means
n's immediate dominator is the virtual entry (post-dominator: the virtual exit).

Algorithm: Cooper, Harvey and Kennedy's "A Simple, Fast Dominance Algorithm" applied in
topological order; on a DAG one pass suffices. O(V + E * d) where d is the dominator-tree
depth walked by ``intersect`` (near-linear on real networks).
"""

from __future__ import annotations

from corefold.ir.graph import Graph
from corefold.ir.nodes import Node


def _idoms(order: list[Node], preds: dict[Node, list[Node]]) -> dict[Node, Node | None]:
    # index 0 is the virtual root; node i in `order` has number i + 1
    num = {n: i + 1 for i, n in enumerate(order)}
    idom = [0] * (len(order) + 1)
    depth = [0] * (len(order) + 1)

    def intersect(a: int, b: int) -> int:
        while a != b:
            while depth[a] > depth[b]:
                a = idom[a]
            while depth[b] > depth[a]:
                b = idom[b]
            if a != b:
                a, b = idom[a], idom[b]
        return a

    for n in order:
        i = num[n]
        ps = [num[p] for p in preds[n]]
        if not ps:
            d = 0
        else:
            d = ps[0]
            for p in ps[1:]:
                d = intersect(d, p)
        idom[i] = d
        depth[i] = depth[d] + 1
    return {n: (order[idom[num[n]] - 1] if idom[num[n]] else None) for n in order}


def dominators(graph: Graph) -> dict[Node, Node | None]:
    """Immediate dominator of every node (None: the virtual entry)."""
    order = graph.topological_order()
    preds = {n: n.predecessors() for n in order}
    return _idoms(order, preds)


def post_dominators(graph: Graph) -> dict[Node, Node | None]:
    """Immediate post-dominator of every node (None: the virtual exit)."""
    order = graph.topological_order()[::-1]
    output_producers = {v.producer for v in graph.outputs if v.producer is not None}
    succs: dict[Node, list[Node]] = {}
    for n in order:
        ss = n.successors()
        # a node feeding a graph output also has the virtual exit as successor, so nothing
        # below it can post-dominate it
        succs[n] = [] if n in output_producers else ss
    return _idoms(order, succs)


def dominator_chain(idom: dict[Node, Node | None], node: Node) -> list[Node]:
    """``node`` and its dominators up to the root, nearest first."""
    chain = []
    cur: Node | None = node
    while cur is not None:
        chain.append(cur)
        cur = idom[cur]
    return chain


#: Operators whose output hides small errors of their input: a softmax of logits about
#: 1e9 (random weights in a deep model) turns their float rounding into another distribution.
NORMALISERS = frozenset({"Softmax", "LogSoftmax"})

#: Operators that move elements without computing: an output behind them is its producer's.
REARRANGE = frozenset({"Reshape", "Flatten", "Identity", "Squeeze", "Unsqueeze"})


def normalised_outputs(graph: Graph) -> dict[str, Node]:
    """Graph output name -> the Softmax or LogSoftmax node that makes it (through
    :data:`REARRANGE` nodes), for every output a normaliser makes. O(outputs x depth)."""
    found: dict[str, Node] = {}
    for out in graph.outputs:
        node = out.producer
        while node is not None and node.op_type in REARRANGE:
            node = node.inputs[0].producer
        if node is not None and node.op_type in NORMALISERS:
            found[out.name] = node
    return found
