"""Liveness: when each value of a graph is born and when it dies, in one node order.

The one liveness analysis the executor (to free tensors), the cost model (peak live
bytes) and the memory planners share. O(V + E).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from corefold.ir.graph import Graph
from corefold.ir.nodes import Node
from corefold.ir.values import Value


@dataclass
class Liveness:
    """Per non-constant value: ``born`` (index in ``order`` of its producer, -1 for graph
    inputs) and ``dies`` (index of its last reader; ``len(order)`` for graph outputs and
    values that must stay, ``born`` for a value nobody reads). ``frees[i]``: the values
    whose last reader is node ``i`` (so they may be freed right after it runs)."""

    order: list[Node]
    born: dict[Value, int]
    dies: dict[Value, int]
    frees: list[list[Value]]

    def peak_bytes(self) -> int:
        """The largest total of live values' bytes over the order: a value occupies memory
        from before its producer runs until after its last reader has run."""
        n = len(self.order)
        delta = [0] * (n + 2)
        for v, b in self.born.items():
            d = self.dies[v]
            start = max(b, 0)
            delta[start] += v.nbytes
            delta[min(d, n) + 1] -= v.nbytes
        live = peak = 0
        for i in range(n + 1):
            live += delta[i]
            peak = max(peak, live)
        return peak


def liveness(graph: Graph, order: Sequence[Node] | None = None, keep: Sequence[Value] = ()) -> Liveness:
    """Birth and death of every non-constant value in ``order`` (default: the stable
    topological order). Graph outputs and ``keep`` live to the end."""
    order = list(order) if order is not None else graph.topological_order()
    end = len(order)
    born: dict[Value, int] = {v: -1 for v in graph.inputs}
    dies: dict[Value, int] = {v: -1 for v in graph.inputs}
    for i, n in enumerate(order):
        for v in n.inputs:
            if v is not None and not v.is_constant:
                dies[v] = i
        for o in n.outputs:
            born[o] = i
            dies.setdefault(o, i)
    for v in list(graph.outputs) + list(keep):
        if v in born:
            dies[v] = end
    frees: list[list[Value]] = [[] for _ in range(end)]
    for v, d in dies.items():
        if 0 <= d < end:
            frees[d].append(v)
    return Liveness(order, born, dies, frees)
