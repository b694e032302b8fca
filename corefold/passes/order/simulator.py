"""Schedule simulator: the makespan of an issue order on one core's concurrent units.

Model (SPEC M3 §5: T1 transfers + T2 compute, waits from dependences). A core has
``n_u = target.units[u].count`` units of each kind ``u`` in {dma, matrix, vector}; an
operator ``o`` runs on one unit of kind ``u(o)`` (from :func:`corefold.cost.op_cost`) for
``c(o) = compute_seconds``. Operators are issued in the given order; each unit kind keeps an
in-order queue, so an operator never starts before a unit of its kind is free, i.e. before
``min_j free[u, j]`` over the units of its kind at its issue time (units' busy-until times).

Memory. Let ``B = target.core_memory_threshold`` (SRAM minus the reserved buffer). A value
(activation) produced by an operator is *resident* if, at its producer's issue time, the
resident live bytes ``L`` satisfy ``L + bytes(v) <= B``; then ``L += bytes(v)`` until its last
consumer in issue order has been issued. Otherwise it is *spilled*: stored to DRAM after
its producer finishes and reloaded by every consumer. Graph inputs and constants (weights)
live in DRAM and are loaded by every consumer; graph outputs are stored to DRAM.

DMA. One DMA unit moves ``b`` bytes in ``t(b) = n_dma * transfer_seconds(b)`` (each of the
``n_dma`` units gets a fair share ``min(r_dma f, B_dram / n_dma)`` of the bandwidth). For
operator ``o`` with external inputs (weights, graph inputs) ``E(o)`` and spilled
activation inputs ``S(o)``, the load task of length ``l(o) = t(sum_{v in E(o) u S(o)}
bytes(v))`` is issued on the DMA queue just before ``o``; the store of ``o``'s spilled and
graph outputs, ``s(o)``, is issued right after the *next* operator's load (prefetch first,
as a compiler orders the DMA descriptors), or before it when that operator reads one of
them::

    load_start(o)  = max(min_j free[dma, j], max_{v in S(o)} ready(v))
    data_ready(o)  = max(load_start(o) + l(o), max_{v resident input} ready(v),
                         max_{p control pred} end(p), r(o))
    start(o)       = max(data_ready(o), min_j free[u(o), j]);  end(o) = start(o) + c(o)
    store_start(o) = max(min_j free[dma, j], end(o))           (when it is issued)
    ready(v)       = end(o) for a resident output v, store_start(o) + s(o) for a spilled one

so weights are prefetched as early as the in-order DMA queue allows. ``r(o)`` is the
operator's release time (0 unless ``build_problem`` gets a ``release_fn``): when its
external inputs exist at all, e.g. data another core sends (the backend's per-core
search); its load starts no earlier either. The score is the
makespan ``max`` over every task's end. Simulating an order is O(V + E) (the arrays below
are precomputed once per graph); the hot loop is compiled with Numba.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from numba import njit

from corefold.ir import Graph, Node
from corefold.target import Target
from corefold.target.model import UNIT_KINDS

#: Kind index of each unit kind in the simulator's arrays.
KIND_INDEX = {k: i for i, k in enumerate(UNIT_KINDS)}
DMA = KIND_INDEX["dma"]


@dataclass(frozen=True)
class ScheduleProblem:
    """Per-operator arrays for the simulator, built once per graph by :func:`build_problem`.

    Node ``i`` is ``nodes[i]`` (stable topological order). ``arrays`` is the tuple the
    compiled kernels take; ``unit_names[s]`` names unit slot ``s`` (e.g. ``"vector1"``).
    """

    nodes: tuple[Node, ...]
    index: dict[Node, int]
    arrays: tuple
    kind: np.ndarray
    duration: np.ndarray
    external_load: np.ndarray
    output_store: np.ndarray
    pred_ptr: np.ndarray
    pred_idx: np.ndarray
    succ_ptr: np.ndarray
    succ_idx: np.ndarray
    unit_names: tuple[str, ...]
    kind_count: np.ndarray
    num_values: int


def build_problem(graph: Graph, target: Target, cost_fn: Callable | None = None,
                  transfer_fn: Callable | None = None, release_fn: Callable | None = None) -> ScheduleProblem:
    """Precompute the simulator's arrays for ``graph`` on ``target``. O(V + E).

    ``cost_fn(node, target)`` and ``transfer_fn(nbytes, target)`` default to
    :func:`corefold.cost.op_cost` and :func:`corefold.cost.transfer_seconds`;
    ``release_fn(node)``, the node's release time in seconds, to 0.

    Raises:
        ValueError: a value has no static shape, or the graph has a cycle.
    """
    if cost_fn is None or transfer_fn is None:
        from corefold.cost import op_cost, transfer_seconds

        cost_fn = cost_fn or op_cost
        transfer_fn = transfer_fn or transfer_seconds
    n_dma = target.units["dma"].count

    def dma_time(nbytes: float) -> float:
        return float(transfer_fn(nbytes, target)) * n_dma if nbytes else 0.0

    nodes = tuple(graph.topological_order())
    index = {n: i for i, n in enumerate(nodes)}
    n = len(nodes)
    value_id: dict[int, int] = {}
    vbytes: list[float] = []
    for node in nodes:
        for v in node.outputs:
            value_id[id(v)] = len(vbytes)
            vbytes.append(float(v.nbytes))
    nv = len(vbytes)
    graph_outputs = {id(v) for v in graph.outputs}
    kind = np.zeros(n, np.int64)
    duration = np.zeros(n)
    external_load = np.zeros(n)
    output_store = np.zeros(n)
    in_ptr, in_val, out_ptr, out_val, ctrl_ptr, ctrl_src = [0], [], [0], [], [0], []
    pred_ptr, pred_idx = [0], []
    vuses = np.zeros(nv, np.int64)
    vconsumed = np.zeros(nv, np.bool_)
    for i, node in enumerate(nodes):
        c = cost_fn(node, target)
        kind[i] = KIND_INDEX[c.unit]
        duration[i] = float(c.compute_seconds)
        ext = 0.0
        seen: set[int] = set()
        for v in node.inputs:
            if v is None or id(v) in seen:
                continue
            seen.add(id(v))
            if v.producer is None:
                ext += v.nbytes
            else:
                vid = value_id[id(v)]
                in_val.append(vid)
                vuses[vid] += 1
                vconsumed[vid] = True
        in_ptr.append(len(in_val))
        external_load[i] = dma_time(ext)
        for v in node.outputs:
            out_val.append(value_id[id(v)])
        out_ptr.append(len(out_val))
        output_store[i] = dma_time(sum(v.nbytes for v in node.outputs if id(v) in graph_outputs))
        for p in node.control_preds:
            ctrl_src.append(index[p])
        ctrl_ptr.append(len(ctrl_src))
        for p in node.predecessors():
            pred_idx.append(index[p])
        pred_ptr.append(len(pred_idx))
    release = np.array([float(release_fn(node)) if release_fn is not None else 0.0 for node in nodes])
    vload = np.array([dma_time(b) for b in vbytes]) if nv else np.zeros(0)
    vis_out = np.zeros(nv, np.bool_)
    for node in nodes:
        for v in node.outputs:
            if id(v) in graph_outputs:
                vis_out[value_id[id(v)]] = True
    kind_count = np.array([target.units[k].count for k in UNIT_KINDS], np.int64)
    kind_first = np.concatenate([[0], np.cumsum(kind_count)[:-1]]).astype(np.int64)
    unit_names = tuple(f"{k}{j}" for k in UNIT_KINDS for j in range(target.units[k].count))
    succ_lists: list[list[int]] = [[] for _ in range(n)]
    pp = np.array(pred_ptr, np.int64)
    pi = np.array(pred_idx, np.int64)
    for i in range(n):
        for p in pi[pp[i]:pp[i + 1]]:
            succ_lists[p].append(i)
    succ_ptr = np.array([0] + list(np.cumsum([len(s) for s in succ_lists])), np.int64)
    succ_idx = np.array([s for ss in succ_lists for s in ss], np.int64)
    vb = np.array(vbytes, np.float64)
    arrays = (kind, duration, external_load, output_store,
              np.array(in_ptr, np.int64), np.array(in_val, np.int64),
              np.array(out_ptr, np.int64), np.array(out_val, np.int64),
              np.array(ctrl_ptr, np.int64), np.array(ctrl_src, np.int64),
              vb, vload, vuses, vis_out, kind_first, kind_count,
              np.array([float(target.core_memory_threshold)]), release)
    return ScheduleProblem(nodes, index, arrays, kind, duration, external_load, output_store,
                           pp, pi, succ_ptr, succ_idx, unit_names, kind_count, nv)


# -- state -------------------------------------------------------------------------------
# A simulator state is a tuple of arrays, copied to branch:
#   free[slot]       busy-until time of each unit slot
#   ready[v]         time value v is available (on chip if resident, in DRAM if spilled)
#   resident[v]      1 resident, 2 spilled, 0 not produced yet
#   remaining[v]     consumers of v not yet issued
#   end[i]           finish time of node i (-1 before it is issued)
#   scal[0], [1]     resident live bytes, makespan so far (placed tasks)
#   scal[2:5]        pending store of the last issued operator: bytes' time, release, node

def initial_state(problem: ScheduleProblem) -> tuple:
    """The state before any operator is issued (all units free at time 0)."""
    vuses = problem.arrays[12]
    return (np.zeros(len(problem.unit_names)), np.zeros(problem.num_values),
            np.zeros(problem.num_values, np.int8), vuses.copy(),
            np.full(len(problem.nodes), -1.0), np.array([0.0, 0.0, 0.0, 0.0, -1.0]))


def copy_state(state: tuple) -> tuple:
    return tuple(a.copy() for a in state)


@njit(cache=True, inline="always")
def earliest_slot(free, first, count):
    """The unit slot of ``[first, first + count)`` that is free first (lowest index on ties)."""
    best = first
    for s in range(first + 1, first + count):
        if free[s] < free[best]:
            best = s
    return best


@njit(cache=True)
def flush_store(P, S, prec):
    """Put the pending store (of the operator issued last) on the earliest free DMA unit."""
    kind_first, kind_count = P[14], P[15]
    out_ptr, out_val = P[6], P[7]
    free, ready, resident, remaining, end, scal = S
    op = int(scal[4])
    if op < 0:
        return
    slot = earliest_slot(free, kind_first[0], kind_count[0])
    start = max(free[slot], scal[3])
    fin = start + scal[2]
    free[slot] = fin
    if fin > scal[1]:
        scal[1] = fin
    for k in range(out_ptr[op], out_ptr[op + 1]):
        v = out_val[k]
        if resident[v] == 2:
            ready[v] = fin
    prec[6] = slot
    prec[7] = start
    prec[8] = fin
    scal[4] = -1.0


@njit(cache=True)
def step(P, S, i, rec, prec):
    """Issue node ``i`` in state ``S`` (in place): its load, the previous operator's pending
    store, its compute, its outputs' residency (the module docstring's equations).

    ``rec`` receives ``i``'s (compute slot, start, end, load slot, load start, load end);
    ``prec[6:9]`` the previous operator's (store slot, start, end) when its store is placed
    here. O(deg(i)) plus O(units of a kind).
    """
    (kind, duration, external_load, output_store, in_ptr, in_val, out_ptr, out_val, ctrl_ptr,
     ctrl_src, vbytes, vload, vuses, vis_out, kind_first, kind_count, budget, release) = P
    free, ready, resident, remaining, end, scal = S
    # a spilled input still waiting for its store forces the store out first
    for k in range(in_ptr[i], in_ptr[i + 1]):
        v = in_val[k]
        if resident[v] == 2 and ready[v] < 0.0:
            flush_store(P, S, prec)
            break
    # inputs: resident ones are ready on chip; spilled ones and external data are loaded
    t_data = release[i]
    load = external_load[i]
    load_after = release[i] if external_load[i] > 0.0 else 0.0
    for k in range(in_ptr[i], in_ptr[i + 1]):
        v = in_val[k]
        if resident[v] == 1:
            if ready[v] > t_data:
                t_data = ready[v]
        else:
            load += vload[v]
            if ready[v] > load_after:
                load_after = ready[v]
    for k in range(ctrl_ptr[i], ctrl_ptr[i + 1]):
        if end[ctrl_src[k]] > t_data:
            t_data = end[ctrl_src[k]]
    ld_slot = -1
    ld_start = 0.0
    if load > 0.0:
        ld_slot = earliest_slot(free, kind_first[0], kind_count[0])
        ld_start = max(free[ld_slot], load_after)
        free[ld_slot] = ld_start + load
        if free[ld_slot] > t_data:
            t_data = free[ld_slot]
        if free[ld_slot] > scal[1]:
            scal[1] = free[ld_slot]
    # the previous operator's store goes after this prefetch
    flush_store(P, S, prec)
    u = kind[i]
    slot = earliest_slot(free, kind_first[u], kind_count[u])
    start = max(t_data, free[slot])
    fin = start + duration[i]
    free[slot] = fin
    end[i] = fin
    if fin > scal[1]:
        scal[1] = fin
    # outputs: resident while they fit, else spilled; graph outputs are stored too
    store = output_store[i]
    for k in range(out_ptr[i], out_ptr[i + 1]):
        v = out_val[k]
        if vuses[v] == 0:
            resident[v] = 1
            ready[v] = fin
        elif scal[0] + vbytes[v] <= budget[0]:
            resident[v] = 1
            scal[0] += vbytes[v]
            ready[v] = fin
        else:
            resident[v] = 2
            ready[v] = -1.0  # known once the store is placed
            if not vis_out[v]:
                store += vload[v]
    if store > 0.0:
        scal[2] = store
        scal[3] = fin
        scal[4] = i
    # inputs whose last consumer this is leave the chip
    for k in range(in_ptr[i], in_ptr[i + 1]):
        v = in_val[k]
        remaining[v] -= 1
        if remaining[v] == 0 and resident[v] == 1:
            scal[0] -= vbytes[v]
    rec[0] = slot
    rec[1] = start
    rec[2] = fin
    rec[3] = ld_slot
    rec[4] = ld_start
    rec[5] = ld_start + load if ld_slot >= 0 else 0.0
    rec[6] = -1


@njit(cache=True)
def makespan_so_far(P, S):
    """Makespan so far, counting the pending store as if placed now."""
    free, scal = S[0], S[5]
    if scal[4] < 0:
        return scal[1]
    slot = earliest_slot(free, P[14][0], P[15][0])
    return max(scal[1], max(free[slot], scal[3]) + scal[2])


@njit(cache=True)
def run_order(P, S, order):
    """Issue every node of ``order`` from state ``S`` (in place); return the makespan so far."""
    rec = np.zeros(9)
    prec = np.zeros(9)
    for i in order:
        step(P, S, i, rec, prec)
    return makespan_so_far(P, S)


@njit(cache=True)
def run_recorded(P, S, order, out):
    """:func:`run_order` recording each node's tasks in the rows of ``out`` (see :func:`step`)."""
    dummy = np.zeros(9)
    for j in range(order.shape[0]):
        step(P, S, order[j], out[j], out[j - 1] if j > 0 else dummy)
    if order.shape[0]:
        flush_store(P, S, out[order.shape[0] - 1])
    return S[5][1]


