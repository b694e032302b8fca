r"""Exchanges that unblock moves into full cores (two binding capacities).

When every core is full in neurons or synapses, most improving moves ``a: i -> t`` are
refused, and :func:`~corefold.mapping.partition.refine.swap_pass` only pairs ``a`` with a
vertex that itself wants to go ``t -> i``. :func:`eject_pass` pairs ``a`` with the vertex
``b`` of ``t`` whose eviction to ``i`` costs least, even when that eviction alone raises the
traffic: the pair is taken when the exact joint change

.. math:: \Delta = \Delta_a(i \to t) + \Delta_b(t \to i \mid a \in t) < 0

and both cores keep every capacity (e.g. a synapse-heavy neuron moves next to its
inputs and a synapse-free input pixel makes room for it).

Complexity: a pass is O(m + b log b) for the b boundary vertices plus
O(sum over blocked moves of sum_{v in t} deg v), at most ``scan`` members of t each.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from corefold.mapping.objectives import edge_costs
from corefold.mapping.partition.refine import (
    ObjectiveMismatch,
    best_moves,
    boundary_around,
    boundary_vertices,
    move_delta,
    refine,
    swap_pass,
)


@njit(cache=True, nogil=True)
def _eject(indptr, indices, weights, loads, part, fill, caps, dist, cand, target, mptr, members, scan):
    dims = loads.shape[1]
    gain = 0.0
    changes = 0
    for idx in range(cand.shape[0]):
        a = cand[idx]
        t = target[idx]
        i = part[a]
        if t == i:
            continue
        da = move_delta(indptr, indices, weights, part, dist, a, t)
        if da >= -1e-9:
            continue
        fits = True
        for d in range(dims):
            if fill[t, d] + loads[a, d] > caps[t, d]:
                fits = False
        if fits:
            part[a] = t
            for d in range(dims):
                fill[i, d] -= loads[a, d]
                fill[t, d] += loads[a, d]
            gain -= da
            changes += 1
            continue
        part[a] = t
        best = -1e-9
        bb = -1
        seen = 0
        for p in range(mptr[t], mptr[t + 1]):
            b = members[p]
            if part[b] != t or b == a:
                continue
            ok = True
            for d in range(dims):
                if fill[t, d] + loads[a, d] - loads[b, d] > caps[t, d]:
                    ok = False
                if fill[i, d] - loads[a, d] + loads[b, d] > caps[i, d]:
                    ok = False
            if not ok:
                continue
            seen += 1
            db = move_delta(indptr, indices, weights, part, dist, b, i)
            if da + db < best:
                best = da + db
                bb = b
            if seen >= scan:
                break
        if bb < 0:
            part[a] = i
            continue
        part[bb] = i
        for d in range(dims):
            fill[i, d] += loads[bb, d] - loads[a, d]
            fill[t, d] += loads[a, d] - loads[bb, d]
        gain -= best
        changes += 1
    return gain, changes


def eject_pass(indptr, indices, weights, loads, part, fill, caps, dist, scan: int = 128) -> tuple[float, int]:
    """Improving moves into full cores, each paired with the cheapest eviction back.

    Every boundary vertex's best move (ignoring capacity) with a negative delta is tried,
    best first: it is made if the target fits, else paired with the member ``b`` of the
    target (at most ``scan`` load-compatible members, lightest edge weight first) whose
    move to the source minimises the exact joint delta; the pair is made when that is
    negative. Updates ``part`` and ``fill`` in place; never exceeds ``caps``.

    Returns:
        (decrease of sum w * D, changes). Complexity: see the module docstring.
    """
    cand = boundary_vertices(indptr, indices, part)
    if cand.size == 0:
        return 0.0, 0
    target, delta = best_moves(indptr, indices, weights, part, dist, cand)
    keep = (target >= 0) & (delta < 0)
    cand, target, delta = cand[keep], target[keep], delta[keep]
    if cand.size == 0:
        return 0.0, 0
    order = np.lexsort((cand, delta))
    k = dist.shape[0]
    wdeg = np.add.reduceat(weights, indptr[:-1]) if weights.size else np.zeros(part.size)
    wdeg = np.where(np.diff(indptr) > 0, wdeg, 0.0)
    members = np.lexsort((np.arange(part.size), wdeg, part)).astype(np.int64)
    mptr = np.zeros(k + 1, np.int64)
    mptr[1:] = np.cumsum(np.bincount(part, minlength=k))
    return _eject(indptr, indices, weights, loads, part, fill, caps, dist, cand[order].astype(np.int64),
                  target[order].astype(np.int64), mptr, members, scan)


def refine_with_exchanges(indptr, indices, weights, loads, part, fill, caps, dist, rng: np.random.Generator,
                          rounds: int = 8, move_passes: int = 3, min_gain: float = 0.0, scan: int = 128,
                          debug: bool = False) -> float:
    """Rounds of (move refinement, pairwise swaps, :func:`eject_pass`) until a round gains
    less than ``min_gain`` of the objective (at most ``rounds``); the eject pass (none when
    ``scan`` is 0) is dropped from later rounds once it gains less than twice that itself.
    A round's moves start from the boundary around what the previous round changed
    (:func:`~.refine.boundary_around`; the first round from every boundary vertex).

    ``part``/``fill`` updated in place, never over ``caps``. Returns the total decrease of
    sum w * D. O(rounds * (move passes + swap pass + eject pass)).

    Raises:
        ObjectiveMismatch: debug only, if a round's tracked gain disagrees with recomputation.
    """
    total = 0.0
    cost = edge_costs(indptr, indices, weights, part, dist)[1]
    eject = scan > 0
    active = None
    for _ in range(rounds):
        start = part.copy()
        g = refine(indptr, indices, weights, loads, part, fill, caps, dist, rng, move_passes, debug, active)
        g += swap_pass(indptr, indices, weights, loads, part, fill, caps, dist)[0]
        if eject:
            ge = eject_pass(indptr, indices, weights, loads, part, fill, caps, dist, scan)[0]
            # NOTE: the eject pass costs O(scan * degree) per blocked move (0.4 s a pass on
            # cifar-cnn, 0.8 s on vgg-small); once it gains under twice min_gain it is not
            # run again (its late passes gained 0.3% on vgg-small for 0.7 s each)
            eject = ge >= 2.0 * min_gain * cost
            g += ge
        # NOTE: swaps and ejections barely change the fills, so a move far from what
        # changed rarely becomes possible
        active = boundary_around(indptr, indices, part, np.flatnonzero(part != start))
        total += g
        if debug:
            after = edge_costs(indptr, indices, weights, part, dist)[1]
            if not np.isclose(cost - after, g, rtol=1e-9, atol=1e-6):
                raise ObjectiveMismatch(f"objective function mismatch: exchanges gained {g}, "
                                        f"recomputed {cost - after}")
        if g <= 1e-12 or g < min_gain * cost:
            break
        cost -= g
    return total
