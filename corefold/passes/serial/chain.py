"""A chain of serial subgraphs: contiguous ranges of one topological order.

A :class:`Piece` ``[start, end)`` of the order becomes a graph of its own with
:func:`extract`: the values it reads from earlier pieces or the model's inputs are its
inputs, the values later pieces read or the model emits are its outputs, constants travel
with their readers. :class:`Attributes` gives each range its summed compute, weights and
node count (the seed's "subgraph attribute parameters", SPEC M1 §7a) from prefix sums in
O(1) per query after an O(V + E) pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from corefold.ir import Graph, Node, Value


@dataclass(frozen=True, order=True)
class Piece:
    """Nodes ``order[start:end]``."""

    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start

    def __add__(self, other: "Piece") -> "Piece":
        if other.start != self.end:
            raise ValueError(f"pieces {self} and {other} are not adjacent")
        return Piece(self.start, other.end)


def extract(graph: Graph, order: list[Node], piece: Piece, name: str | None = None) -> Graph:
    """The subgraph of ``order[piece.start:piece.end]`` as a graph of its own (values,
    node names and attributes kept; control edges inside the piece kept, those to other
    pieces are implied by the serial order). O(nodes + edges of the piece).
    """
    nodes = order[piece.start:piece.end]
    inside = set(nodes)
    later = set(order[piece.end:])
    outs = set(graph.outputs)
    sub = Graph(name or f"{graph.name}_{piece.start}_{piece.end}")
    sub.opset = graph.opset
    sub.metadata = dict(graph.metadata)
    made: dict[Value, Value] = {}

    def value(v: Value | None) -> Value | None:
        if v is None:
            return None
        hit = made.get(v)
        if hit is None:
            if v.is_constant:
                hit = sub.add_constant(v.name, v.const)
            else:
                hit = sub.add_input(v.name, v.shape, v.dtype)
            made[v] = hit
        return hit

    copies: dict[Node, Node] = {}
    for n in nodes:
        ins = [value(v) for v in n.inputs]
        new_outs = [Value(v.name, v.shape, v.dtype) for v in n.outputs]
        for old, new in zip(n.outputs, new_outs, strict=True):
            made[old] = new
        copy = Node(n.op_type, ins, new_outs, n.attrs, name=n.name, domain=n.domain)
        copy.meta = dict(n.meta)
        sub.add_node(copy)
        copies[n] = copy
    for n in nodes:
        for p in n.control_preds:
            if p in inside:
                sub.add_control_edge(copies[p], copies[n])
    for n in nodes:
        for v in n.outputs:
            if v in outs or any(u.node in later for u in v.uses()):
                sub.outputs.append(made[v])
    return sub


@dataclass
class Attributes:
    """Prefix sums over the order: MACs, vector work, weight bytes and node counts, so any
    range's totals are O(1). A constant read by several nodes counts once per reader (an
    overestimate only for shared weights)."""

    macs: np.ndarray
    work: np.ndarray
    weights: np.ndarray
    nodes: np.ndarray

    @staticmethod
    def of(order: list[Node], target=None) -> "Attributes":
        from corefold import ops

        n = len(order)
        macs = np.zeros(n + 1)
        work = np.zeros(n + 1)
        weights = np.zeros(n + 1)
        for i, node in enumerate(order):
            entry = ops.get(node.op_type, node.domain, where=f"node '{node.name}'")
            ins = [None if v is None else (v.shape, v.dtype) for v in node.inputs]
            outs = [(v.shape, v.dtype) for v in node.outputs]
            unit, w, m = ops.work(entry, node.attrs, ins, outs)
            macs[i + 1] = m
            work[i + 1] = w if unit != "dma" else 0.0
            weights[i + 1] = sum(v.nbytes for v in node.inputs if v is not None and v.is_constant)
        return Attributes(np.cumsum(macs), np.cumsum(work), np.cumsum(weights), np.arange(n + 1, dtype=float))

    def total(self, what: str, piece: Piece) -> float:
        a = getattr(self, what)
        return float(a[piece.end] - a[piece.start])