@njit(cache=True)
def score(P, S):
    """(makespan, mean busy-until): the second breaks ties in favour of freer units."""
    free = S[0]
    return makespan_so_far(P, S), free.sum() / free.shape[0]


@njit(cache=True)
def evaluate_batch(P, S0, orders):
    """Makespan and mean busy-until after each row of ``orders``, each from a copy of ``S0``."""
    m = orders.shape[0]
    ms = np.empty(m)
    busy = np.empty(m)
    for r in range(m):
        S = (S0[0].copy(), S0[1].copy(), S0[2].copy(), S0[3].copy(), S0[4].copy(), S0[5].copy())
        run_order(P, S, orders[r])
        ms[r], busy[r] = score(P, S)
    return ms, busy


def simulate(problem: ScheduleProblem, order: np.ndarray | list, state: tuple | None = None) -> float:
    """Issue ``order`` (node indices) from ``state`` (default: idle core), updating ``state``
    in place, and return the makespan so far. O(len(order) + its edges)."""
    if state is None:
        state = initial_state(problem)
    return float(run_order(problem.arrays, state, np.asarray(order, np.int64)))


@dataclass(frozen=True)
class Task:
    """One busy interval of one unit: ``what`` is ``compute``, ``load`` or ``store``."""

    unit: str
    node: str
    what: str
    start: float
    end: float


