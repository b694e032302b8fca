"""A lower bound on the makespan of every issue order (the simulator's model, simulator.py).

Notation: ``c(o)`` compute time of operator ``o`` on its unit kind ``u(o)`` (``n_u`` units
of kind ``u``), ``e(o)`` DMA time of its external loads (weights, graph inputs), ``s(o)``
DMA time of storing its graph outputs, ``t(v)`` DMA time of moving value ``v``,
``uses(v)`` its consumers, ``B`` the SRAM budget. In an order, a value is either resident
or *spilled* (``x_v = 1``): stored once after its producer (unless it is a graph output,
whose store ``s`` is paid anyway) and reloaded by each consumer, so it costs
``cost(v) = t(v) (uses(v) + [v not a graph output])`` of DMA time.

**What every order must spill.** When ``o`` is issued, the values ``V_o`` below are all
live: its activation inputs, its consumed outputs, and every value made by an ancestor of
``o`` and read by ``o`` or a descendant of ``o`` (a skip connection over ``o``). The
simulator keeps the resident live bytes at most ``B`` at all times, so the spilled ones
must cover the excess ``E_o = sum_{v in V_o} b(v) - B``:

    sum_{v in V_o} min(b(v), E_o) x_v >= E_o        (for every o with E_o > 0)

(the ``min`` is the usual tightening of a 0/1 cover; a value bigger than ``B`` gets
``x_v = 1``). At a key node ``V_o`` is exactly what crosses it.

**What no order may spill.** The simulator spills output ``v`` of ``q`` only when the
resident live bytes ``L`` plus ``b(v)`` exceed ``B`` at ``q``'s issue; ``L`` is at most the
resident part of the values ``P_v`` that *may* be live then (made by a node that is not
``q`` nor a descendant, read by a node that is not a strict ancestor; ``q``'s earlier
outputs), so

    sum_{w in P_v} b(w) (1 - x_w) >= (B - b(v) + 1) x_v

(and ``x_v = 0`` outright when all of ``P_v`` and ``v`` fit).

**Times.** For any order's spill vector ``x`` and schedule, with ``est(o)`` the start of
``o``, ``D(v, o) = t(v) [store] + t(v) [reload] + e(o) + sum of o's other inputs bigger
than B`` (a spilled input delays ``o``'s whole load until its store ends) and ``W_j`` the
end of key-node window ``j``:

    est(o) >= e(o);  est(o) >= est(p) + c(p) + D(v, o) x_v      (edge p -> o through v)
    M >= est(o) + c(o) + s(o)                                    (critical_path)
    M >= (sum_{u(o)=u} c(o) + [u = dma] (sum_o e(o) + s(o) + sum_v cost(v) x_v)) / n_u
    M >= W_last                                                  (segment_sum)

Key nodes ``k_1 < k_2 < ...`` (key_nodes.py) cut time into disjoint windows: every
operator of segment ``j`` starts after ``k_j`` ends and ends when ``k_{j+1}`` does. Inside
window ``j`` (``W_j - W_{j-1}``): its own critical path (``est`` restarted at 0, the edge
terms as above), its compute per kind, and the DMA that cannot leave it: the store and
reloads of values made in it (or by ``k_j``) and read in it, the loads that wait for them
(``e(o) y_o`` with ``y_o >= x_v``), and for the first and last window the external loads
and output stores. With one DMA unit the DMA queue runs the segments' tasks block by
block in issue order, which ties the windows to the DMA work (``dma_queue``, see
bound_lp.py's ``_dma_blocks``): a block cannot start before the previous one ends, nor
before the window opens when its first task waits for the opening key node, and a key
node that is the last DMA task of its block (a DMA operator, or one that must load) ends
its window after its block.

Where the search space is small enough, a window is also solved outright
(``window_search``, bound_windows.py): by branch and bound over the segment's orders from
the idle core at the opening key node, which bounds ``W_j - W_{j-1}`` from below.

Every constraint holds for the true 0/1 ``x`` of every order, so the mixed-integer program
``min M`` (x binary; HiGHS via scipy, stopped after a fixed number of branch-and-bound
nodes, taking its dual bound) is a lower bound of every order's makespan. The bound is
that value less 1e-6 relative (solver tolerance), or the same terms with ``x`` = forced
spills only, evaluated in closed form, when that is higher; ``terms`` are each family's
value at the solution (each at most the bound). If HiGHS fails, the bound is the closed
form alone. Tests check every family alone against all orders of small random graphs.

Cost: one sparse MILP with O(V + E + sum_v |P_v|) variables and rows, plus
O(m * (E_j + V_j)) per segment of m nodes for the live sets (reachability by boolean
matrices, segments up to 3000 nodes; bigger ones use only inputs and outputs), plus the
windows' branch and bound (``window_nodes`` nodes each, O(m deg) per node).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from corefold.ir import Graph
from corefold.passes.order.key_nodes import key_nodes, segment_index
from corefold.passes.order.simulator import ScheduleProblem
from corefold.target.model import UNIT_KINDS

#: Relative margin taken off the LP optimum for the solver's tolerances.
LP_MARGIN = 1e-6
#: Segments with more nodes use only inputs and outputs in their live sets.
REACH_LIMIT = 3000
#: Term families of the LP (``lower_bound(..., families=...)`` keeps a subset, for tests).
FAMILIES = ("critical_path", "work", "segment_sum", "dma_queue", "window_search")


@dataclass(frozen=True)
class LowerBound:
    """The bound, its terms (``critical_path``, ``work_<kind>``, ``segment_sum``) and the
    binding term (the largest)."""

    value: float
    terms: dict[str, float]

    @property
    def binding(self) -> str:
        return max(self.terms, key=lambda k: self.terms[k])


@dataclass
class _Values:
    producer: np.ndarray
    consumers: list[list[int]]
    forced: np.ndarray
    cost: np.ndarray


def _values(problem: ScheduleProblem) -> _Values:
    n = len(problem.nodes)
    in_ptr, in_val, out_ptr, out_val, vbytes, vload, vuses, vis_out, budget = (
        problem.arrays[k] for k in (4, 5, 6, 7, 10, 11, 12, 13, 16))
    producer = np.empty(len(vbytes), np.int64)
    consumers: list[list[int]] = [[] for _ in range(len(vbytes))]
    for i in range(n):
        producer[out_val[out_ptr[i]:out_ptr[i + 1]]] = i
        for v in in_val[in_ptr[i]:in_ptr[i + 1]]:
            consumers[v].append(i)
    forced = (vbytes > budget[0]) & (vuses > 0)
    cost = vload * (vuses + ~vis_out)
    return _Values(producer, consumers, forced, cost)


def live_sets(problem: ScheduleProblem, seg: np.ndarray) -> tuple[list[np.ndarray], list[list]]:
    """For every node ``o``: ``V_o`` of the module docstring (values live at ``o`` in every
    order), and for each consumed output ``v`` of ``o`` the values that may be live and
    resident when ``v``'s residency is decided (made by a node that is not ``o`` nor a
    descendant of it, with a consumer that is not a strict ancestor of ``o``; plus ``o``'s
    earlier outputs). Both only hold values of ``o``'s segment and of the key node opening
    it, by segment numbers ``seg``. O(m * (E_j + V_j)) per segment of m nodes."""
    n = len(problem.nodes)
    vals = _values(problem)
    in_ptr, in_val, out_ptr, out_val, vuses = (problem.arrays[k] for k in (4, 5, 6, 7, 12))
    certain: list[np.ndarray] = [np.zeros(0, np.int64)] * n
    possible: list[list] = [[] for _ in range(n)]
    for j in range(int(seg.max()) + 1 if n else 0):
        members = np.flatnonzero(seg == j)
        # the key node opening the segment: the producer of the members' outside inputs
        outside = {int(vals.producer[v]) for i in members for v in in_val[in_ptr[i]:in_ptr[i + 1]]
                   if seg[vals.producer[v]] != j}
        local = np.array(sorted(outside) + list(members), np.int64)
        where = {int(x): k for k, x in enumerate(local)}
        m = len(local)
        own = {}
        for i in members:
            own[int(i)] = set(int(v) for v in in_val[in_ptr[i]:in_ptr[i + 1]]) | set(
                int(v) for v in out_val[out_ptr[i]:out_ptr[i + 1]] if vuses[v] > 0)
        if m <= REACH_LIMIT:
            reach = np.eye(m, dtype=np.bool_)  # reach[a, b]: a == b or a is an ancestor of b
            for b in range(m):
                for p in problem.pred_idx[problem.pred_ptr[local[b]]:problem.pred_ptr[local[b] + 1]]:
                    if int(p) in where:
                        reach[:, b] |= reach[:, where[int(p)]]
            strict = reach & ~np.eye(m, dtype=np.bool_)
            made = [int(v) for x in local for v in out_val[out_ptr[x]:out_ptr[x + 1]] if vuses[v] > 0]
            maybe_live = np.zeros((len(made), m), np.bool_)
            for r, v in enumerate(made):
                p = where[int(vals.producer[v])]
                cons = [where[c] for c in vals.consumers[v] if c in where]
                later = len(cons) < len(vals.consumers[v])  # read in a later segment too
                if cons:
                    live = reach[p] & reach[:, cons].any(axis=1)
                    live[p] = False
                    for b in np.flatnonzero(live):
                        if local[b] in own:
                            own[int(local[b])].add(v)
                # may be live at b: p is issued before b is possible, a consumer after b too
                maybe_live[r] = ~reach[:, p]
                maybe_live[r, p] = False
                if not later:
                    maybe_live[r] &= ~strict[cons].all(axis=0) if cons else False
            made_arr = np.array(made, np.int64)
            for i in members:
                b = where[int(i)]
                others = made_arr[maybe_live[:, b]] if len(made) else made_arr
                earlier: list[int] = []
                for v in out_val[out_ptr[i]:out_ptr[i + 1]]:
                    if vuses[v] > 0:
                        possible[int(i)].append((int(v), np.concatenate([others, np.array(earlier, np.int64)])))
                        earlier.append(int(v))
        for i in members:
            certain[int(i)] = np.array(sorted(own[int(i)]), np.int64)
    return certain, possible


def window_floors(problem: ScheduleProblem, seg: np.ndarray, closing: list[int], nodes: int) -> dict[int, float]:
    """Window ``j`` -> a lower bound of its length from bound_windows.py, where it applies
    (``nodes`` branch-and-bound nodes per window of at most 24 operators, a tenth above)."""
    from corefold.passes.order.bound_windows import window_floor

    out = {}
    for j in range(len(closing)):
        members = np.flatnonzero(seg == j)
        if len(members) < 2:
            continue
        # NOTE: past 24 operators the search seldom closes a window; its frontier's bound,
        # reached early, is what it gives, so a tenth of the nodes does
        budget = nodes if len(members) <= 24 else max(1, nodes // 10)
        floor = window_floor(problem, members, closing[j - 1] if j > 0 else -1, closing[j], budget)
        if floor is not None:
            out[j] = floor
    return out


def closing_key_nodes(problem: ScheduleProblem, graph: Graph, seg: np.ndarray) -> list[int]:
    """The node index of the key node closing each segment (-1 when the last has none)."""
    out = [-1] * (int(seg.max()) + 1)
    for k in key_nodes(graph):
        i = problem.index[k]
        out[int(seg[i])] = i
    return out


def lower_bound(problem: ScheduleProblem, graph: Graph | None = None,
                families: tuple[str, ...] = FAMILIES, window_nodes: int = 20_000) -> LowerBound:
    """The makespan lower bound of ``problem`` (see the module docstring).

    The window terms and the skip-connection live sets need the ``graph`` the problem was
    built from (without it, every node is its own window-free segment). ``families``
    keeps a subset of the LP's term families (tests check each one alone);
    ``window_nodes`` caps the branch and bound of each key-node window (bound_windows.py;
    0 leaves that term out). Any cap gives a valid bound; a bigger one a tighter one.
    """
    n = len(problem.nodes)
    if n == 0:
        return LowerBound(0.0, {"critical_path": 0.0})
    if graph is not None:
        index = segment_index(graph)
        seg = np.array([index[node] for node in problem.nodes], np.int64)
    else:
        seg = np.zeros(n, np.int64)
    try:
        from corefold.passes.order.bound_lp import solve_bound
    except ImportError:  # pragma: no cover - scipy is a dependency
        solve_bound = None
    if solve_bound is not None:
        certain, possible = live_sets(problem, seg)
        closing = closing_key_nodes(problem, graph, seg) if graph is not None else [-1]
        floors = (window_floors(problem, seg, closing, window_nodes)
                  if graph is not None and "window_search" in families and window_nodes > 0 else {})
        sol = solve_bound(problem, seg, _values(problem), certain, possible, closing, families,
                          windows=graph is not None, floors=floors)
        if sol is not None:
            exact = closed_form_bound(problem, seg if graph is not None else None)
            value = max(sol.pop("M") * (1 - LP_MARGIN), exact.value)
            terms = {k: min(v, value) for k, v in sol.items()}
            for k, v in exact.terms.items():  # closed forms are exact: keep them when higher
                terms[k] = max(terms.get(k, 0.0), v)
            return LowerBound(value, terms)
    return closed_form_bound(problem, seg if graph is not None else None)


def closed_form_bound(problem: ScheduleProblem, seg: np.ndarray | None) -> LowerBound:
    """The bound with ``x`` = the forced spills (values bigger than B) only: the LP's terms
    without the cover constraints, evaluated directly (segment numbers ``seg`` for the
    window term; None leaves it out). O(V + E)."""
    n = len(problem.nodes)
    vals = _values(problem)
    c, e, s = problem.duration, problem.external_load, problem.output_store
    in_ptr, in_val, vload = problem.arrays[4], problem.arrays[5], problem.arrays[11]
    est = np.zeros(n)
    for i in range(n):  # nodes are in topological order
        t = e[i]
        for p in problem.pred_idx[problem.pred_ptr[i]:problem.pred_ptr[i + 1]]:
            t = max(t, est[p] + c[p])
        for v in in_val[in_ptr[i]:in_ptr[i + 1]]:
            if vals.forced[v]:
                p = vals.producer[v]
                t = max(t, est[p] + c[p] + 2 * vload[v])
        est[i] = t
    terms = {"critical_path": float((est + c + s).max())}
    for k, kind in enumerate(UNIT_KINDS):
        work = float(c[problem.kind == k].sum())
        if kind == "dma":
            work += float(e.sum() + s.sum() + vals.cost[vals.forced].sum())
        terms[f"work_{kind}"] = work / int(problem.kind_count[k])
    if seg is not None:
        local = np.zeros(n)  # longest compute path inside the node's segment, ending at it
        for i in range(n):
            t = 0.0
            for p in problem.pred_idx[problem.pred_ptr[i]:problem.pred_ptr[i + 1]]:
                if seg[p] == seg[i]:
                    t = max(t, local[p])
            local[i] = t + c[i]
        nseg = int(seg.max()) + 1
        seg_j = np.zeros(nseg)
        np.maximum.at(seg_j, seg, local)
        for k in range(len(UNIT_KINDS)):
            work_j = np.zeros(nseg)
            np.add.at(work_j, seg[problem.kind == k], c[problem.kind == k])
            seg_j = np.maximum(seg_j, work_j / int(problem.kind_count[k]))
        terms["segment_sum"] = float(seg_j.sum())
    return LowerBound(max(terms.values()), terms)
