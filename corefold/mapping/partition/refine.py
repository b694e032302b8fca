r"""Capacity-aware local refinement while uncoarsening (SPEC M4 §5), and capacity repair.

For vertex v in part i let :math:`W_j` be the weight of v's edges into part j. Moving v to
part k changes the objective by

.. math:: c_{ik} = \sum_j W_j\,(D_{kj} - D_{ij})

where D is a distance between parts. With :math:`D = 1 - I` this is the seed's move cost
:math:`W_i - W_k` (the cut); with D = hop distances between the parts' cores it is the
change of hop-weighted traffic. Vertices are visited in random order (boundary vertices
only: an interior vertex has :math:`c_{ik} \ge 0`); the cheapest negative move whose target
still fits every capacity is taken, else the next cheapest, and so on.

A pass is O(sum over boundary vertices of deg(v) + a(v)^2), a(v) = parts adjacent to v.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from corefold.errors import InternalError
from corefold.mapping.objectives import edge_costs, part_overflow


class ObjectiveMismatch(InternalError):
    """Debug mode: an incrementally tracked cost differs from its fresh recomputation."""


@njit(cache=True, nogil=True)
def _on_boundary(indptr, indices, part, v):
    """v has a neighbour in another part. O(deg v)."""
    for e in range(indptr[v], indptr[v + 1]):
        if part[indices[e]] != part[v]:
            return True
    return False


@njit(cache=True, nogil=True)
def boundary_vertices(indptr, indices, part):
    """Vertices with a neighbour in another part, ascending. O(m)."""
    n = indptr.shape[0] - 1
    out = np.empty(n, np.int64)
    k = 0
    for v in range(n):
        if _on_boundary(indptr, indices, part, v):
            out[k] = v
            k += 1
    return out[:k]


@njit(cache=True, nogil=True)
def _fits(fill, caps, loads, t, v):
    for d in range(loads.shape[1]):
        if fill[t, d] + loads[v, d] > caps[t, d]:
            return False
    return True


@njit(cache=True, nogil=True)
def boundary_around(indptr, indices, part, changed):
    """Boundary vertices among ``changed`` and their neighbours, ascending: the only
    vertices whose best move a pass of moves can have changed (an active set, as in
    KaHIP's and Jet's label propagation). O(sum of degrees of changed and their neighbours).
    """
    n = indptr.shape[0] - 1
    seen = np.zeros(n, np.bool_)
    cand = np.empty(n, np.int64)
    k = 0
    for i in range(changed.shape[0]):
        v = changed[i]
        if not seen[v]:
            seen[v] = True
            cand[k] = v
            k += 1
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if not seen[u]:
                seen[u] = True
                cand[k] = u
                k += 1
    out = np.empty(k, np.int64)
    b = 0
    for i in range(k):
        if _on_boundary(indptr, indices, part, cand[i]):
            out[b] = cand[i]
            b += 1
    return np.sort(out[:b])


@njit(cache=True, nogil=True)
def _weights_to_parts(indptr, indices, weights, part, v, stamp_id, acc, stamp, touched):
    """Sum v's edge weights per neighbouring part into ``acc`` (a sparse accumulator reset
    lazily through ``stamp``); ``touched[:nt]`` lists those parts. Returns nt. O(deg v)."""
    nt = 0
    for e in range(indptr[v], indptr[v + 1]):
        p = part[indices[e]]
        if stamp[p] != stamp_id:
            stamp[p] = stamp_id
            acc[p] = 0.0
            touched[nt] = p
            nt += 1
        acc[p] += weights[e]
    return nt


@njit(cache=True, nogil=True)
def refine_pass(indptr, indices, weights, loads, part, fill, caps, dist, order):
    """One pass of moves in ``order``; updates ``part`` and ``fill`` in place.

    Returns:
        (gain, moves): total decrease of sum w * D and number of moves.
    """
    k = dist.shape[0]
    acc = np.zeros(k)
    stamp = np.full(k, -1, np.int64)
    touched = np.empty(k, np.int64)
    gain = 0.0
    moves = 0
    for idx in range(order.shape[0]):
        v = order[idx]
        i = part[v]
        nt = _weights_to_parts(indptr, indices, weights, part, v, idx, acc, stamp, touched)
        if nt == 0 or (nt == 1 and touched[0] == i):
            continue
        base = 0.0
        for a in range(nt):
            j = touched[a]
            base += acc[j] * dist[i, j]
        best = -1e-9
        bt = -1
        for b in range(nt):
            t = touched[b]
            if t == i:
                continue
            c = -base
            for a in range(nt):
                j = touched[a]
                c += acc[j] * dist[t, j]
            if c < best and _fits(fill, caps, loads, t, v):
                best = c
                bt = t
        if bt >= 0:
            for d in range(loads.shape[1]):
                fill[i, d] -= loads[v, d]
                fill[bt, d] += loads[v, d]
            part[v] = bt
            gain -= best
            moves += 1
    return gain, moves


@njit(cache=True, nogil=True)
def _cheapest_moves(indptr, indices, weights, loads, part, fill, caps, dist, cand, fitting, any_part):
    """Each candidate's cheapest move to an adjacent part (one that fits, with ``fitting``);
    with ``any_part``, a candidate with none gets the cheapest part that fits anywhere
    (ties to the nearest). Returns (target, cost): target -1 and cost inf when none.
    O(sum over candidates of deg + a^2), plus O(k a) per fallback."""
    k = dist.shape[0]
    acc = np.zeros(k)
    stamp = np.full(k, -1, np.int64)
    touched = np.empty(k, np.int64)
    target = np.full(cand.shape[0], -1, np.int64)
    cost = np.full(cand.shape[0], np.inf)
    for idx in range(cand.shape[0]):
        v = cand[idx]
        i = part[v]
        nt = _weights_to_parts(indptr, indices, weights, part, v, idx, acc, stamp, touched)
        base = 0.0
        for a in range(nt):
            base += acc[touched[a]] * dist[i, touched[a]]
        for b in range(nt):
            t = touched[b]
            if t == i or (fitting and not _fits(fill, caps, loads, t, v)):
                continue
            c = -base
            for a in range(nt):
                c += acc[touched[a]] * dist[t, touched[a]]
            if c < cost[idx]:
                cost[idx] = c
                target[idx] = t
        if any_part and target[idx] < 0:
            for t in range(k):
                if t == i or not _fits(fill, caps, loads, t, v):
                    continue
                c = -base
                for a in range(nt):
                    c += acc[touched[a]] * dist[t, touched[a]]
                # NOTE: among equal costs prefer the nearest part, so relief stays local.
                c += 1e-9 * dist[i, t]
                if c < cost[idx]:
                    cost[idx] = c
                    target[idx] = t
    return target, cost


@njit(cache=True, nogil=True)
def _apply_relief(loads, part, fill, caps, cand, target):
    moves = 0
    for idx in range(cand.shape[0]):
        v = cand[idx]
        t = target[idx]
        if t < 0:
            continue
        i = part[v]
        helps = False
        for d in range(loads.shape[1]):
            if fill[i, d] > caps[i, d] and loads[v, d] > 0:
                helps = True
        if not helps or not _fits(fill, caps, loads, t, v):
            continue
        for d in range(loads.shape[1]):
            fill[i, d] -= loads[v, d]
            fill[t, d] += loads[v, d]
        part[v] = t
        moves += 1
    return moves


@njit(cache=True, nogil=True)
def _overflow_descent(loads, part, fill, caps, cand, pool, scale):
    """Last resort for tight packings in several dimensions: moves, then swaps, that lower
    the total overflow sum_d max(0, fill - cap) / cap_d, ignoring traffic. A move may
    overfill another dimension of its target, which a later swap repairs.
    O(|cand| * (k + |pool|)) per call."""
    k = fill.shape[0]
    dims = loads.shape[1]
    changed = 0
    for v in cand:
        p = part[v]
        if part_overflow(fill, caps, p, scale) == 0.0:
            continue
        best = -1e-12
        bt = -1
        for t in range(k):
            if t == p:
                continue
            before = part_overflow(fill, caps, p, scale) + part_overflow(fill, caps, t, scale)
            for d in range(dims):
                fill[p, d] -= loads[v, d]
                fill[t, d] += loads[v, d]
            delta = part_overflow(fill, caps, p, scale) + part_overflow(fill, caps, t, scale) - before
            for d in range(dims):
                fill[p, d] += loads[v, d]
                fill[t, d] -= loads[v, d]
            if delta < best:
                best = delta
                bt = t
        if bt >= 0:
            for d in range(dims):
                fill[p, d] -= loads[v, d]
                fill[bt, d] += loads[v, d]
            part[v] = bt
            changed += 1
            continue
        for u in pool:
            t = part[u]
            if t == p:
                continue
            before = part_overflow(fill, caps, p, scale) + part_overflow(fill, caps, t, scale)
            for d in range(dims):
                fill[p, d] += loads[u, d] - loads[v, d]
                fill[t, d] += loads[v, d] - loads[u, d]
            delta = part_overflow(fill, caps, p, scale) + part_overflow(fill, caps, t, scale) - before
            if delta < -1e-12:
                part[v] = t
                part[u] = p
                changed += 1
                break
            for d in range(dims):
                fill[p, d] -= loads[u, d] - loads[v, d]
                fill[t, d] -= loads[v, d] - loads[u, d]
    return changed


def overfull_parts(fill: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Indices of parts over capacity in any dimension."""
    return np.flatnonzero((fill > caps).any(axis=1))


