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


def constant_derived(v: Value | None, memo: dict[Node, bool] | None = None) -> bool:
    """``v`` is a constant or computed from constants alone (a weight's
    DequantizeLinear, the split pass's pieces and Concat of a weight, ...). O(size of the
    subgraph behind ``v`` it has to look at), memoised per node in ``memo``; iterative, so a
    graph thousands of nodes deep does not exhaust Python's stack (the int8 EfficientNet-B0
    split for 128 KiB cores ended in a RecursionError)."""
    if v is None or v.is_constant:
        return True
    p = v.producer
    if p is None or p.control_preds:
        return False
    memo = {} if memo is None else memo
    stack = [p]
    while stack:
        n = stack[-1]
        if n in memo:
            stack.pop()
            continue
        result, pending = True, None
        for x in n.inputs:
            if x is None or x.is_constant:
                continue
            q = x.producer
            if q is None or q.control_preds or memo.get(q) is False:
                result = False
                break
            if q not in memo:
                pending = q
                break
        if pending is not None:
            stack.append(pending)  # n is looked at again once its input is known
            continue
        memo[n] = result
        stack.pop()
    return memo[p]


def dequantizes(node: Node) -> bool:
    """``node`` is a DequantizeLinear that travels with its readers (:func:`extract`): a
    range reading its float output computes it again from the integers. O(1)."""
    return node.op_type == "DequantizeLinear" and not node.domain and not node.control_preds


def travels(node: Node, memo: dict[Node, bool] | None = None) -> bool:
    """``node`` is copied into every later range that reads its output (:func:`extract`):
    computed from constants alone (:func:`constant_derived`) or a DequantizeLinear
    (:func:`dequantizes`). O(size of the constant subgraph behind its inputs)."""
    return not node.control_preds and (dequantizes(node) or all(constant_derived(v, memo) for v in node.inputs))


def read_later(v: Value, later: set[Node]) -> bool:
    """Whether a node of ``later`` reads ``v``, directly or through a DequantizeLinear that
    travels to it (:func:`dequantizes`). O(readers)."""
    for u in v.uses():
        if u.node in later:
            return True
        if dequantizes(u.node) and any(w.node in later for o in u.node.outputs for w in o.uses()):
            return True
    return False


def extract(graph: Graph, order: list[Node], piece: Piece, name: str | None = None) -> Graph:
    """The subgraph of ``order[piece.start:piece.end]`` as a graph of its own (values,
    node names and attributes kept; control edges inside the piece kept, those to other
    pieces are implied by the serial order).

    Constants travel with their readers, and so do the nodes computed from constants alone
    (:func:`constant_derived`): a piece reading such a value from an earlier piece holds its
    own copy of the nodes computing it, and no piece outputs one unless the model does. So
    no weight crosses a cut through DRAM (a weight the split pass cut into pieces and
    concatenated, read by the pieces of a convolution on both sides of a cut, made every
    range between them fail on resident weights). O(nodes + edges of the piece + the
    constant subgraphs it reads).

    A DequantizeLinear travels the same way (as ONNX Runtime's ``EnsureUniqueDQForNodeUnit``
    gives every reader its own): a range reading its float output holds its own copy and
    reads the integers, so a quantized tensor crosses a cut as integers, and every
    ``DequantizeLinear -> op -> QuantizeLinear`` pattern of a range is whole, which the
    backend fuses into an integer operator (the float output crossing made the op run in
    float, on four bytes per element).
    """
    nodes = order[piece.start:piece.end]
    inside = set(nodes)
    later = set(order[piece.end:])
    outs = set(graph.outputs)
    sub = Graph(name or f"{graph.name}_{piece.start}_{piece.end}")
    sub.opset = graph.opset
    sub.metadata = dict(graph.metadata)
    made: dict[Value, Value] = {}
    memo: dict[Node, bool] = {}
    copies: dict[Node, Node] = {}

    def copy_node(n: Node) -> None:
        ins = [value(v) for v in n.inputs]
        new_outs = [Value(v.name, v.shape, v.dtype) for v in n.outputs]
        for old, new in zip(n.outputs, new_outs, strict=True):
            made[old] = new
        copy = Node(n.op_type, ins, new_outs, n.attrs, name=n.name, domain=n.domain)
        copy.meta = dict(n.meta)
        sub.add_node(copy)
        copies[n] = copy

    def value(v: Value | None) -> Value | None:
        if v is None:
            return None
        hit = made.get(v)
        if hit is None:
            if v.is_constant:
                hit = made[v] = sub.add_constant(v.name, v.const)
            elif v.producer is not None and v.producer not in inside and travels(v.producer, memo):
                copy_node(v.producer)  # its inputs first, recursively
                hit = made[v]
            else:
                hit = made[v] = sub.add_input(v.name, v.shape, v.dtype)
        return hit

    for n in nodes:
        copy_node(n)
    for n in nodes:
        for p in n.control_preds:
            if p in inside:
                sub.add_control_edge(copies[p], copies[n])
    for n in nodes:
        for v in n.outputs:
            if v in outs or (read_later(v, later) and not travels(n, memo)):
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
