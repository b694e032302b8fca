r"""Rebalancing a bisection when two capacities bind (neurons and synapses per core).

Greedy growing and Fiduccia-Mattheyses fill a side up to a capacity. With two binding
capacities the sides end full in *different* dimensions (one at its neuron capacity, the
other at its synapse capacity), and FM, which never overfills a side, can then move almost
nothing. :func:`~corefold.mapping.partition.balance.balance_caps` aims each side at its
*share* of both loads instead, and :func:`rebalance_heap` moves vertices there, largest
cut gain first, so that FM on the next level has room in both dimensions (the balance
condition of multi-constraint partitioning, Karypis & Kumar 1998, applied before FM).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from corefold.mapping.partition.bisection import (
    bisection_overflow,
    flip,
    flip_gains,
    overflow_if_flipped,
    overflow_scale,
    side_fill,
)
from corefold.mapping.partition.heap import heap_pop, heap_push


@njit(cache=True, nogil=True)
def _over_mask(fill, caps2):
    m = 0
    for s in range(2):
        for d in range(fill.shape[1]):
            if fill[s, d] > caps2[s, d]:
                m |= 1 << (s * fill.shape[1] + d)
    return m


@njit(cache=True, nogil=True)
def rebalance_heap(indptr, indices, weights, loads, side, caps2, max_moves):
    """:func:`~corefold.mapping.partition.balance.rebalance`'s single moves from a heap.

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
    scale = overflow_scale(caps2)
    over = bisection_overflow(fill, caps2, scale)
    if over == 0.0:
        return 0, 0.0
    gain = flip_gains(indptr, indices, weights, side)
    # NOTE: a heap of 4n entries, rebuilt from the current gains when a move would not
    # fit its pushes (a bound of m pushes would allocate O(m) per call, per level).
    cap = 4 * n + 16
    hk = np.empty(cap)
    hv = np.empty(cap, np.int64)
    size = 0
    for v in range(n):
        size = heap_push(hk, hv, size, -gain[v], v)
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
                size = heap_push(hk, hv, size, -gain[u], u)
        if size == 0:
            break
        key, v, size = heap_pop(hk, hv, size)
        if -key != gain[v] or is_deferred[v]:
            continue
        new_over = overflow_if_flipped(loads, side, fill, caps2, scale, v)
        if new_over >= over - 1e-15:
            is_deferred[v] = True
            deferred[ndef] = v
            ndef += 1
            continue
        over = new_over
        flip(indptr, indices, weights, loads, side, fill, gain, v)
        if size + indptr[v + 1] - indptr[v] + 1 > cap:
            size = 0
            for u in range(n):
                if not is_deferred[u]:
                    size = heap_push(hk, hv, size, -gain[u], u)
        else:
            size = heap_push(hk, hv, size, -gain[v], v)
            for e in range(indptr[v], indptr[v + 1]):
                u = indices[e]
                size = heap_push(hk, hv, size, -gain[u], u)
        moves += 1
    return moves, over