def repair_capacity(indptr, indices, weights, loads, part, fill, caps, dist, rounds: int = 20,
                    rng: np.random.Generator | None = None) -> int:
    """Move vertices out of overfull parts, cheapest moves first, until every part fits.

    Updates ``part`` and ``fill`` in place; returns the number of parts still overfull
    (0 on success; the caller decides whether that is fatal, e.g. only at the finest level).
    When no feasible move helps (a tight packing in several dimensions), moves and swaps
    that lower the total overflow are made, ignoring traffic.

    Complexity: O(rounds * (n + sum over candidates of deg + a^2)); the fallback to any part
    costs O(k * a) for a vertex with no adjacent room.
    """
    for _ in range(rounds):
        bad = overfull_parts(fill, caps)
        if bad.size == 0:
            return 0
        is_bad = np.zeros(fill.shape[0], bool)
        is_bad[bad] = True
        cand = np.flatnonzero(is_bad[part]).astype(np.int64)
        target, cost = _cheapest_moves(indptr, indices, weights, loads, part, fill, caps, dist, cand, True, True)
        order = np.argsort(cost, kind="stable")
        if _apply_relief(loads, part, fill, caps, cand[order], target[order]) == 0:
            pool = np.arange(part.shape[0], dtype=np.int64)
            if rng is not None:
                pool = pool[rng.permutation(pool.size)]
            scale = 1.0 / np.maximum(caps.max(axis=0), 1).astype(np.float64)
            if _overflow_descent(loads, part, fill, caps, cand[order], pool, scale) == 0:
                break
    return int(overfull_parts(fill, caps).size)


