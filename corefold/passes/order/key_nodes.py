"""Key nodes and segments (SPEC M3 §2-3).

A *key node* is a node through which every path from the graph's inputs to its outputs
passes. With a virtual entry before every node without predecessors and a virtual exit
after every sink and every producer of a graph output, the key nodes are exactly the
dominators of the virtual exit, i.e. the chain ``idom(exit), idom(idom(exit)), ...``
(the seed's path enumeration is exponential; this is the same set in near-linear time).

Every node lies on some entry-exit path, so each node is an ancestor or a descendant of
every key node. Numbering key nodes ``k_1 < k_2 < ... < k_m`` along the chain, the
*segment* of a node ``n`` is

    seg(n) = #{ j : k_j is a strict ancestor of n }

computed in one topological sweep as ``seg(n) = max_p (seg(p) + [p is key])`` over
predecessors ``p`` (data and control). Segment ``j`` holds ``k_j`` and everything strictly
between ``k_{j-1}`` and ``k_j``; the order between segments is forced, so the best whole
order is the concatenation of per-segment orders.
"""

from __future__ import annotations

from corefold.ir import Graph, Node
from corefold.ir.analysis import dominators


def key_nodes(graph: Graph) -> list[Node]:
    """The key nodes of ``graph`` in topological order.

    Complexity: O(V + E * d), d the dominator-tree depth walked when intersecting.
    """
    order = graph.topological_order()
    if not order:
        return []
    idom = dominators(graph)
    depth: dict[Node, int] = {}
    for n in order:  # idom precedes n in topological order
        d = idom[n]
        depth[n] = 0 if d is None else depth[d] + 1
    output_producers = {v.producer for v in graph.outputs if v.producer is not None}
    exit_preds = [n for n in order if n in output_producers or not n.successors()]

    def intersect(a: Node | None, b: Node | None) -> Node | None:
        while a is not b:
            if a is None or b is None:
                return None
            if depth[a] > depth[b]:
                a = idom[a]
            elif depth[b] > depth[a]:
                b = idom[b]
            else:
                a, b = idom[a], idom[b]
        return a

    cur: Node | None = exit_preds[0]
    for p in exit_preds[1:]:
        cur = intersect(cur, p)
    chain = []
    while cur is not None:
        chain.append(cur)
        cur = idom[cur]
    return chain[::-1]


def segment_index(graph: Graph) -> dict[Node, int]:
    """``seg(n)`` of the module docstring for every node (before any merging). O(V + E)."""
    keys = set(key_nodes(graph))
    seg: dict[Node, int] = {}
    for n in graph.topological_order():
        s = 0
        for p in n.predecessors():
            s = max(s, seg[p] + (1 if p in keys else 0))
        seg[n] = s
    return seg


def segments(graph: Graph, key_nodes_per_segment: int = 1) -> list[list[Node]]:
    """Split the graph's nodes into segments at key nodes, each in stable topological order.

    A segment of a single node is merged into its predecessor (SPEC M3 §3). With
    ``key_nodes_per_segment = m > 1``, m consecutive key-node segments form one segment.
    The concatenation of the segments is a topological order of the graph. O(V + E).

    Raises:
        ValueError: ``key_nodes_per_segment`` < 1.
    """
    if key_nodes_per_segment < 1:
        raise ValueError(f"key_nodes_per_segment must be >= 1, got {key_nodes_per_segment}")
    order = graph.topological_order()
    seg = segment_index(graph)
    raw: list[list[Node]] = []
    for n in order:
        while len(raw) <= seg[n]:
            raw.append([])
        raw[seg[n]].append(n)
    raw = [s for s in raw if s]
    grouped: list[list[Node]] = []
    for i in range(0, len(raw), key_nodes_per_segment):
        grouped.append([n for s in raw[i:i + key_nodes_per_segment] for n in s])
    merged: list[list[Node]] = []
    for s in grouped:
        if len(s) == 1 and merged:
            merged[-1].extend(s)
        else:
            merged.append(list(s))
    return merged
