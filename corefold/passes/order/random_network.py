"""Seeded randomly wired networks (RandWire-style) for tests and ``bench/order.py``.

A Watts-Strogatz graph on ``n`` nodes (ring lattice, each node joined to its ``k``
nearest neighbours, every edge rewired with probability ``p``) is oriented from lower to
higher index, giving a DAG. Each DAG node becomes ``Sum`` of its predecessors' outputs
(when it has several), ``Relu``, then a ``Conv`` (3x3, or 1x1 every third node), so the
network mixes matrix and vector work; nodes without predecessors read the input and the
outputs of nodes without successors are summed into the graph output. Optional random
control edges (``ctrl_edges``, from a lower to a higher DAG node) make the test graphs
exercise them. O(n * k).
"""

from __future__ import annotations

import numpy as np

from corefold.ir import Graph, Node, Value


def watts_strogatz_dag(n: int, k: int, p: float, rng: np.random.Generator) -> list[list[int]]:
    """Predecessor lists of a DAG from a Watts-Strogatz graph on ``n`` nodes."""
    edges: set[tuple[int, int]] = set()
    for i in range(n):
        for j in range(1, min(k, n - 1) // 2 + 1):
            a, b = i, (i + j) % n
            if rng.random() < p:
                for _ in range(4 * n):  # rewire to a random free partner, if one turns up
                    c = int(rng.integers(n))
                    if c != a and (min(a, c), max(a, c)) not in edges:
                        b = c
                        break
            if a != b:
                edges.add((min(a, b), max(a, b)))
    preds: list[list[int]] = [[] for _ in range(n)]
    for a, b in sorted(edges):
        preds[b].append(a)
    return preds


def random_network(n: int = 32, *, k: int = 4, p: float = 0.75, seed: int = 0, channels: int = 16,
                   size: int = 14, batch: int = 1, ctrl_edges: int = 0, shuffle_file_order: bool = False) -> Graph:
    """A randomly wired conv network with static shapes (see the module docstring)."""
    rng = np.random.default_rng(seed)
    preds = watts_strogatz_dag(n, k, p, rng)
    g = Graph(f"randwire_{n}_{seed}")
    shape = (batch, channels, size, size)
    x = g.add_input("x", shape, "float32")
    nodes: list[list[Node]] = []
    outs: list[Value] = []
    has_succ = [False] * n
    for i in range(n):
        for q in preds[i]:
            has_succ[q] = True
    for i in range(n):
        ins = [outs[q] for q in preds[i]] or [x]
        made: list[Node] = []
        cur = ins[0]
        if len(ins) > 1:
            made.append(g.make_node("Sum", ins, name=f"n{i}_sum"))
            cur = made[-1].outputs[0]
            cur.shape = shape
        made.append(g.make_node("Relu", [cur], name=f"n{i}_relu"))
        cur = made[-1].outputs[0]
        cur.shape = shape
        ks = 1 if i % 3 == 2 else 3
        w = g.add_constant(f"n{i}_w", (rng.standard_normal((channels, channels, ks, ks)) /
                                       np.sqrt(channels * ks * ks)).astype(np.float32))
        b = g.add_constant(f"n{i}_b", rng.standard_normal(channels).astype(np.float32) * 0.1)
        made.append(g.make_node("Conv", [cur, w, b], {"kernel_shape": [ks, ks], "pads": [ks // 2] * 4},
                                name=f"n{i}_conv"))
        cur = made[-1].outputs[0]
        cur.shape = shape
        nodes.append(made)
        outs.append(cur)
    sinks = [outs[i] for i in range(n) if not has_succ[i]]
    if len(sinks) > 1:
        y = g.make_node("Sum", sinks, name="out_sum").outputs[0]
        y.shape = shape
    else:
        y = sinks[0]
    g.outputs = [y]
    for _ in range(ctrl_edges):
        a, b = sorted(int(v) for v in rng.choice(n, size=2, replace=False))
        g.add_control_edge(nodes[a][-1], nodes[b][0])
    if shuffle_file_order:
        order = g.nodes
        g.reorder([order[i] for i in rng.permutation(len(order))])
    return g