@dataclass(frozen=True)
class Schedule:
    """The simulated schedule of a whole order: makespan and per-unit timeline."""

    makespan: float
    tasks: tuple[Task, ...]

    def timeline(self) -> dict[str, list[Task]]:
        """Tasks per unit name, by start time."""
        out: dict[str, list[Task]] = {}
        for t in sorted(self.tasks, key=lambda t: (t.start, t.end)):
            out.setdefault(t.unit, []).append(t)
        return out


def schedule(problem: ScheduleProblem, order: list[Node] | np.ndarray) -> Schedule:
    """Simulate a complete order from an idle core and return makespan and timeline.

    Raises:
        ValueError: ``order`` is not a permutation of the problem's nodes respecting every
            data and control edge.
    """
    if len(order) and isinstance(order[0], Node):
        order = [problem.index[n] for n in order]
    idx = np.asarray(order, np.int64)
    check_order(problem, idx)
    rec = np.zeros((len(idx), 9))
    makespan = float(run_recorded(problem.arrays, initial_state(problem), idx, rec))
    tasks = []
    for j, i in enumerate(idx):
        name = problem.nodes[i].name
        slot, start, fin, ls, l0, l1, ss, s0, s1 = rec[j]
        if ls >= 0:
            tasks.append(Task(problem.unit_names[int(ls)], name, "load", l0, l1))
        tasks.append(Task(problem.unit_names[int(slot)], name, "compute", start, fin))
        if ss >= 0:
            tasks.append(Task(problem.unit_names[int(ss)], name, "store", s0, s1))
    return Schedule(makespan, tuple(tasks))


def check_order(problem: ScheduleProblem, order: np.ndarray) -> None:
    """Raise ValueError unless ``order`` issues every node once, after all its predecessors."""
    n = len(problem.nodes)
    if len(order) != n or len(set(int(i) for i in order)) != n:
        raise ValueError(f"order has {len(order)} entries for {n} nodes, or repeats one")
    pos = np.empty(n, np.int64)
    pos[np.asarray(order, np.int64)] = np.arange(n)
    for i in range(n):
        for p in problem.pred_idx[problem.pred_ptr[i]:problem.pred_ptr[i + 1]]:
            if pos[p] > pos[i]:
                raise ValueError(f"order issues '{problem.nodes[i].name}' before its predecessor "
                                 f"'{problem.nodes[p].name}'")
