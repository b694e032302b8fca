"""Where a graph may be cut into serial subgraphs (SPEC M1 §2-4).

A *cut* at position ``k`` of a topological order separates the prefix ``order[:k]`` from
the suffix ``order[k:]``. Every position is a legal serial cut; what makes one better than
another is what crosses it: the values produced before ``k`` and read at or after ``k``.
They become outputs of the earlier subgraph (stored to DRAM or the host) and inputs of the
later one. Graph inputs are read from DRAM by whichever subgraph needs them, and constants
and the nodes computed from them alone travel with their readers (:func:`~corefold.passes.serial.chain.extract`),
so none of them crosses a cut.

A *target node* (the seed's rule, SPEC M1 §3) is a node one of whose outputs is both a
graph output (a "data output node" in the seed's words) and read by a further compute
node: the branch points of multi-exit networks, detectors with several heads, encoders
that emit every layer's state. The seed cuts right after each of them.

:func:`crossing` computes, in one sweep, the number and bytes of crossing values at every
position: a value produced at ``p`` whose last reader is at ``d`` crosses every cut in
``(p, d]``, so a difference array gives all positions in O(V + E).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from corefold.ir import Graph, Node, Value
from corefold.passes.serial.chain import constant_derived, dequantizes, read_later


@dataclass(frozen=True)
class Crossing:
    """Per cut position ``k`` in ``0..n``: ``count[k]`` and ``bytes[k]`` of the values that
    cross it (position 0 and n cut nothing)."""

    count: np.ndarray
    bytes: np.ndarray

    def tensors(self, order: list[Node], k: int) -> list[Value]:
        """The values crossing cut ``k`` (O(V + E))."""
        return crossing_values(order, k)


def positions(order: list[Node]) -> dict[Node, int]:
    return {n: i for i, n in enumerate(order)}


def crossing(graph: Graph, order: list[Node]) -> Crossing:
    """Count and bytes of the values crossing every cut position of ``order``. O(V + E)."""
    pos = positions(order)
    n = len(order)
    dcount = np.zeros(n + 2, np.int64)
    dbytes = np.zeros(n + 2, np.int64)
    moving = travelling_nodes(order)
    for i, node in enumerate(order):
        if node in moving:  # recomputed by each later reader's piece (chain.extract)
            continue
        for v in node.outputs:
            last = max(_reader_positions(v, pos), default=i)
            if last > i:
                dcount[i + 1] += 1
                dcount[last + 1] -= 1
                dbytes[i + 1] += v.nbytes
                dbytes[last + 1] -= v.nbytes
    return Crossing(np.cumsum(dcount)[: n + 1], np.cumsum(dbytes)[: n + 1])


def crossing_values(order: list[Node], k: int) -> list[Value]:
    """Values produced in ``order[:k]`` and read in ``order[k:]``. O(V + E)."""
    after = set(order[k:])
    moving = travelling_nodes(order)
    out = []
    for node in order[:k]:
        if node in moving:
            continue
        for v in node.outputs:
            if read_later(v, after):
                out.append(v)
    return out


def _reader_positions(v: Value, pos: dict[Node, int]):
    """Positions of the nodes reading ``v``, through a DequantizeLinear that travels to its
    readers (:func:`~corefold.passes.serial.chain.dequantizes`)."""
    for u in v.uses():
        if dequantizes(u.node):
            yield from (pos[w.node] for o in u.node.outputs for w in o.uses() if w.node in pos)
        if u.node in pos:
            yield pos[u.node]


def target_nodes(graph: Graph) -> list[Node]:
    """Nodes with an output that is both a graph output and read by another node (SPEC M1
    §3), in file order. O(V + E)."""
    outs = set(graph.outputs)
    found = []
    for node in graph.nodes:
        if any(v in outs and v.uses() for v in node.outputs):
            found.append(node)
    return found


def target_cuts(graph: Graph, order: list[Node]) -> list[int]:
    """The seed's cut positions: right after each target node in ``order`` (sorted, without
    the trivial positions 0 and n)."""
    pos = positions(order)
    n = len(order)
    return sorted({pos[t] + 1 for t in target_nodes(graph) if 0 < pos[t] + 1 < n})


def constant_nodes(order: list[Node]) -> set[Node]:
    """The nodes computed from constants alone (a weight's DequantizeLinear, a Reshape or
    Transpose of a weight, the split pass's pieces and Concat of one, and nodes computed
    from those: :func:`~corefold.passes.serial.chain.constant_derived`'s rule), given a
    topological ``order``. O(V + E)."""
    memo: dict[Node, bool] = {}
    return {n for n in order if not n.control_preds and all(constant_derived(v, memo) for v in n.inputs)}


def travelling_nodes(order: list[Node]) -> set[Node]:
    """The nodes a range reading their output computes again
    (:func:`~corefold.passes.serial.chain.travels`): those computed from constants alone and
    every DequantizeLinear. O(V + E)."""
    return constant_nodes(order) | {n for n in order if dequantizes(n)}


def inside_patterns(order: list[Node]) -> np.ndarray:
    """Per cut position ``k`` in ``0..n``: whether ``k`` falls inside an integer pattern
    ``DequantizeLinear -> op [-> activation] -> QuantizeLinear`` (the patterns of
    :func:`~corefold.passes.quantize.integer.integer_patterns`), between its op and its
    QuantizeLinear. O(V + E).

    A range holding such a pattern only in part writes or reads the op's float output, so
    the backend cannot fuse the op into an integer operator: it runs in float, off the
    integer execution, and its output crosses the cut in four bytes per element instead of
    one. (Its DequantizeLinear nodes travel with their readers, :func:`travelling_nodes`.)"""
    from corefold.passes.quantize.integer import integer_patterns

    pos = positions(order)
    n = len(order)
    diff = np.zeros(n + 2, np.int64)
    graph = order[0].graph if order else None
    for q, (src, _act) in (integer_patterns(graph) if graph is not None else {}).items():
        if src in pos and q in pos and pos[q] > pos[src]:
            diff[pos[src] + 1] += 1
            diff[pos[q] + 1] -= 1
    return np.cumsum(diff)[: n + 1] > 0


def clean_ends(order: list[Node]) -> list[int]:
    """The end positions ``1..n`` of a range that neither fall right after a node that
    travels with its readers (:func:`travelling_nodes`) nor inside an integer pattern
    (:func:`inside_patterns`), ascending.

    A node computed from constants alone outputs a weight that every later reader's range
    computes again (:func:`~corefold.passes.serial.chain.extract`), and so does a
    DequantizeLinear: a range ending after it holds a copy nobody in it reads. With
    :func:`~corefold.passes.serial.partition.constants_beside_readers` they sit just before
    their first reader, so the cut before them is as good in every way. Position ``n`` is
    always kept. O(V + E)."""
    moving = travelling_nodes(order)
    inside = inside_patterns(order)
    n = len(order)
    return [k for k in range(1, n + 1) if k == n or (order[k - 1] not in moving and not inside[k])]
