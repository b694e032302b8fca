r"""Bisection refinement when two capacities bind (neurons and synapses per core).

Plain Fiduccia-Mattheyses never moves a vertex into a side without room. When both
capacities bind, the sides end up full in *different* dimensions (one side at its neuron
capacity, the other at its synapse capacity): every move from the second side to the first
adds neurons to a full side, every move back adds synapses to a full side, and FM stops
although exchanging a synapse-heavy vertex for a synapse-free one would lower the cut.

:func:`fm_refine_mc` lets a move overfill the receiving side by at most one vertex's load
(the heaviest in that dimension); while a side is over, only moves that lower the total
normalised overflow :math:`\sum_{s,d} \max(0, F_{s,d} - C_{s,d}) / C_d` are admissible, and
the pass keeps its best prefix by (overflow, cut), so the result is never less feasible
than the start. A heavy move followed by the light moves that restore feasibility is the
exchange plain FM cannot make (multi-constraint FM, Karypis & Kumar 1998, with the
balance condition on the normalised overflow).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from corefold.mapping.partition.initial import _heap_pop, _heap_push, side_fill


@njit(cache=True)
def _overflow(fill, caps2, scale):
    o = 0.0
    for s in range(2):
        for d in range(fill.shape[1]):
            if fill[s, d] > caps2[s, d]:
                o += (fill[s, d] - caps2[s, d]) * scale[d]
    return o


@njit(cache=True)
def fm_refine_mc(indptr, indices, weights, loads, side, caps2, lower2, stall, bias, passes=4):
    """Fiduccia-Mattheyses passes with exchanges through slightly infeasible states.

    ``side`` (int64 0/1) is updated in place. Each pass moves the unlocked boundary vertex
    of largest gain whose move (a) keeps the receiving side within ``caps2`` plus the
    largest vertex load, (b) keeps the giving side at or above ``lower2``, and (c) if the
    current state overfills a side, lowers the total normalised overflow; it locks the
    vertex and updates its neighbours. Vertices refused only for (a) or (c) are pushed
    again once the state fits. The pass stops after ``stall`` moves without a better
    (overflow, cut) and the moves after the best prefix are undone. The objective is the
    cut plus ``bias[v]`` for every v on side 0.

    Complexity: O((n + m) log m) per pass (a refused vertex is re-queued at most once per
    return to a fitting state).

    Returns:
        (objective, overflow) after refinement.
    """
    n = indptr.shape[0] - 1
    dims = loads.shape[1]
    fill = side_fill(side, loads)
    scale = np.empty(dims)
    relax = np.zeros(dims, np.int64)
    for d in range(dims):
        scale[d] = 1.0 / max(caps2[0, d] + caps2[1, d], 1)
    for v in range(n):
        for d in range(dims):
            if loads[v, d] > relax[d]:
                relax[d] = loads[v, d]
    gain = np.zeros(n)
    ext = np.zeros(n)
    wdeg = np.zeros(n)
    cut = 0.0
    for v in range(n):
        for e in range(indptr[v], indptr[v + 1]):
            wdeg[v] += weights[e]
            if side[indices[e]] != side[v]:
                gain[v] += weights[e]
                ext[v] += weights[e]
                cut += weights[e]
            else:
                gain[v] -= weights[e]
    cut *= 0.5
    for v in range(n):
        if side[v] == 0:
            gain[v] += bias[v]
            cut += bias[v]
        else:
            gain[v] -= bias[v]
    over = _overflow(fill, caps2, scale)
    cap = 2 * (indptr[n] + n) + 1
    hk = np.empty(cap)
    hv = np.empty(cap, np.int64)
    locked = np.zeros(n, np.bool_)
    moved = np.empty(n, np.int64)
    deferred = np.empty(n, np.int64)
    is_deferred = np.zeros(n, np.bool_)
    for _ in range(passes):
        size = 0
        for v in range(n):
            locked[v] = False
            if ext[v] > 0.0:
                size = _heap_push(hk, hv, size, -gain[v], v)
        start_over = over
        start_cut = cut
        best_over = over
        best_cut = cut
        best_len = 0
        nmoved = 0
        ndef = 0
        since = 0
        cur = cut
        while size > 0 and since < stall:
            key, v, size = _heap_pop(hk, hv, size)
            if locked[v] or -key != gain[v]:
                continue
            s = side[v]
            t = 1 - s
            ok = True
            low = False
            for d in range(dims):
                if fill[t, d] + loads[v, d] > caps2[t, d] + relax[d]:
                    ok = False
                if fill[s, d] - loads[v, d] < lower2[s, d]:
                    low = True
            if low:
                continue
            new_over = over
            if ok:
                for d in range(dims):
                    fill[s, d] -= loads[v, d]
                    fill[t, d] += loads[v, d]
                new_over = _overflow(fill, caps2, scale)
                for d in range(dims):
                    fill[s, d] += loads[v, d]
                    fill[t, d] -= loads[v, d]
                if over > 0.0 and new_over >= over - 1e-15:
                    ok = False
            if not ok:
                if not is_deferred[v]:
                    is_deferred[v] = True
                    deferred[ndef] = v
                    ndef += 1
                continue
            for d in range(dims):
                fill[s, d] -= loads[v, d]
                fill[t, d] += loads[v, d]
            over = new_over
            side[v] = t
            locked[v] = True
            cur -= gain[v]
            gain[v] = -gain[v]
            ext[v] = wdeg[v] - ext[v]
            moved[nmoved] = v
            nmoved += 1
            for e in range(indptr[v], indptr[v + 1]):
                u = indices[e]
                if side[u] == t:
                    gain[u] -= 2.0 * weights[e]
                    ext[u] -= weights[e]
                else:
                    gain[u] += 2.0 * weights[e]
                    ext[u] += weights[e]
                if not locked[u] and size < cap:
                    size = _heap_push(hk, hv, size, -gain[u], u)
            if over == 0.0 and ndef > 0:
                for i in range(ndef):
                    u = deferred[i]
                    is_deferred[u] = False
                    if not locked[u] and size < cap:
                        size = _heap_push(hk, hv, size, -gain[u], u)
                ndef = 0
            if over < best_over - 1e-15 or (over <= best_over + 1e-15 and cur < best_cut - 1e-9):
                best_over = over
                best_cut = cur
                best_len = nmoved
                since = 0
            else:
                since += 1
        for i in range(ndef):
            is_deferred[deferred[i]] = False
        for i in range(nmoved - 1, best_len - 1, -1):
            v = moved[i]
            t = side[v]
            s = 1 - t
            for d in range(dims):
                fill[t, d] -= loads[v, d]
                fill[s, d] += loads[v, d]
            side[v] = s
            gain[v] = -gain[v]
            ext[v] = wdeg[v] - ext[v]
            for e in range(indptr[v], indptr[v + 1]):
                u = indices[e]
                if side[u] == s:
                    gain[u] -= 2.0 * weights[e]
                    ext[u] -= weights[e]
                else:
                    gain[u] += 2.0 * weights[e]
                    ext[u] += weights[e]
        over = _overflow(fill, caps2, scale)
        cut = best_cut
        if not (best_over < start_over - 1e-15 or (best_over <= start_over + 1e-15 and best_cut < start_cut - 1e-9)):
            break
    return cut, over


@njit(cache=True)
def _over_mask(fill, caps2):
    m = 0
    for s in range(2):
        for d in range(fill.shape[1]):
            if fill[s, d] > caps2[s, d]:
                m |= 1 << (s * fill.shape[1] + d)
    return m


@njit(cache=True)
def rebalance_heap(indptr, indices, weights, loads, side, caps2, max_moves):
    """:func:`~corefold.mapping.partition.initial.rebalance`'s single moves from a heap.

    The rule is the same — among the moves that lower the total normalised overflow,
    the one of largest cut gain — but the candidates come from a max-heap of cut gains
    instead of a scan of all n vertices per move: the top vertex is moved if its move
    lowers the overflow, else set aside until the set of overfull (side, dimension)
    pairs changes. When the heap runs dry with a side still over, the caller's full
    :func:`rebalance` (with its move pairs) finishes. ``side`` (int64 0/1) is updated in
    place.

    Complexity: O((n + m) log n) per change of the overfull set, at most 2 * dims + 2
    changes (then it stops), instead of O(moves * n).

    Returns:
        (moves, overflow left).
    """
    n = indptr.shape[0] - 1
    dims = loads.shape[1]
    fill = side_fill(side, loads)
    scale = np.empty(dims)
    for d in range(dims):
        scale[d] = 1.0 / max(caps2[0, d] + caps2[1, d], 1)
    over = _overflow(fill, caps2, scale)
    if over == 0.0:
        return 0, 0.0
    gain = np.zeros(n)
    for v in range(n):
        for e in range(indptr[v], indptr[v + 1]):
            if side[indices[e]] != side[v]:
                gain[v] += weights[e]
            else:
                gain[v] -= weights[e]
    # NOTE: a heap of 4n entries, rebuilt from the current gains when a move would not
    # fit its pushes (a bound of m pushes would allocate O(m) per call, per level).
    cap = 4 * n + 16
    hk = np.empty(cap)
    hv = np.empty(cap, np.int64)
    size = 0
    for v in range(n):
        size = _heap_push(hk, hv, size, -gain[v], v)
    deferred = np.empty(n, np.int64)
    is_deferred = np.zeros(n, np.bool_)
    ndef = 0
    mask = _over_mask(fill, caps2)
    rebuilds = 0
    moves = 0
    while moves < max_moves and over > 0.0:
        m = _over_mask(fill, caps2)
        if m != mask:
            # NOTE: the overfull set can flip back and forth (a move overshoots into the
            # other side); bound the rebuilds so a call stays O((n + m) log m).
            rebuilds += 1
            if rebuilds > 2 * dims + 2:
                break
            mask = m
            for i in range(ndef):
                is_deferred[deferred[i]] = False
            ndef = 0
            size = 0
            for u in range(n):
                size = _heap_push(hk, hv, size, -gain[u], u)
        if size == 0:
            break
        key, v, size = _heap_pop(hk, hv, size)
        if -key != gain[v] or is_deferred[v]:
            continue
        s = side[v]
        t = 1 - s
        for d in range(dims):
            fill[s, d] -= loads[v, d]
            fill[t, d] += loads[v, d]
        new_over = _overflow(fill, caps2, scale)
        if new_over >= over - 1e-15:
            for d in range(dims):
                fill[s, d] += loads[v, d]
                fill[t, d] -= loads[v, d]
            is_deferred[v] = True
            deferred[ndef] = v
            ndef += 1
            continue
        over = new_over
        side[v] = t
        gain[v] = -gain[v]
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if side[u] == t:
                gain[u] -= 2.0 * weights[e]
            else:
                gain[u] += 2.0 * weights[e]
        if size + indptr[v + 1] - indptr[v] + 1 > cap:
            size = 0
            for u in range(n):
                if not is_deferred[u]:
                    size = _heap_push(hk, hv, size, -gain[u], u)
        else:
            size = _heap_push(hk, hv, size, -gain[v], v)
            for e in range(indptr[v], indptr[v + 1]):
                u = indices[e]
                size = _heap_push(hk, hv, size, -gain[u], u)
        moves += 1
    return moves, over
