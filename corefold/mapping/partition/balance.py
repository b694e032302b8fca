r"""Balancing a bisection over its capacities, as METIS's ``balance.c``.

Greedy growing stops at the first capacity it reaches and FM never moves into a full
side, so with two binding capacities (neurons and synapses) a bisection can leave a side
far over. :func:`rebalance` moves vertices, cut-cheapest first, until both sides fit;
:func:`balance_caps` aims the sides at their *share* of both loads when two capacities
bind, and :func:`rebalance_sides` gets there with the heap moves of
:mod:`.multiconstraint` first. :func:`lower_bounds` keeps a biased bisection from emptying
a side.
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
from corefold.mapping.partition.multiconstraint import rebalance_heap


@njit(cache=True, nogil=True)
def _best_flip(loads, side, fill, caps2, scale, gain, ref, skip, need_decrease):
    """The flip with the largest cut gain among those that take the overflow below ``ref``
    (``need_decrease``), else the flip that raises it least (ties: larger gain)."""
    n = side.shape[0]
    best_v = -1
    best_g = -np.inf
    best_o = np.inf
    for v in range(n):
        if v == skip:
            continue
        delta = overflow_if_flipped(loads, side, fill, caps2, scale, v) - ref
        if need_decrease:
            if delta < -1e-15 and (gain[v] > best_g or (gain[v] == best_g and delta < best_o)):
                best_v, best_g, best_o = v, gain[v], delta
        elif delta < best_o - 1e-15 or (abs(delta - best_o) <= 1e-15 and gain[v] > best_g):
            best_v, best_g, best_o = v, gain[v], delta
    return best_v


@njit(cache=True, nogil=True)
def rebalance(indptr, indices, weights, loads, side, caps2, max_moves):
    """Move vertices across a bisection until both sides fit ``caps2``, cut-cheapest first.

    Each step takes, among all moves that lower the total overflow
    sum_d max(0, fill - cap) / cap_d of the two sides, the one with the largest cut gain.
    When no single move lowers it (both capacities tight: a heavy vertex must go one way
    and a light one the other), the move that raises it least is paired with the best
    move that then brings it below where it was, or the search stops. Greedy growing stops
    at the first capacity it reaches and FM never moves into a full side, so with two
    binding capacities (neurons and synapses) a bisection can leave a side far over.
    ``side`` (int64 0/1) is updated in place. O(moves * n + m), moves at most
    ``max_moves`` and at most max(100, 3e8 / n); nothing when both fit.

    Returns:
        the number of moves.
    """
    n = indptr.shape[0] - 1
    fill = side_fill(side, loads)
    scale = overflow_scale(caps2)
    if bisection_overflow(fill, caps2, scale) == 0.0:
        return 0
    gain = flip_gains(indptr, indices, weights, side)
    moves = 0
    # NOTE: each step scans all n vertices; cap the work at about 3e8 vertex visits
    limit = min(max_moves, max(100, 300_000_000 // (n + 1)))
    while moves < limit:
        before = bisection_overflow(fill, caps2, scale)
        if before == 0.0:
            break
        v = _best_flip(loads, side, fill, caps2, scale, gain, before, -1, True)
        if v >= 0:
            flip(indptr, indices, weights, loads, side, fill, gain, v)
            moves += 1
            continue
        v1 = _best_flip(loads, side, fill, caps2, scale, gain, before, -1, False)
        if v1 < 0:
            break
        flip(indptr, indices, weights, loads, side, fill, gain, v1)
        v2 = _best_flip(loads, side, fill, caps2, scale, gain, before, v1, True)
        if v2 < 0:
            flip(indptr, indices, weights, loads, side, fill, gain, v1)
            break
        flip(indptr, indices, weights, loads, side, fill, gain, v2)
        moves += 2
    return moves


#: A dimension binds a bisection when its total load is at least this fraction of the two
#: sides' capacity. Measured: at 0.1, mobilenet-tiny on the neuromorphic preset (synapse
#: memory 30% used) was aimed at synapse shares it did not need: 6.75e5 traffic in 9.1 s,
#: against 5.62e5 in 2.2 s at 0.5 (also for :func:`lower_bounds`); lenet-tight (91% used)
#: is the same at 0.1 and 0.5 and 4% worse on seed 0 at 0.8.
BINDING_FRACTION = 0.5


def balance_caps(total: np.ndarray, caps2: np.ndarray, tolerance: float | None) -> np.ndarray:
    """The loads :func:`rebalance_sides` aims each side at: its share of ``total`` times
    (1 + ``tolerance``), never above ``caps2``; ``caps2`` itself when ``tolerance`` is None
    or fewer than two dimensions bind (total at least :data:`BINDING_FRACTION` of the
    capacity).

    Rebalancing to the capacities leaves each side full in a different dimension when two
    capacities bind (one side at its neurons, the other at its synapses); FM then finds no
    improving sequence (lenet-tight: the top bisection stayed at a cut of 85k through all
    11 levels). Aimed at the shares, both sides keep room in both dimensions and the
    forced moves are the cut-cheapest ones (the same top bisection: 35k). O(dims).
    """
    binding = total >= BINDING_FRACTION * caps2.sum(axis=0)
    if tolerance is None or binding.sum() < 2:
        return caps2
    share = caps2 / np.maximum(caps2.sum(axis=0), 1)
    aim = np.ceil(share * total[None, :] * (1.0 + tolerance) - 1e-9).astype(np.int64)
    return np.where(binding[None, :], np.minimum(aim, caps2), caps2)


def rebalance_sides(indptr, indices, weights, loads, side, caps2, max_moves, aim: np.ndarray | None = None) -> int:
    """:func:`rebalance` to ``caps2``, or first towards ``aim`` (:func:`balance_caps`).

    Towards an ``aim`` below the capacities, single moves come from a heap
    (:func:`~.multiconstraint.rebalance_heap`, O((n + m) log n)), then again towards
    ``caps2`` if a side is still over it; the full scan with move pairs (O(moves * n))
    only finishes what single moves cannot.
    """
    if aim is None or np.array_equal(aim, caps2):
        return rebalance(indptr, indices, weights, loads, side, caps2, max_moves)
    moves, left = rebalance_heap(indptr, indices, weights, loads, side, aim, max_moves)
    if left > 0.0 and moves < max_moves:
        more, left = rebalance_heap(indptr, indices, weights, loads, side, caps2, max_moves - moves)
        moves += more
    if left > 0.0 and moves < max_moves:
        moves += rebalance(indptr, indices, weights, loads, side, caps2, max_moves - moves)
    return moves


def lower_bounds(total: np.ndarray, caps2: np.ndarray, tolerance: float = 0.03) -> np.ndarray:
    """Least load each side must keep: its share of ``total`` less ``tolerance``.

    Only for dimensions that bind (total at least :data:`BINDING_FRACTION` of the
    capacity); this stops a biased bisection from emptying a side whose cores would then
    idle, and leaves a dimension with room to spare (a synapse memory 30% used) free.
    """
    share = caps2 / np.maximum(caps2.sum(axis=0), 1)
    lower = np.floor(share * total[None, :] * (1.0 - tolerance)).astype(np.int64)
    binding = total >= BINDING_FRACTION * caps2.sum(axis=0)
    return np.where(binding[None, :], lower, 0)
