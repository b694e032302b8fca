r"""Initial cut by greedy graph growing, and recursive bisection (SPEC M4 §3).

Bisection: start from a random vertex; every unselected vertex v has the selection cost
:math:`g(v) = w(v, U) - w(v, S)` (edges to unselected minus edges to selected); the cheapest
vertex is moved into S and its neighbours' costs drop by 2w. A binary heap with lazy
deletion holds the costs. Growing stops when the next vertex would push S over its target
load in any dimension (neurons, synapses). Several random starts are tried and the cheapest
cut is kept after a short capacity-aware two-way refinement.

Recursive bisection splits a set of *slots* (cores, each with a capacity) into two with a
caller-supplied ``split`` function and bisects the graph in proportion to the two halves'
capacities, until every slot owns one part.

Complexity: a bisection is O((n + m) log m) per restart; the recursion does
O(log k) rounds over the whole graph.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import scipy.sparse as sp
from numba import njit

from corefold.mapping.partition.refine import refine

CUT_DIST = np.array([[0.0, 1.0], [1.0, 0.0]])


@njit(cache=True)
def _heap_push(hk, hv, size, key, v):
    i = size
    hk[i] = key
    hv[i] = v
    while i > 0:
        parent = (i - 1) >> 1
        if hk[parent] <= hk[i]:
            break
        hk[parent], hk[i] = hk[i], hk[parent]
        hv[parent], hv[i] = hv[i], hv[parent]
        i = parent
    return size + 1


@njit(cache=True)
def _heap_pop(hk, hv, size):
    key = hk[0]
    v = hv[0]
    size -= 1
    hk[0] = hk[size]
    hv[0] = hv[size]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        c = left
        if left + 1 < size and hk[left + 1] < hk[left]:
            c = left + 1
        if hk[i] <= hk[c]:
            break
        hk[c], hk[i] = hk[i], hk[c]
        hv[c], hv[i] = hv[i], hv[c]
        i = c
    return key, v, size


@njit(cache=True)
def grow_bisection(indptr, indices, weights, loads, target, starts):
    """Greedy graph growing from ``starts[0]`` (later entries seed new components).

    Returns:
        (side, cut): side[v] = 0 for selected, 1 otherwise; the weight crossing.
    """
    n = indptr.shape[0] - 1
    side = np.ones(n, np.int8)
    gain = np.zeros(n)
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
            size = _heap_push(hk, hv, size, gain[v0], v0)
        key, v, size = _heap_pop(hk, hv, size)
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
                size = _heap_push(hk, hv, size, gain[u], u)
    cut = 0.0
    for v in range(n):
        for e in range(indptr[v], indptr[v + 1]):
            if side[v] != side[indices[e]]:
                cut += weights[e]
    return side, 0.5 * cut


def bisect(indptr, indices, weights, loads, caps2: np.ndarray, rng: np.random.Generator,
           restarts: int = 4, refine_passes: int = 2) -> np.ndarray:
    """Split a graph into sides 0/1 holding loads in proportion to ``caps2`` (2, dims).

    Each restart grows side 0 from a random vertex to its share of the total load, then
    refines the cut without overfilling either side's capacity; the cheapest cut whose
    sides fit is kept (the cheapest overall if none fits).

    Returns:
        int64 side per vertex.
    """
    n = indptr.shape[0] - 1
    total = loads.sum(axis=0)
    share = caps2[0] / np.maximum(caps2.sum(axis=0), 1)
    target = np.floor(total * share).astype(np.int64)
    best, best_key = None, None
    for _ in range(max(1, restarts)):
        starts = rng.permutation(n).astype(np.int64)
        side, _ = grow_bisection(indptr, indices, weights, loads, target, starts)
        side = side.astype(np.int64)
        fill = np.stack([loads[side == 0].sum(axis=0), loads[side == 1].sum(axis=0)])
        refine(indptr, indices, weights, loads, side, fill, caps2, CUT_DIST, rng, passes=refine_passes)
        from corefold.mapping.objectives import _edge_costs

        c = _edge_costs(indptr, indices, weights, side, CUT_DIST)[0]
        over = float(np.maximum(fill - caps2, 0).sum())
        key = (over, c)
        if best_key is None or key < best_key:
            best, best_key = side, key
    return best


def halves(slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split a list of interchangeable slots in two halves (count-based recursion)."""
    h = slots.size // 2
    return slots[:h], slots[h:]


def recursive_bisection(indptr, indices, weights, loads, slot_caps: np.ndarray,
                        split: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
                        rng: np.random.Generator, restarts: int = 4) -> np.ndarray:
    """Assign every vertex to a slot by recursive bisection.

    Args:
        slot_caps: int64 (s, dims) capacity of each slot.
        split: splits an array of slot ids into two non-empty arrays.

    Returns:
        int64 slot id per vertex.
    """
    n = indptr.shape[0] - 1
    part = np.zeros(n, np.int64)
    full = sp.csr_matrix((weights, indices, indptr), shape=(n, n))
    stack = [(np.arange(n, dtype=np.int64), np.arange(slot_caps.shape[0], dtype=np.int64))]
    while stack:
        verts, slots = stack.pop()
        if slots.size == 1 or verts.size == 0:
            part[verts] = slots[0]
            continue
        s0, s1 = split(slots)
        caps2 = np.stack([slot_caps[s0].sum(axis=0), slot_caps[s1].sum(axis=0)])
        if verts.size == n:
            sub = full
        else:
            sub = full[verts][:, verts]
        side = bisect(sub.indptr.astype(np.int64), sub.indices.astype(np.int32), sub.data.astype(np.float64),
                      loads[verts], caps2, rng, restarts)
        stack.append((verts[side == 1], s1))
        stack.append((verts[side == 0], s0))
    return part
