"""The M3 order search on one core's tasks (used by :mod:`corefold.backend.order`).

The core's tasks become a small IR graph in list-scheduling order: a node per task, the
op type and a cost taken from the task table (unit kind and seconds; resident weights cost
no transfer, so they are left out); a node reads the outputs of the core's own producers
and one graph input holding what other cores or DRAM send it (moved at the NoC link
bandwidth); a control edge ``a => b`` joins tasks of the core linked only through other
cores. :func:`corefold.passes.order.order_graph` searches it.
Cost: O(V + E) to build, plus the search's budget.
"""

from __future__ import annotations

import numpy as np

from corefold.backend.executable import Core
from corefold.backend.lgraph import LoweredGraph
from corefold.cost.model import OpCost
from corefold.ir import Graph, Node, Value
from corefold.target import Target


def _remote_ancestors(p: int, preds: list[list[int]], local: set[int], memo: dict[int, frozenset]) -> frozenset:
    """The nearest tasks of ``local`` that task ``p`` (not local) depends on, through tasks
    that are not local; memoised, so O(V + E) over all calls (times the set sizes)."""
    stack = [(p, False)]
    while stack:
        x, expanded = stack.pop()
        if x in memo:
            continue
        if expanded:
            found: set[int] = set()
            for q in preds[x]:
                found |= {q} if q in local else memo[q]
            memo[x] = frozenset(found)
        else:
            stack.append((x, True))
            stack.extend((q, False) for q in preds[x] if q not in local and q not in memo)
    return memo[p]


def search_core_order(lg: LoweredGraph, tasks: list[int], preds: list[list[int]], core_of: list[Core],
                      core: Core, target: Target, budget_seconds: float,
                      arrival: np.ndarray | None = None) -> tuple[list[int], bool]:
    """The M3 order of ``tasks`` (all on ``core``, given in list-scheduling order) and
    whether it beats that order on the M3 simulator.

    ``arrival[t]``, the clustering's estimated end of each task, gives each task a release
    time: the latest estimated end of the tasks on other cores it reads (its remote data
    cannot arrive earlier), so the search does not issue first what waits longest."""
    from corefold.passes.order import OrderSettings, order_graph

    local = set(tasks)
    release: dict[int, float] = {}
    g = Graph(f"core_{core[0]}_{core[1]}")
    out_of: dict[int, Value] = {}
    nodes: dict[int, Node] = {}
    memo: dict[int, frozenset] = {}
    for t in tasks:
        task = lg.tasks[t]
        ins: list[Value] = [out_of[p] for p in preds[t] if p in local]
        remote = 0
        for o in task.inputs:
            if o is None:
                continue
            for pc in o.pieces:
                ph = lg.phys[pc.phys]
                if ph.kind == "input" or (ph.kind == "op" and core_of[ph.task] != core):
                    remote += pc.elements * ph.dtype.itemsize
        if remote:
            ins.append(g.add_input(f"in_{t}", (remote,), "uint8"))
        if arrival is not None:
            release[t] = max((float(arrival[p]) for p in preds[t] if p not in local), default=0.0)
        out = Value(f"t{t}", (max(1, sum(lg.phys[o].nbytes for o in task.outputs)),), "uint8")
        node = Node(task.op.op_type if task.op is not None else "Identity", ins, [out], name=f"task{t}")
        node.meta["task"] = t
        g.add_node(node)
        nodes[t] = node
        out_of[t] = out
        linked = set()
        for p in preds[t]:
            if p not in local:
                linked |= _remote_ancestors(p, preds, local, memo)
        for a in sorted(linked):
            if a in nodes and a not in preds[t]:
                g.add_control_edge(nodes[a], node)
    g.outputs = [v for v in out_of.values() if not v.uses()]

    def cost_fn(node: Node, _target: Target) -> OpCost:
        task = lg.tasks[node.meta["task"]]
        work = task.op.work if task.op is not None else 0.0
        return OpCost(node.op_type, 0, 0, 0, 0, 0, task.unit, work, task.seconds)

    link = target.noc_link_bytes_per_cycle * target.clock_hz

    def transfer_fn(nbytes: float, _target: Target) -> float:
        return float(nbytes) / link

    settings = OrderSettings(budget_seconds=budget_seconds, exhaustive_limit=200, samples=16, beam_width=16)
    res = order_graph(g, target, settings, cost_fn=cost_fn, transfer_fn=transfer_fn,
                      release_fn=lambda node: release.get(node.meta["task"], 0.0), bound=False)
    order = [n.meta["task"] for n in res.order]
    return order, res.makespan_after < res.makespan_before
