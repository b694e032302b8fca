"""Step 3 of lowering, *Order*: each core's tasks in the order of the M3 search, and one
global order (the positions) consistent with all of them.

For each core, the M3 search (:func:`corefold.passes.order.order_graph`) orders the
core's tasks on the core's units: it gets a small IR graph of those tasks, whose inputs
are the tensors other cores or DRAM provide, with a control edge ``a => b`` wherever ``b``
depends on ``a`` through other cores (so its order is a linear extension of the whole
graph restricted to the core), costs from the task table, and resident weights that cost
no transfer. The budget is shared by the cores in proportion to their tasks.

The programs are deadlock-free only if one global order contains every core's order:
the union of the graph's edges and each core's chain must be acyclic. It is checked
(Kahn, O(V + E)); a core whose order would close a cycle keeps the list-scheduling order
(by estimated start), which always fits. The positions are that global order.
"""

from __future__ import annotations

import heapq

import numpy as np

from corefold.backend.executable import Core
from corefold.backend.lgraph import LoweredGraph, node_edges
from corefold.backend.place import Clustering
from corefold.target import Target


def _predecessors(lg: LoweredGraph) -> list[list[int]]:
    return [list(e) for e in node_edges(lg)]


def _global_order(n: int, preds: list[list[int]], chains: list[list[int]], start: np.ndarray) -> list[int] | None:
    """A topological order of graph edges plus chain edges (earliest start first), or None
    if they form a cycle. O((V + E) log V)."""
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for t in range(n):
        for p in preds[t]:
            succ[p].append(t)
            indeg[t] += 1
    for chain in chains:
        for a, b in zip(chain, chain[1:], strict=False):
            succ[a].append(b)
            indeg[b] += 1
    heap = [(float(start[t]), t) for t in range(n) if indeg[t] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, t = heapq.heappop(heap)
        out.append(t)
        for s in succ[t]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (float(start[s]), s))
    return out if len(out) == n else None


def order_tasks(lg: LoweredGraph, cl: Clustering, core_of: list[Core], target: Target,
                budget_seconds: float, arrival: np.ndarray | None = None) -> tuple[list[int], dict]:
    """The position of every task in the global order, and a report.

    Each core's order is the M3 search's when ``budget_seconds > 0`` (module docstring) and
    the search finds it faster than the list-scheduling order on the core, else the
    list-scheduling order.
    """
    n = len(lg.tasks)
    preds = _predecessors(lg)
    by_core: dict[Core, list[int]] = {}
    for t in sorted(range(n), key=lambda t: (cl.start[t], t)):
        by_core.setdefault(core_of[t], []).append(t)
    report = {"searched_cores": 0, "kept_cores": 0, "improved_cores": 0}
    chains = list(by_core.values())
    if budget_seconds > 0:
        from corefold.backend.core_order import search_core_order

        total = max(1, n)
        for core, tasks in list(by_core.items()):
            if len(tasks) < 3:
                continue
            share = budget_seconds * len(tasks) / total
            found, improved = search_core_order(lg, tasks, preds, core_of, core, target, share,
                                                cl.end if arrival is None else arrival)
            report["searched_cores"] += 1
            if found == tasks or not improved:
                # NOTE: an order the search finds no faster is not taken: it is no better on
                # the core, and another order on one core moves the positions, so the SRAM
                # plan and every core's program (taking every different order: int8 SqueezeNet
                # searched 78.7 us against the list's 62.1; taking the faster ones only, 70.7)
                continue  # the list order: nothing to check
            trial = dict(by_core)
            trial[core] = found
            if _global_order(n, preds, list(trial.values()), cl.start) is None:
                report["kept_cores"] += 1
                continue
            by_core[core] = found
            report["improved_cores"] += 1
        chains = list(by_core.values())
    order = _global_order(n, preds, chains, cl.start)
    if order is None:  # pragma: no cover - the list-scheduling chains follow the start times
        order = sorted(range(n), key=lambda t: (cl.start[t], t))
    position = [0] * n
    for i, t in enumerate(order):
        position[t] = i
    return position, report