def refine(indptr, indices, weights, loads, part, fill, caps, dist, rng: np.random.Generator,
           passes: int = 3, debug: bool = False, active: np.ndarray | None = None) -> float:
    """Refinement passes over boundary vertices in random order until a pass gains nothing.

    The first pass visits every boundary vertex (or the ``active`` ones); later passes only
    the boundary vertices next to a vertex the previous pass moved (:func:`boundary_around`).

    Args:
        part, fill: updated in place; fill[q] must equal the loads summed over part q.
        caps: int64 (k, 2) per-part capacity; moves never overfill a part.
        dist: float64 (k, k) part distances (1 - I for the cut; hops for traffic).
        debug: recompute sum w * D after every pass and raise on mismatch.
        active: vertices for the first pass (default: every boundary vertex).

    Returns:
        the total decrease of sum w * D.

    Raises:
        ObjectiveMismatch: debug only, if the incremental gain disagrees with recomputation.
    """
    total = 0.0
    before = edge_costs(indptr, indices, weights, part, dist)[1] if debug else 0.0
    order = boundary_vertices(indptr, indices, part) if active is None else active
    for _ in range(passes):
        if order.size == 0:
            break
        order = order[rng.permutation(order.size)]
        prev = part[order]
        gain, moves = refine_pass(indptr, indices, weights, loads, part, fill, caps, dist, order)
        total += gain
        if debug:
            after = edge_costs(indptr, indices, weights, part, dist)[1]
            if not np.isclose(before - after, gain, rtol=1e-9, atol=1e-6):
                raise ObjectiveMismatch(f"objective function mismatch: incremental gain {gain}, "
                                        f"recomputed {before - after}")
            before = after
        if moves == 0 or gain <= 1e-12:
            break
        order = boundary_around(indptr, indices, part, order[part[order] != prev])
    return total


@njit(cache=True, nogil=True)
def move_delta(indptr, indices, weights, part, dist, v, t):
    """Exact change of sum w * D if v alone moves to part t. O(deg v)."""
    i = part[v]
    d = 0.0
    for e in range(indptr[v], indptr[v + 1]):
        j = part[indices[e]]
        d += weights[e] * (dist[t, j] - dist[i, j])
    return d


