"""Key-node windows solved by branch and bound: a term of bound.py (``window_search``).

Window ``j`` runs from the end of key node ``k_{j-1}`` (``W_{j-1}``) to the end of
``k_j`` (``W_j``). Every operator of segment ``j`` descends from ``k_{j-1}``, so none
starts before ``W_{j-1}``, and at ``W_{j-1}`` only ``k_{j-1}``'s outputs are live (every
other value was read by an ancestor of ``k_{j-1}``). With one DMA unit, the DMA queue
reaches segment ``j``'s tasks after ``k_{j-1}``'s: at ``W_{j-1}`` exactly when ``k_{j-1}``
is a DMA operator (its compute is the queue's last task before them), at any earlier time
otherwise. So, shifted by ``-W_{j-1}``, segment ``j`` runs as the simulator runs it from
a core whose compute units are free at 0, whose DMA unit is free at 0 (DMA ``k_{j-1}``)
or arbitrarily early (else; weights may have been prefetched), holding only
``k_{j-1}``'s outputs (resident or spilled, with its pending store released at 0); and
since the simulator's times only grow with its state's times,

    W_j - W_{j-1} >= min over orders of segment j of end(k_j) from that state

(the minimum over both residencies of ``k_{j-1}``'s outputs; for ``j = 0``, the idle
core at time 0). :func:`window_floor` finds
it by depth-first branch and bound over the segment's orders on the simulator's kernels,
children in critical-path order, pruning a partial order when a lower bound of
``end(k_j)`` over its completions reaches the best complete order: the largest of

* ``start_time(o) + tail(o)`` for each ready operator ``o`` (``tail``: the longest
  compute path from ``o`` to ``k_j``, both included);
* per compute kind ``u`` (one-machine head-body-tail): the average over its units of
  ``max(busy-until, head_u)``, with ``head_u`` the earliest start of a ready operator of
  kind ``u`` or end of any ready operator (later ones descend from one), plus the remaining
  work of ``u`` per unit, plus the shortest ``tail(o) - c(o)`` over the remaining
  operators of ``u`` (the last one still has its path to ``k_j`` to run);
* the DMA unit likewise: busy-until, plus the remaining loads (weights and the inputs
  already spilled) and DMA computes, plus the shortest path to the end after one of them.

After ``budget`` nodes it stops and returns the smallest lower bound over what is left
unexplored (and the best order found), so the result is always a valid lower bound and
does not depend on the machine. Cost: O(budget * (V + m * deg)).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.typed import Dict, List

from corefold.passes.order.list_schedule import start_time
from corefold.passes.order.simulator import DMA, ScheduleProblem, step

#: Branch-and-bound nodes per window and residency case, by default.
NODE_BUDGET = 20_000

#: Seconds two times may differ by and still count as equal in the dominance test (sums
#: taken in another order); the window's bound is lowered by this much per operator.
TIME_TOLERANCE = 1e-13

_VECTOR = types.float64[::1]
_VECTORS = types.ListType(_VECTOR)


@njit(cache=True)
def _copy(S0):
    return (S0[0].copy(), S0[1].copy(), S0[2].copy(), S0[3].copy(), S0[4].copy(), S0[5].copy())


@njit(cache=True)
def _node_bound(P, S, members, done, ready_mask, pred_mask, closing, tail, kind_first, kind_count):
    """A lower bound of ``end(closing)`` over every completion of the partial order ``done``."""
    kind, duration, external_load = P[0], P[1], P[2]
    in_ptr, in_val, vload = P[4], P[5], P[11]
    free, resident = S[0], S[2]
    m = members.shape[0]
    best = 0.0
    n_kinds = kind_count.shape[0]
    work = np.zeros(n_kinds)
    head = np.full(n_kinds, np.inf)  # earliest start of any remaining operator of the kind
    after = np.full(n_kinds, np.inf)  # shortest path to the end after one of them
    dma = 0.0
    dma_after = np.inf
    later = np.inf  # no operator that is not ready yet starts before this
    for j in range(m):
        if (done >> j) & 1:
            continue
        o = members[j]
        u = kind[o]
        load = external_load[o]
        for k in range(in_ptr[o], in_ptr[o + 1]):
            if resident[in_val[k]] == 2:
                load += vload[in_val[k]]
        if load > 0.0:
            dma += load
            dma_after = min(dma_after, tail[j])
        if u == DMA:
            dma += duration[o]
            dma_after = min(dma_after, tail[j] - duration[o])
        else:
            work[u] += duration[o]
            after[u] = min(after[u], tail[j] - duration[o])
        if (ready_mask >> j) & 1:
            t = start_time(P, S, o)
            head[u] = min(head[u], t)
            later = min(later, t + duration[o])
            if t + tail[j] > best:
                best = t + tail[j]
    for u in range(n_kinds):
        head[u] = min(head[u], later)  # a later operator of kind u descends from a ready one
    for u in range(n_kinds):
        if u == DMA or work[u] == 0.0:
            continue
        busy = 0.0
        for s in range(kind_first[u], kind_first[u] + kind_count[u]):
            busy += max(free[s], head[u])
        t = busy / kind_count[u] + work[u] / kind_count[u] + after[u]
        if t > best:
            best = t
    if dma > 0.0:
        t = free[kind_first[DMA]] + dma + dma_after
        if t > best:
            best = t
    return best


@njit(cache=True)
def _ready(done, pred_mask, m):
    r = np.int64(0)
    for j in range(m):
        if (done >> j) & 1 == 0 and (pred_mask[j] & ~done) == 0:
            r |= np.int64(1) << j
    return r


@njit(cache=True)
def _summary(S, members, vids):
    """What the rest of the schedule depends on, for the dominance test: times (compared
    with <=) then residency and the pending store (compared with ==)."""
    free, ready, resident, remaining, end, scal = S
    ns, m, nv = free.shape[0], members.shape[0], vids.shape[0]
    out = np.empty(ns + m + nv + 1 + nv + 3)
    out[:ns] = free
    for k in range(m):
        out[ns + k] = end[members[k]]
    for k in range(nv):
        out[ns + m + k] = ready[vids[k]]
    out[ns + m + nv] = scal[3] if scal[4] >= 0 else 0.0
    base = ns + m + nv + 1
    for k in range(nv):
        out[base + k] = resident[vids[k]]
    out[base + nv] = scal[0]
    out[base + nv + 1] = scal[4]
    out[base + nv + 2] = scal[2] if scal[4] >= 0 else 0.0
    return out


@njit(cache=True)
def _dominated(seen, mask, vec, n_times, cap):
    """True if a state already expanded with the same finished set is no later anywhere
    (with the same residency and pending store); else remember ``vec`` (up to ``cap``)."""
    if mask in seen:
        lst = seen[mask]
        for old in lst:
            ok = True
            for i in range(n_times):
                if old[i] > vec[i] + TIME_TOLERANCE:
                    ok = False
                    break
            if ok:
                for i in range(n_times, vec.shape[0]):
                    if old[i] != vec[i]:
                        ok = False
                        break
            if ok:
                return True
        if len(lst) < cap:
            lst.append(vec)
    else:
        lst = List.empty_list(_VECTOR)
        lst.append(vec)
        seen[mask] = lst
    return False


@njit(cache=True)
def branch_and_bound(P, S0, members, pred_mask, closing_pos, tail, rank, budget, vids):
    """(lower bound, best found) of ``end(members[closing_pos])`` over every order of
    ``members`` issued from ``S0`` (see the module docstring). ``rank``: child order;
    ``vids``: the values the members make or read (for the dominance test: a partial
    order whose state is no earlier than one already expanded with the same finished
    set, residency and pending store cannot do better, since the simulator is monotone)."""
    kind_first, kind_count = P[14], P[15]
    m = members.shape[0]
    closing = members[closing_pos]
    full = (np.int64(1) << m) - 1
    rec = np.zeros(9)
    prec = np.zeros(9)
    seen = Dict.empty(key_type=types.int64, value_type=_VECTORS)
    n_times = S0[0].shape[0] + m + vids.shape[0] + 1
    states = [_copy(S0) for _ in range(m + 1)]
    done = np.zeros(m + 1, np.int64)
    nxt = np.zeros(m + 1, np.int64)  # next position in ``rank`` to try at each depth
    incumbent = np.inf
    nodes = 0
    d = 0
    while d >= 0:
        if done[d] == full:
            v = states[d][4][closing]
            if v < incumbent:
                incumbent = v
            d -= 1
            continue
        if nodes >= budget:
            break
        ready = _ready(done[d], pred_mask, m)
        advanced = False
        while nxt[d] < m:
            j = rank[nxt[d]]
            nxt[d] += 1
            if (ready >> j) & 1 == 0:
                continue
            child = _copy(states[d])
            step(P, child, members[j], rec, prec)
            nodes += 1
            cdone = done[d] | (np.int64(1) << j)
            if cdone != full:
                lb = _node_bound(P, child, members, cdone, _ready(cdone, pred_mask, m), pred_mask, closing,
                                 tail, kind_first, kind_count)
                if lb >= incumbent:
                    continue
                if _dominated(seen, cdone, _summary(child, members, vids), n_times, 16):
                    continue
            states[d + 1] = child
            done[d + 1] = cdone
            nxt[d + 1] = 0
            d += 1
            advanced = True
            break
        if not advanced:
            d -= 1
    if d < 0:
        return incumbent, incumbent
    # budget spent: the smallest bound over every unexplored child on the current path
    floor = incumbent
    for e in range(d + 1):
        if done[e] == full:
            continue
        ready = _ready(done[e], pred_mask, m)
        for r in range(nxt[e], m):
            j = rank[r]
            if (ready >> j) & 1 == 0:
                continue
            child = _copy(states[e])
            step(P, child, members[j], rec, prec)
            cdone = done[e] | (np.int64(1) << j)
            if cdone == full:
                lb = child[4][closing]
            else:
                lb = _node_bound(P, child, members, cdone, _ready(cdone, pred_mask, m), pred_mask, closing,
                                 tail, kind_first, kind_count)
            if lb < floor:
                floor = lb
    return floor, incumbent


def _local_arrays(problem: ScheduleProblem, members: np.ndarray, opening: int) -> tuple[tuple, np.ndarray]:
    """The simulator's arrays restricted to the window: local nodes ``0..m-1`` are the
    members, node ``m`` stands for ``opening`` (never issued; it only owns its outputs);
    local values are the opening's outputs and the members' outputs. Control edges from
    outside the segment are dropped (their sources ended before the window opens).
    Returns the arrays and the global id of each local value."""
    (kind, duration, external_load, output_store, in_ptr, in_val, out_ptr, out_val, ctrl_ptr, ctrl_src, vbytes,
     vload, vuses, vis_out, kind_first, kind_count, budget, _release) = problem.arrays
    nodes = list(members) + ([opening] if opening >= 0 else [])
    local = {int(o): k for k, o in enumerate(members)}
    gvals = [int(v) for o in nodes for v in out_val[out_ptr[o]:out_ptr[o + 1]]]
    lval = {v: k for k, v in enumerate(gvals)}
    l_in_ptr, l_in_val, l_out_ptr, l_out_val, l_ctrl_ptr, l_ctrl_src = [0], [], [0], [], [0], []
    for k, o in enumerate(nodes):
        if k < len(members):
            l_in_val += [lval[int(v)] for v in in_val[in_ptr[o]:in_ptr[o + 1]]]
            l_ctrl_src += [local[int(c)] for c in ctrl_src[ctrl_ptr[o]:ctrl_ptr[o + 1]] if int(c) in local]
        l_in_ptr.append(len(l_in_val))
        l_ctrl_ptr.append(len(l_ctrl_src))
        l_out_val += [lval[int(v)] for v in out_val[out_ptr[o]:out_ptr[o + 1]]]
        l_out_ptr.append(len(l_out_val))
    idx = np.array(nodes, np.int64)
    g = np.array(gvals, np.int64)
    arr = lambda x: np.array(x, np.int64)  # noqa: E731
    P = (kind[idx].copy(), duration[idx].copy(), external_load[idx].copy(), output_store[idx].copy(),
         arr(l_in_ptr), arr(l_in_val), arr(l_out_ptr), arr(l_out_val), arr(l_ctrl_ptr), arr(l_ctrl_src),
         vbytes[g].copy(), vload[g].copy(), vuses[g].copy(), vis_out[g].copy(), kind_first, kind_count, budget,
         np.zeros(len(idx)))  # no release times: a window's bound holds for any (they only delay)
    return P, g


def _idle_state(P: tuple, m: int, has_opening: bool, spilled: set[int], origin: float, dma_early: bool
                ) -> tuple | None:
    """The core at ``W_{j-1}`` (local arrays of :func:`_local_arrays`), placed at time
    ``origin`` (the simulator never starts a task before 0, so an early DMA needs room
    before it): only the opening's outputs live (local ids in ``spilled`` in DRAM, their
    store pending), compute units free at ``origin``, the DMA unit too unless
    ``dma_early`` (then at 0). None if the resident outputs do not fit."""
    kind, output_store = P[0], P[3]
    out_ptr, out_val, vbytes, vload, vuses, vis_out, kind_first, kind_count, budget = (
        P[6], P[7], P[10], P[11], P[12], P[13], P[14], P[15], P[16])
    nv = len(vbytes)
    free = np.full(int(kind_count.sum()), origin)
    if dma_early:
        free[kind_first[DMA]:kind_first[DMA] + kind_count[DMA]] = 0.0
    ready = np.zeros(nv)
    resident = np.zeros(nv, np.int8)
    end = np.full(len(kind), -1.0)
    scal = np.array([0.0, 0.0, 0.0, 0.0, -1.0])
    if has_opening:
        end[m] = origin
        store = float(output_store[m])
        for v in out_val[out_ptr[m]:out_ptr[m + 1]]:
            ready[v] = origin
            if vuses[v] > 0 and int(v) not in spilled:
                resident[v] = 1
                scal[0] += vbytes[v]
            elif vuses[v] > 0:
                resident[v] = 2
                ready[v] = -1.0
                if not vis_out[v]:
                    store += vload[v]
            else:
                resident[v] = 1
        if scal[0] > budget[0]:
            return None
        if store > 0:
            scal[2], scal[3], scal[4] = store, origin, float(m)
    return free, ready, resident, vuses.copy(), end, scal


def window_floor(problem: ScheduleProblem, members: np.ndarray, opening: int, closing: int,
                 budget: int = NODE_BUDGET) -> float | None:
    """A lower bound of ``W_j - W_{j-1}`` for the segment ``members`` between key nodes
    ``opening`` (-1 for the graph's start) and ``closing`` (see the module docstring), or
    None when the window does not qualify (several DMA units, more than 63 operators or
    more than 3 consumed opening outputs)."""
    m = len(members)
    if closing < 0 or m > 63 or problem.kind_count[DMA] != 1:
        return None
    members = np.asarray(members, np.int64)
    where = {int(o): k for k, o in enumerate(members)}
    pred_mask = np.zeros(m, np.int64)
    succ: list[list[int]] = [[] for _ in range(m)]
    for k, o in enumerate(members):
        for p in problem.pred_idx[problem.pred_ptr[o]:problem.pred_ptr[o + 1]]:
            if int(p) in where:
                pred_mask[k] |= np.int64(1) << where[int(p)]
                succ[where[int(p)]].append(k)
    tail = np.zeros(m)
    for k in range(m - 1, -1, -1):  # members are in topological order
        tail[k] = problem.duration[members[k]] + max((tail[s] for s in succ[k]), default=0.0)
    rank = np.argsort(-tail, kind="stable").astype(np.int64)
    P, gvals = _local_arrays(problem, members, opening)
    outs = ([int(v) for v in P[7][P[6][m]:P[6][m + 1]] if P[12][v] > 0] if opening >= 0 else [])
    if len(outs) > 3:
        return None
    # room for every DMA task of the graph before the window opens
    early = opening >= 0 and problem.kind[opening] != DMA
    origin = 0.0 if not early else float(problem.duration.sum() + problem.external_load.sum()
                                         + problem.output_store.sum() + 2 * problem.arrays[11].sum() + 1e-3)
    local_members = np.arange(m, dtype=np.int64)
    vids = np.arange(len(gvals), dtype=np.int64)
    best = np.inf
    for mask in range(1 << len(outs)):
        S = _idle_state(P, m, opening >= 0, {v for b, v in enumerate(outs) if mask >> b & 1}, origin, early)
        if S is None:
            continue
        floor, _ = branch_and_bound(P, S, local_members, pred_mask, where[int(closing)], tail, rank, budget, vids)
        best = min(best, floor - origin - m * TIME_TOLERANCE)
    return float(best) if np.isfinite(best) else None
