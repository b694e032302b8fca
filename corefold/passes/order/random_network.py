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


def random_mixed_network(n: int = 8, *, seed: int = 0, channels: int = 8, size: int = 8,
                         extra_outputs: int = 1, ctrl_edges: int = 0, span: int = 4) -> Graph:
    """A random DAG of ``n`` blocks mixing every unit kind and a multi-output node, for tests
    of the simulator, the bound and the exact reference.

    Block ``i`` reads one or two of the ``span`` previous blocks' outputs (or the input; a
    small ``span`` gives a chain of short fork-joins, hence many key nodes) and is one of:
    ``Relu``; ``Add`` of two; a 3x3 or 1x1 ``Conv``; ``Concat`` of two on channels (a DMA
    operator) then a 1x1 ``Conv`` back to ``channels``; ``Split`` into two channel halves
    (two outputs), ``Relu`` on one, ``Concat`` back. Every block output has shape
    ``(1, channels, size, size)``; blocks nobody reads are summed into the output, and
    ``extra_outputs`` random blocks are graph outputs as well. O(n).
    """
    rng = np.random.default_rng(seed)
    g = Graph(f"mixed_{n}_{seed}")
    shape = (1, channels, size, size)
    x = g.add_input("x", shape, "float32")
    outs: list[Value] = []
    firsts: list[Node] = []
    read = [False] * n

    def conv(v: Value, cin: int, ks: int, name: str) -> Node:
        w = g.add_constant(f"{name}_w", (rng.standard_normal((channels, cin, ks, ks)) / np.sqrt(cin * ks * ks))
                           .astype(np.float32))
        node = g.make_node("Conv", [v, w], {"kernel_shape": [ks, ks], "pads": [ks // 2] * 4}, name=name)
        node.outputs[0].shape = shape
        return node

    def pick() -> Value:
        if not outs or rng.random() < 0.15:
            return x
        j = int(rng.integers(max(0, len(outs) - span), len(outs)))
        read[j] = True
        return outs[j]

    for i in range(n):
        kind = str(rng.choice(["relu", "add", "conv", "cat", "split"]))
        a = pick()
        if kind == "relu":
            first = last = g.make_node("Relu", [a], name=f"b{i}_relu")
            last.outputs[0].shape = shape
        elif kind == "add":
            first = last = g.make_node("Add", [a, pick()], name=f"b{i}_add")
            last.outputs[0].shape = shape
        elif kind == "conv":
            first = last = conv(a, channels, int(rng.choice([1, 3])), f"b{i}_conv")
        elif kind == "cat":
            first = g.make_node("Concat", [a, pick()], {"axis": 1}, name=f"b{i}_cat")
            first.outputs[0].shape = (1, 2 * channels, size, size)
            last = conv(first.outputs[0], 2 * channels, 1, f"b{i}_mix")
        else:
            half = channels // 2
            sizes = g.add_constant(f"b{i}_sizes", np.array([half, channels - half], np.int64))
            first = g.make_node("Split", [a, sizes], {"axis": 1}, num_outputs=2, name=f"b{i}_split")
            first.outputs[0].shape = (1, half, size, size)
            first.outputs[1].shape = (1, channels - half, size, size)
            r = g.make_node("Relu", [first.outputs[1]], name=f"b{i}_relu")
            r.outputs[0].shape = first.outputs[1].shape
            last = g.make_node("Concat", [first.outputs[0], r.outputs[0]], {"axis": 1}, name=f"b{i}_join")
            last.outputs[0].shape = shape
        outs.append(last.outputs[0])
        firsts.append(first)
    sinks = [outs[i] for i in range(n) if not read[i]]
    if len(sinks) > 1:
        y = g.make_node("Sum", sinks, name="out_sum").outputs[0]
        y.shape = shape
    else:
        y = sinks[0]
    extra = [outs[int(j)] for j in rng.choice(n, size=min(extra_outputs, n), replace=False)]
    g.outputs = [y] + [v for v in extra if v is not y]
    for _ in range(ctrl_edges):
        a, b = sorted(int(v) for v in rng.choice(n, size=2, replace=False))
        g.add_control_edge(outs[a].producer, firsts[b])
    return g
