r"""Simulated annealing of single vertices between cores, capacities hard (small graphs).

The move, swap and eject passes only take improving steps and stall in a local minimum,
most of all when every core is full. This anneal proposes, for a random vertex a, the
core t of a random neighbour: a move if t has room, else a swap with a random member b
of t (both cores keep every capacity). The exact change of hop-weighted traffic

.. math:: \Delta = \Delta_a(i \to t) + \Delta_b(t \to i \mid a \in t)

is accepted by the Metropolis rule at a temperature falling geometrically from the mean
|delta| of sampled proposals to 1/500 of it; the best mapping seen is kept.

Complexity: O(steps * mean degree); memory O(k * c) for the member lists, c the most
vertices a core can hold.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from corefold.mapping.parallel import run_indexed
from corefold.mapping.partition.refine import move_delta


@njit(cache=True, nogil=True)
def _propose(indptr, indices, weights, loads, part, fill, caps, dist, members, size):
    """One random proposal: (a, t, b, delta); b = -1 for a move, a = -1 for none."""
    n = part.shape[0]
    dims = loads.shape[1]
    a = np.random.randint(n)
    deg = indptr[a + 1] - indptr[a]
    if deg == 0:
        return -1, -1, -1, 0.0
    t = part[indices[indptr[a] + np.random.randint(deg)]]
    i = part[a]
    if t == i:
        return -1, -1, -1, 0.0
    fits = True
    for d in range(dims):
        if fill[t, d] + loads[a, d] > caps[t, d]:
            fits = False
    da = move_delta(indptr, indices, weights, part, dist, a, t)
    if fits:
        return a, t, -1, da
    if size[t] == 0:
        return -1, -1, -1, 0.0
    b = members[t, np.random.randint(size[t])]
    for d in range(dims):
        if fill[t, d] + loads[a, d] - loads[b, d] > caps[t, d] or fill[i, d] - loads[a, d] + loads[b, d] > caps[i, d]:
            return -1, -1, -1, 0.0
    part[a] = t
    db = move_delta(indptr, indices, weights, part, dist, b, i)
    part[a] = i
    return a, t, b, da + db


@njit(cache=True, nogil=True)
def _anneal_vertices(indptr, indices, weights, loads, part, fill, caps, dist, steps, maxc, seed):
    np.random.seed(seed)
    n = part.shape[0]
    k = fill.shape[0]
    dims = loads.shape[1]
    members = np.empty((k, maxc), np.int64)
    size = np.zeros(k, np.int64)
    slot = np.empty(n, np.int64)
    for v in range(n):
        p = part[v]
        members[p, size[p]] = v
        slot[v] = size[p]
        size[p] += 1
    total = 0.0
    tried = 0
    for _ in range(256):
        a, t, b, d = _propose(indptr, indices, weights, loads, part, fill, caps, dist, members, size)
        if a >= 0:
            total += abs(d)
            tried += 1
    if tried == 0 or total == 0.0:
        return 0.0, part.copy()
    t0 = total / tried
    t1 = t0 / 500.0
    cool = (t1 / t0) ** (1.0 / max(steps, 1))
    temp = t0
    cur = 0.0
    best = 0.0
    # NOTE: an undo log of the moves since the best mapping seen, not a copy of the whole
    # mapping at every new best (n per improvement early on)
    log_v = np.empty(2 * steps, np.int64)
    log_p = np.empty(2 * steps, np.int64)
    nlog = 0
    for _ in range(steps):
        temp *= cool
        a, t, b, d = _propose(indptr, indices, weights, loads, part, fill, caps, dist, members, size)
        if a < 0:
            continue
        if d > 0.0 and np.random.random() >= np.exp(-d / temp):
            continue
        i = part[a]
        part[a] = t
        log_v[nlog] = a
        log_p[nlog] = i
        nlog += 1
        for dd in range(dims):
            fill[i, dd] -= loads[a, dd]
            fill[t, dd] += loads[a, dd]
        if b < 0:
            last = members[i, size[i] - 1]
            members[i, slot[a]] = last
            slot[last] = slot[a]
            size[i] -= 1
            members[t, size[t]] = a
            slot[a] = size[t]
            size[t] += 1
        else:
            part[b] = i
            log_v[nlog] = b
            log_p[nlog] = t
            nlog += 1
            for dd in range(dims):
                fill[t, dd] -= loads[b, dd]
                fill[i, dd] += loads[b, dd]
            sa = slot[a]
            sb = slot[b]
            members[i, sa] = b
            slot[b] = sa
            members[t, sb] = a
            slot[a] = sb
        cur += d
        if cur < best - 1e-9:
            best = cur
            nlog = 0
    best_part = part.copy()
    for j in range(nlog - 1, -1, -1):
        best_part[log_v[j]] = log_p[j]
    return -best, best_part


def anneal_vertices(indptr, indices, weights, loads, part, fill, caps, dist, steps: int, seed: int,
                    chains: int = 1, threads: int = 1) -> float:
    """Anneal the vertices' cores (see the module docstring); keeps the best mapping seen.

    Args:
        part, fill: the mapping, updated in place (fill[q] = loads summed over part q).
        caps: (k, dims) capacities, never exceeded.
        dist: (k, k) hop distances between the parts' cores.
        steps: proposals to make, shared by ``chains`` independent chains from the same
            mapping (seeds ``seed + i``; the best end is kept), run on up to ``threads``
            threads with the same result on any number.
        seed: the annealing's random seed.

    Returns:
        the decrease of hop-weighted traffic (>= 0).
    """
    k = fill.shape[0]
    n = part.shape[0]
    if n == 0 or steps <= 0 or k < 2:
        return 0.0
    smallest = int(loads[:, 0].min())
    maxc = n if smallest <= 0 else min(n, int(caps[:, 0].max()) // smallest + 1)
    chains = max(1, chains)
    per = max(1, int(steps) // chains)

    def chain(i: int):
        # NOTE: Numba's np.random state is per thread, and each chain seeds it first
        return _anneal_vertices(indptr, indices, weights, loads, part.copy(), fill.copy(), caps, dist, per, maxc,
                                seed + i)

    ends = run_indexed(chain, chains, threads)
    gain, best = max(ends, key=lambda end: end[0])  # first of equal ends: independent of scheduling
    part[:] = best
    for d in range(loads.shape[1]):
        fill[:, d] = np.bincount(part, weights=loads[:, d], minlength=k).astype(np.int64)
    return gain
