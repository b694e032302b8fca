"""A lower bound on the makespan of any issue order (the simulator's model, simulator.py).

With ``c(o)`` the compute time of operator ``o`` on its unit kind ``u(o)``, ``e(o)`` the
DMA time of its external loads (weights, graph inputs: order independent, always loaded)
``s(o)`` the DMA time of storing its graph outputs, and ``F`` the values bigger than the
memory budget ``B`` (spilled in every order: stored once, ``t(v)``, and loaded by each of
their ``uses(v)`` consumers)::

    est(o)  = max(e(o), max_{p pred of o} est(p) + c(p) + [p -> o through v in F] 2 t(v))
    CP      = max_o est(o) + c(o) + s(o)                       (critical path)
    W_u     = (sum_{u(o) = u} c(o) + [u = dma] (sum_o (e(o) + s(o))
               + sum_{v in F} (uses(v) + [v not a graph output]) t(v))) / n_u
    seg_j   = max(CP_j, max_u sum_{u(o) = u, o in S_j} c(o) / n_u)
    bound   = max(CP, max_u W_u, sum_j seg_j)

Every term is a valid bound: an operator starts after its external load (a DMA task
starting at time >= 0) and after its predecessors finish (and a forced spill is stored
then reloaded in between), outputs are stored after it finishes; each unit runs one task
at a time and a task never splits across units. Other spills depend on the order and are
left out. The last term uses the key-node segments ``S_j`` (key_nodes.py): every operator
of ``S_j`` starts after the key node closing ``S_{j-1}`` ends and ends before the one
closing ``S_j`` starts, so the segments' operators run in disjoint time windows, each at
least as long as the segment's own critical path ``CP_j`` (compute times only) and its
per-kind work. O(V + E).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from corefold.ir import Graph
from corefold.passes.order.key_nodes import segment_index
from corefold.passes.order.simulator import ScheduleProblem
from corefold.target.model import UNIT_KINDS


@dataclass(frozen=True)
class LowerBound:
    """The bound, its terms (``critical_path`` and ``work_<kind>``) and the binding term."""

    value: float
    terms: dict[str, float]

    @property
    def binding(self) -> str:
        return max(self.terms, key=lambda k: self.terms[k])


def lower_bound(problem: ScheduleProblem, graph: Graph | None = None) -> LowerBound:
    """The makespan lower bound of ``problem`` (see the module docstring); the segment term
    needs the ``graph`` the problem was built from."""
    n = len(problem.nodes)
    c, e, s = problem.duration, problem.external_load, problem.output_store
    (in_ptr, in_val, out_ptr, out_val, vbytes, vload, vuses, vis_out,
     budget) = (problem.arrays[k] for k in (4, 5, 6, 7, 10, 11, 12, 13, 16))
    producer = np.empty(len(vbytes), np.int64)
    for i in range(n):
        producer[out_val[out_ptr[i]:out_ptr[i + 1]]] = i
    forced = (vbytes > budget[0]) & (vuses > 0)
    est = np.zeros(n)
    for i in range(n):  # nodes are in topological order
        t = e[i]
        for p in problem.pred_idx[problem.pred_ptr[i]:problem.pred_ptr[i + 1]]:
            t = max(t, est[p] + c[p])
        for v in in_val[in_ptr[i]:in_ptr[i + 1]]:
            if forced[v]:
                p = producer[v]
                t = max(t, est[p] + c[p] + 2 * vload[v])
        est[i] = t
    terms = {"critical_path": float((est + c + s).max()) if n else 0.0}
    for k, kind in enumerate(UNIT_KINDS):
        work = float(c[problem.kind == k].sum())
        if kind == "dma":
            work += float(e.sum() + s.sum())
            work += float((vload[forced] * (vuses[forced] + ~vis_out[forced])).sum())
        terms[f"work_{kind}"] = work / int(problem.kind_count[k])
    if graph is not None and n:
        seg = np.array([segment_index(graph)[node] for node in problem.nodes], np.int64)
        local = np.zeros(n)  # longest compute path inside the node's segment, ending at it
        for i in range(n):
            t = 0.0
            for p in problem.pred_idx[problem.pred_ptr[i]:problem.pred_ptr[i + 1]]:
                if seg[p] == seg[i]:
                    t = max(t, local[p])
            local[i] = t + c[i]
        nseg = int(seg.max()) + 1
        cp_j = np.zeros(nseg)
        np.maximum.at(cp_j, seg, local)
        seg_j = cp_j
        for k in range(len(UNIT_KINDS)):
            work_j = np.zeros(nseg)
            np.add.at(work_j, seg[problem.kind == k], c[problem.kind == k])
            seg_j = np.maximum(seg_j, work_j / int(problem.kind_count[k]))
        terms["segment_sum"] = float(seg_j.sum())
    return LowerBound(max(terms.values()), terms)
