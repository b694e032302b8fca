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
    bound   = max(CP, max_u W_u)

Every term is a valid bound: an operator starts after its external load (a DMA task
starting at time >= 0) and after its predecessors finish (and a forced spill is stored
then reloaded in between), outputs are stored after it finishes; each unit runs one task
at a time and a task never splits across units. Other spills depend on the order and are
left out. O(V + E).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


def lower_bound(problem: ScheduleProblem) -> LowerBound:
    """The makespan lower bound of ``problem`` (see the module docstring)."""
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
    return LowerBound(max(terms.values()), terms)
