r"""Fiduccia-Mattheyses on a bisection of a hypergraph: the cut-net objective.

For the multicast objective the partitioner minimises the connectivity
:math:`\sum_e w_e(\lambda_e - 1)` (KaHyPar's km1); on one bisection that is the weight of
the nets with pins on both sides, and cut-net splitting (:func:`~corefold.mapping.nets.restrict`)
makes the recursive bisection's sum of cut nets the k-way connectivity.

With :math:`\Phi(e, a)` the pins of net e on side a, moving v from side s to t gains

.. math:: g(v) = \sum_{e \ni v} w_e \big([\Phi(e,s) = 1] - [\Phi(e,t) = 0]\big)

(plus the external bias, as :func:`~.fm.fm_refine`). After the move the gains of the other
pins change only where :math:`\Phi` crosses 0, 1 or 2 (Fiduccia & Mattheyses 1982): with
the counts before the move, :math:`\Phi(e,t) = 0` raises every pin on s by :math:`w_e`,
:math:`\Phi(e,s) = 2` raises the other pin on s, :math:`\Phi(e,t) = 1` lowers the pin on
t, :math:`\Phi(e,s) = 1` lowers every pin on t; v's own gain changes sign.

A pass moves the unlocked vertex of largest gain whose move keeps both sides within their
capacities and above their lower bounds, locks it, and stops after ``stall`` moves
without a better objective; the moves after the best prefix are undone. Passes repeat
while they improve. O(pins + moves * (net degree + critical nets' pins) * log) per pass.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from corefold.mapping.partition.bisection import side_fill
from corefold.mapping.partition.heap import heap_pop, heap_push


@njit(cache=True, nogil=True)
def net_counts(hptr, hpins, side):
    """Pins of every net on each side, int64 (nets, 2). O(pins)."""
    nets = hptr.shape[0] - 1
    phi = np.zeros((nets, 2), np.int64)
    for e in range(nets):
        for p in range(hptr[e], hptr[e + 1]):
            phi[e, side[hpins[p]]] += 1
    return phi


@njit(cache=True, nogil=True)
def cut_nets(hptr, hpins, hw, side):
    """Weight of the nets with pins on both sides. O(pins)."""
    phi = net_counts(hptr, hpins, side)
    total = 0.0
    for e in range(hptr.shape[0] - 1):
        if phi[e, 0] > 0 and phi[e, 1] > 0:
            total += hw[e]
    return total


@njit(cache=True, nogil=True)
def net_gains(hptr, hpins, hw, vptr, vnets, side, phi):
    """Cut-net gain of moving each vertex to the other side (module docstring). O(pins)."""
    n = vptr.shape[0] - 1
    gain = np.zeros(n)
    for v in range(n):
        s = side[v]
        for i in range(vptr[v], vptr[v + 1]):
            e = vnets[i]
            if phi[e, s] == 1:
                gain[v] += hw[e]
            if phi[e, 1 - s] == 0:
                gain[v] -= hw[e]
    return gain


@njit(cache=True, nogil=True)
def _move(hptr, hpins, hw, vptr, vnets, side, phi, gain, locked, v, hk, hv, size, cap):
    """Move v to the other side, updating the counts and every changed gain; pushes raised
    gains of unlocked pins when ``cap`` > 0. Returns the new heap size (-1: heap full)."""
    s = side[v]
    t = 1 - s
    full = False
    for i in range(vptr[v], vptr[v + 1]):
        e = vnets[i]
        w = hw[e]
        ps = phi[e, s]
        pt = phi[e, t]
        if pt == 0 or ps == 2 or pt == 1 or ps == 1:
            for p in range(hptr[e], hptr[e + 1]):
                u = hpins[p]
                if u == v:
                    continue
                d = 0.0
                if side[u] == s:
                    if pt == 0:
                        d += w
                    if ps == 2:
                        d += w
                else:
                    if ps == 1:
                        d -= w
                    if pt == 1:
                        d -= w
                if d != 0.0:
                    gain[u] += d
                    if d > 0.0 and cap > 0 and not locked[u]:
                        if size < cap:
                            size = heap_push(hk, hv, size, -gain[u], u)
                        else:
                            full = True
        phi[e, s] = ps - 1
        phi[e, t] = pt + 1
    side[v] = t
    gain[v] = -gain[v]
    return -1 if full else size


@njit(cache=True, nogil=True)
def fm_refine_nets(hptr, hpins, hw, vptr, vnets, loads, side, caps2, lower2, stall, bias, passes=4):
    """FM passes on the cut-net objective; ``side`` (int64 0/1) is updated in place.

    Args:
        hptr, hpins, hw: the nets (pin sets, weights).
        vptr, vnets: vertex -> nets (:func:`~corefold.mapping.nets.incidence`).
        bias: per vertex, added to the objective when the vertex is on side 0.

    Returns:
        the objective (cut nets plus bias) after refinement.
    """
    n = vptr.shape[0] - 1
    dims = loads.shape[1]
    fill = side_fill(side, loads)
    phi = net_counts(hptr, hpins, side)
    gain = net_gains(hptr, hpins, hw, vptr, vnets, side, phi)
    cut = 0.0
    for e in range(hptr.shape[0] - 1):
        if phi[e, 0] > 0 and phi[e, 1] > 0:
            cut += hw[e]
    for v in range(n):
        if side[v] == 0:
            gain[v] += bias[v]
            cut += bias[v]
        else:
            gain[v] -= bias[v]
    cap = 4 * n + 16
    hk = np.empty(cap)
    hv = np.empty(cap, np.int64)
    locked = np.zeros(n, np.bool_)
    moved = np.empty(n, np.int64)
    nolock = np.zeros(n, np.bool_)
    pushed = np.zeros(n, np.bool_)
    for _ in range(passes):
        size = 0
        for v in range(n):
            locked[v] = False
            pushed[v] = False
        for e in range(hptr.shape[0] - 1):  # the pins of cut nets: the boundary
            if phi[e, 0] > 0 and phi[e, 1] > 0:
                for p in range(hptr[e], hptr[e + 1]):
                    u = hpins[p]
                    if not pushed[u] and size < cap:
                        pushed[u] = True
                        size = heap_push(hk, hv, size, -gain[u], u)
        best_cut = cut
        best_len = 0
        nmoved = 0
        since = 0
        cur = cut
        while size > 0 and since < stall:
            key, v, size = heap_pop(hk, hv, size)
            if locked[v]:
                continue
            if -key != gain[v]:
                if -key > gain[v] and size < cap:
                    size = heap_push(hk, hv, size, -gain[v], v)
                continue
            s = side[v]
            t = 1 - s
            ok = True
            for d in range(dims):
                if fill[t, d] + loads[v, d] > caps2[t, d] or fill[s, d] - loads[v, d] < lower2[s, d]:
                    ok = False
            if not ok:
                continue
            for d in range(dims):
                fill[s, d] -= loads[v, d]
                fill[t, d] += loads[v, d]
            locked[v] = True
            cur -= gain[v]
            # the bias term flips with v's side; _move negates the whole gain, bias included
            size = _move(hptr, hpins, hw, vptr, vnets, side, phi, gain, locked, v, hk, hv, size, cap)
            if size < 0:  # heap full: rebuild it from the unlocked vertices' current gains
                size = 0
                for u in range(n):
                    if not locked[u] and size < cap:
                        size = heap_push(hk, hv, size, -gain[u], u)
            moved[nmoved] = v
            nmoved += 1
            if cur < best_cut - 1e-9:
                best_cut = cur
                best_len = nmoved
                since = 0
            else:
                since += 1
        for i in range(nmoved - 1, best_len - 1, -1):
            v = moved[i]
            t = side[v]
            for d in range(dims):
                fill[t, d] -= loads[v, d]
                fill[1 - t, d] += loads[v, d]
            _move(hptr, hpins, hw, vptr, vnets, side, phi, gain, nolock, v, hk, hv, 0, 0)
        improved = best_cut < cut - 1e-9
        cut = best_cut
        if not improved:
            break
    return cut


@njit(cache=True, nogil=True)
def grow_bisection_nets(hptr, hpins, hw, vptr, vnets, loads, target, starts, bias):
    """Greedy hypergraph growing (KaHyPar's GHG with cut-net gains): side 0 starts empty
    and takes, one at a time, the vertex next to it (sharing a net with side 0) whose move
    raises the cut least (largest :func:`net_gains`), until the next would pass ``target``
    in some dimension; ``starts`` seed new components when the frontier runs dry.
    O((pins + critical pins per move) log) overall.

    Returns:
        int64 side per vertex (0 selected, 1 not).
    """
    n = vptr.shape[0] - 1
    side = np.ones(n, np.int64)
    phi = net_counts(hptr, hpins, side)
    gain = net_gains(hptr, hpins, hw, vptr, vnets, side, phi)
    for v in range(n):
        gain[v] -= bias[v]  # side 1 -> 0 adds bias[v] to the objective
    cap = 4 * n + 16
    hk = np.empty(cap)
    hv = np.empty(cap, np.int64)
    size = 0
    locked = np.zeros(n, np.bool_)  # on side 0: no more pushes
    frontier = np.zeros(n, np.bool_)
    sel = np.zeros(loads.shape[1], np.int64)
    next_start = 0
    while True:
        if size == 0:
            while next_start < starts.shape[0] and side[starts[next_start]] == 0:
                next_start += 1
            if next_start >= starts.shape[0]:
                break
            v0 = starts[next_start]
            size = heap_push(hk, hv, size, -gain[v0], v0)
        key, v, size = heap_pop(hk, hv, size)
        if side[v] == 0 or -key != gain[v]:
            continue
        over = False
        for d in range(loads.shape[1]):
            if sel[d] + loads[v, d] > target[d]:
                over = True
        if over:
            break
        for d in range(loads.shape[1]):
            sel[d] += loads[v, d]
        locked[v] = True
        size = _move(hptr, hpins, hw, vptr, vnets, side, phi, gain, locked, v, hk, hv, size, cap)
        if size < 0:
            size = 0
            for u in range(n):
                if frontier[u] and side[u] == 1 and size < cap:
                    size = heap_push(hk, hv, size, -gain[u], u)
        # the pins of v's nets join the frontier (gains that fell are not pushed by _move)
        for i in range(vptr[v], vptr[v + 1]):
            e = vnets[i]
            for p in range(hptr[e], hptr[e + 1]):
                u = hpins[p]
                if side[u] == 1 and not frontier[u]:
                    frontier[u] = True
                    if size < cap:
                        size = heap_push(hk, hv, size, -gain[u], u)
    return side