def best_moves(indptr, indices, weights, part, dist, cand):
    """Each candidate's cheapest move to an adjacent part, ignoring capacity.

    Returns:
        (target, delta): target -1 (delta 0) when v has no neighbour outside its part.
    O(sum over candidates of deg + a^2).
    """
    none = np.zeros((1, 1), np.int64)  # no capacity check: loads, fill and caps unused
    target, cost = _cheapest_moves(indptr, indices, weights, none, part, none, none, dist, cand, False, False)
    return target, np.where(target >= 0, cost, 0.0)


@njit(cache=True, nogil=True)
def _swap_pairs(indptr, indices, weights, loads, part, fill, caps, dist, verts, src, dst, delta, starts):
    """Pair the lists (i -> t) and (t -> i) best first and swap while the exact joint delta
    is negative and both parts keep their capacities. ``verts`` is grouped by (src, dst)
    (``starts`` delimits the groups) and sorted by delta inside each group."""
    k = dist.shape[0]
    ngroups = starts.shape[0] - 1
    first = np.full(k * k, -1, np.int64)
    for g in range(ngroups):
        s = starts[g]
        first[src[s] * k + dst[s]] = g
    dims = loads.shape[1]
    gain = 0.0
    swaps = 0
    for g in range(ngroups):
        s0 = starts[g]
        i = src[s0]
        t = dst[s0]
        if i > t:
            continue
        h = first[t * k + i]
        if h < 0:
            continue
        a_end = starts[g + 1]
        b_end = starts[h + 1]
        pa = s0
        pb = starts[h]
        while pa < a_end and pb < b_end:
            if delta[pa] + delta[pb] >= 0.0:
                break
            a = verts[pa]
            b = verts[pb]
            if part[a] != i or part[b] != t:
                if part[a] != i:
                    pa += 1
                if part[b] != t:
                    pb += 1
                continue
            ok = True
            for d in range(dims):
                if fill[i, d] - loads[a, d] + loads[b, d] > caps[i, d]:
                    ok = False
                if fill[t, d] + loads[a, d] - loads[b, d] > caps[t, d]:
                    ok = False
            if ok:
                d1 = move_delta(indptr, indices, weights, part, dist, a, t)
                part[a] = t
                d2 = move_delta(indptr, indices, weights, part, dist, b, i)
                if d1 + d2 < -1e-9:
                    part[b] = i
                    for d in range(dims):
                        fill[i, d] += loads[b, d] - loads[a, d]
                        fill[t, d] += loads[a, d] - loads[b, d]
                    gain -= d1 + d2
                    swaps += 1
                    pa += 1
                    pb += 1
                    continue
                part[a] = i
            # NOTE: skip the smaller-gain side of a failed pair; the other may still pair.
            if delta[pa] <= delta[pb]:
                pb += 1
            else:
                pa += 1
    return gain, swaps


def swap_pass(indptr, indices, weights, loads, part, fill, caps, dist) -> tuple[float, int]:
    """One pass of pairwise vertex swaps between parts (Kernighan-Lin style, capacities hard).

    Every boundary vertex gets its best move (i -> t) ignoring capacity; for every pair of
    parts the lists (i -> t) and (t -> i), each sorted by gain, are paired best first, and a
    pair swaps when its exact joint delta (recomputed on the current parts, so the edge
    between the two and earlier swaps count) is negative and both parts still fit. This
    finds the gains the move refinement misses when cores are full.

    Updates ``part`` and ``fill`` in place. Returns (decrease of sum w * D, swaps).
    O(m + b log b) for b boundary vertices.
    """
    cand = boundary_vertices(indptr, indices, part)
    if cand.size == 0:
        return 0.0, 0
    target, delta = best_moves(indptr, indices, weights, part, dist, cand)
    keep = target >= 0
    cand, target, delta = cand[keep], target[keep], delta[keep]
    if cand.size == 0:
        return 0.0, 0
    src = part[cand].astype(np.int64)
    order = np.lexsort((cand, delta, target, src))
    cand, src, dst, delta = cand[order], src[order], target[order], delta[order]
    key = src * dist.shape[0] + dst
    starts = np.concatenate([[0], np.flatnonzero(np.diff(key)) + 1, [key.size]]).astype(np.int64)
    return _swap_pairs(indptr, indices, weights, loads, part, fill, caps, dist, cand.astype(np.int64), src, dst,
                       delta, starts)
