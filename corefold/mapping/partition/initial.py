r"""Initial cut by greedy graph growing (SPEC M4 §3), as METIS's ``initpart.c``.

Bisection: start from a random vertex; every unselected vertex v has the selection cost
:math:`g(v) = w(v, U) - w(v, S)` (edges to unselected minus edges to selected); the cheapest
vertex is moved into S and its neighbours' costs drop by 2w. A binary heap with lazy
deletion holds the costs. Growing stops when the next vertex would push S over its target
load in any dimension (neurons, synapses). Several random starts are tried and the cheapest
cut is kept after a short capacity-aware two-way refinement (:mod:`.fm`), with the sides
first brought within their capacities (:mod:`.balance`).

The other phases of a bisection live beside this one: :mod:`.fm` (Fiduccia-Mattheyses),
:mod:`.balance` (rebalancing), :mod:`.multilevel` (coarsen, grow, FM while uncoarsening)
and :mod:`.recursive` (recursive bisection along the target region, on threads).

Complexity: a bisection is O((n + m) log m) per restart.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from corefold.mapping.nets import incidence
from corefold.mapping.objectives import edge_costs
from corefold.mapping.partition.balance import balance_caps, lower_bounds, rebalance_sides
from corefold.mapping.partition.bisection import CUT_DIST
from corefold.mapping.partition.fm import fm_refine
from corefold.mapping.partition.fm_nets import cut_nets, fm_refine_nets, grow_bisection_nets
from corefold.mapping.partition.heap import heap_pop, heap_push
from corefold.mapping.partition.refine import refine


@njit(cache=True, nogil=True)
def grow_bisection(indptr, indices, weights, loads, target, starts, bias):
    """Greedy graph growing from ``starts[0]`` (later entries seed new components).

    ``bias[v]`` is a fixed extra cost of selecting v (its external edges' cost on side 0
    minus on side 1; zeros for a plain bisection).

    Returns:
        (side, cut): side[v] = 0 for selected, 1 otherwise; the weight crossing.
    """
    n = indptr.shape[0] - 1
    side = np.ones(n, np.int8)
    gain = bias.copy()
    for v in range(n):
        for e in range(indptr[v], indptr[v + 1]):
            gain[v] += weights[e]
    cap = indptr[n] + n + 1  # one push per start and per edge at most
    hk = np.empty(cap)
    hv = np.empty(cap, np.int64)
    size = 0
    sel = np.zeros(loads.shape[1], np.int64)
    next_start = 0
    done = False
    while not done:
        if size == 0:
            while next_start < starts.shape[0] and side[starts[next_start]] == 0:
                next_start += 1
            if next_start >= starts.shape[0]:
                break
            v0 = starts[next_start]
            size = heap_push(hk, hv, size, gain[v0], v0)
        key, v, size = heap_pop(hk, hv, size)
        if side[v] == 0 or key != gain[v]:
            continue
        for d in range(loads.shape[1]):
            if sel[d] + loads[v, d] > target[d]:
                done = True
        if done:
            break
        side[v] = 0
        for d in range(loads.shape[1]):
            sel[d] += loads[v, d]
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if side[u] == 1:
                gain[u] -= 2.0 * weights[e]
                size = heap_push(hk, hv, size, gain[u], u)
    cut = 0.0
    for v in range(n):
        for e in range(indptr[v], indptr[v + 1]):
            if side[v] != side[indices[e]]:
                cut += weights[e]
    return side, 0.5 * cut


def bisect(indptr, indices, weights, loads, caps2: np.ndarray, rng: np.random.Generator,
           restarts: int = 4, refine_passes: int = 2, fm: bool = True,
           bias: np.ndarray | None = None, rebalance_moves: int = 0,
           rebalance_tolerance: float | None = None, nets: tuple | None = None) -> np.ndarray:
    """Split a graph into sides 0/1 holding loads in proportion to ``caps2`` (2, dims).

    Each restart grows side 0 from a random vertex to its share of the total load, then
    refines the cut (Fiduccia-Mattheyses, or the seed's greedy moves if ``fm`` is False)
    without overfilling either side's capacity; the cheapest cut whose
    sides fit is kept (the cheapest overall if none fits). With ``rebalance_moves`` > 0 a
    grown side over a capacity is first repaired by :func:`rebalance` (at most that many moves),
    aimed at :func:`balance_caps` with ``rebalance_tolerance``. With ``nets`` (pin sets
    ``(ptr, pins, weight)`` on these vertices) the objective is the weight of the cut nets
    instead of the cut edges: side 0 grows by :func:`~.fm_nets.grow_bisection_nets` and is
    refined by :func:`~.fm_nets.fm_refine_nets` (the multicast objective's connectivity;
    growing on the nets rather than the edges: lenet's top bisection, mean cut over 6
    seeds 1,165 -> 952).

    Returns:
        int64 side per vertex.
    """
    n = indptr.shape[0] - 1
    if bias is None:
        bias = np.zeros(n)
    total = loads.sum(axis=0)
    share = caps2[0] / np.maximum(caps2.sum(axis=0), 1)
    target = np.floor(total * share).astype(np.int64)
    best, best_key = None, None
    aim = balance_caps(total, caps2, rebalance_tolerance)
    if nets is not None:
        vptr, vnets = incidence(nets[0], nets[1], n)
    for _ in range(max(1, restarts)):
        starts = rng.permutation(n).astype(np.int64)
        if nets is not None:
            side = grow_bisection_nets(*nets, vptr, vnets, loads, target, starts, bias)
        else:
            side, _ = grow_bisection(indptr, indices, weights, loads, target, starts, bias)
            side = side.astype(np.int64)
        if rebalance_moves:
            rebalance_sides(indptr, indices, weights, loads, side, caps2, rebalance_moves, aim)
        fill = np.stack([loads[side == 0].sum(axis=0), loads[side == 1].sum(axis=0)])
        if fm and nets is not None:
            fm_refine_nets(*nets, vptr, vnets, loads, side, caps2, lower_bounds(total, caps2), max(50, n // 20), bias)
            fill = np.stack([loads[side == 0].sum(axis=0), loads[side == 1].sum(axis=0)])
        elif fm:
            fm_refine(indptr, indices, weights, loads, side, caps2, lower_bounds(total, caps2),
                      max(50, n // 20), bias)
            fill = np.stack([loads[side == 0].sum(axis=0), loads[side == 1].sum(axis=0)])
        else:
            refine(indptr, indices, weights, loads, side, fill, caps2, CUT_DIST, rng, passes=refine_passes)
        if nets is not None:
            c = cut_nets(*nets, side) + float(bias[side == 0].sum())
        else:
            c = edge_costs(indptr, indices, weights, side, CUT_DIST)[0] + float(bias[side == 0].sum())
        over = float(np.maximum(fill - caps2, 0).sum())
        key = (over, c)
        if best_key is None or key < best_key:
            best, best_key = side, key
    return best
