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
from numba import njit

from corefold.mapping.parallel import run_indexed
from corefold.mapping.partition.refine import _part_overflow, refine

CUT_DIST = np.array([[0.0, 1.0], [1.0, 0.0]])


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True)
def side_fill(side, loads):
    """Summed loads ``(2, dims)`` of the two sides of a bisection. O(n * dims)."""
    fill = np.zeros((2, loads.shape[1]), np.int64)
    for v in range(side.shape[0]):
        for d in range(loads.shape[1]):
            fill[side[v], d] += loads[v, d]
    return fill


@njit(cache=True, nogil=True)
def fm_refine(indptr, indices, weights, loads, side, caps2, lower2, stall, bias, passes=4):
    """Fiduccia-Mattheyses passes on a bisection; ``side`` (int64 0/1) is updated in place.

    The objective is the cut plus ``bias[v]`` for every v on side 0 (external edges).

    Each pass moves the unlocked vertex of largest gain (W_other - W_own) whose move keeps
    the receiving side within ``caps2`` and the giving side at or above ``lower2``, locks it, updates its neighbours, and stops after
    ``stall`` moves without a better cut; the moves after the best prefix are undone.
    Passes repeat while they improve the cut. O((n + m) log m) per pass.

    Returns:
        the objective after refinement.
    """
    n = indptr.shape[0] - 1
    dims = loads.shape[1]
    fill = side_fill(side, loads)
    gain = np.zeros(n)
    ext = np.zeros(n)  # weight to the other side: v is on the boundary iff ext[v] > 0
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
    cap = indptr[n] + n + 1
    hk = np.empty(cap)
    hv = np.empty(cap, np.int64)
    locked = np.zeros(n, np.bool_)
    moved = np.empty(n, np.int64)
    for _ in range(passes):
        size = 0
        for v in range(n):
            locked[v] = False
            if ext[v] > 0.0:
                size = _heap_push(hk, hv, size, -gain[v], v)
        best_cut = cut
        best_len = 0
        nmoved = 0
        since = 0
        cur = cut
        while size > 0 and since < stall:
            key, v, size = _heap_pop(hk, hv, size)
            if locked[v]:
                continue
            if -key != gain[v]:
                # NOTE: gains that fall are not pushed when they fall (half the pushes);
                # the stale, too-high entry comes out early and goes back at the true gain
                if -key > gain[v] and size < cap:
                    size = _heap_push(hk, hv, size, -gain[v], v)
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
            if cur < best_cut - 1e-9:
                best_cut = cur
                best_len = nmoved
                since = 0
            else:
                since += 1
        # undo the moves after the best prefix
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
        improved = best_cut < cut - 1e-9
        cut = best_cut
        if not improved:
            break
    return cut


@njit(cache=True, nogil=True)
def _overflow2(fill, caps2, scale):
    """Total overflow sum_{s, d} max(0, fill - cap) * scale_d of the two sides of a bisection."""
    return _part_overflow(fill, caps2, 0, scale) + _part_overflow(fill, caps2, 1, scale)


@njit(cache=True, nogil=True)
def _overflow_if_flipped(loads, side, fill, caps2, scale, v):
    """:func:`_overflow2` after v changes side (``fill`` is left as it was). O(dims)."""
    s = side[v]
    t = 1 - s
    for d in range(loads.shape[1]):
        fill[s, d] -= loads[v, d]
        fill[t, d] += loads[v, d]
    o = _overflow2(fill, caps2, scale)
    for d in range(loads.shape[1]):
        fill[s, d] += loads[v, d]
        fill[t, d] -= loads[v, d]
    return o


@njit(cache=True, nogil=True)
def _overflow_scale(caps2):
    """Per-dimension weight 1 / (both sides' capacity) of :func:`_overflow2`."""
    dims = caps2.shape[1]
    scale = np.empty(dims)
    for d in range(dims):
        scale[d] = 1.0 / max(caps2[0, d] + caps2[1, d], 1)
    return scale


@njit(cache=True, nogil=True)
def _flip_gains(indptr, indices, weights, side):
    """Cut gain of flipping each vertex to the other side: W(other side) - W(own side). O(m)."""
    n = indptr.shape[0] - 1
    gain = np.zeros(n)
    for v in range(n):
        for e in range(indptr[v], indptr[v + 1]):
            if side[indices[e]] != side[v]:
                gain[v] += weights[e]
            else:
                gain[v] -= weights[e]
    return gain


@njit(cache=True, nogil=True)
def _flip(indptr, indices, weights, loads, side, fill, gain, v):
    s = side[v]
    t = 1 - s
    for d in range(loads.shape[1]):
        fill[s, d] -= loads[v, d]
        fill[t, d] += loads[v, d]
    side[v] = t
    gain[v] = -gain[v]
    for e in range(indptr[v], indptr[v + 1]):
        u = indices[e]
        if side[u] == t:
            gain[u] -= 2.0 * weights[e]
        else:
            gain[u] += 2.0 * weights[e]


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
        delta = _overflow_if_flipped(loads, side, fill, caps2, scale, v) - ref
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
    scale = _overflow_scale(caps2)
    if _overflow2(fill, caps2, scale) == 0.0:
        return 0
    gain = _flip_gains(indptr, indices, weights, side)
    moves = 0
    # NOTE: each step scans all n vertices; cap the work at about 3e8 vertex visits
    limit = min(max_moves, max(100, 300_000_000 // (n + 1)))
    while moves < limit:
        before = _overflow2(fill, caps2, scale)
        if before == 0.0:
            break
        v = _best_flip(loads, side, fill, caps2, scale, gain, before, -1, True)
        if v >= 0:
            _flip(indptr, indices, weights, loads, side, fill, gain, v)
            moves += 1
            continue
        v1 = _best_flip(loads, side, fill, caps2, scale, gain, before, -1, False)
        if v1 < 0:
            break
        _flip(indptr, indices, weights, loads, side, fill, gain, v1)
        v2 = _best_flip(loads, side, fill, caps2, scale, gain, before, v1, True)
        if v2 < 0:
            _flip(indptr, indices, weights, loads, side, fill, gain, v1)
            break
        _flip(indptr, indices, weights, loads, side, fill, gain, v2)
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
    from corefold.mapping.partition.multiconstraint import rebalance_heap

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


def bisect(indptr, indices, weights, loads, caps2: np.ndarray, rng: np.random.Generator,
           restarts: int = 4, refine_passes: int = 2, fm: bool = True,
           bias: np.ndarray | None = None, rebalance_moves: int = 0,
           rebalance_tolerance: float | None = None) -> np.ndarray:
    """Split a graph into sides 0/1 holding loads in proportion to ``caps2`` (2, dims).

    Each restart grows side 0 from a random vertex to its share of the total load, then
    refines the cut (Fiduccia-Mattheyses, or the seed's greedy moves if ``fm`` is False)
    without overfilling either side's capacity; the cheapest cut whose
    sides fit is kept (the cheapest overall if none fits). With ``rebalance_moves`` > 0 a
    grown side over a capacity is first repaired by :func:`rebalance` (at most that many moves),
    aimed at :func:`balance_caps` with ``rebalance_tolerance``.

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
    for _ in range(max(1, restarts)):
        starts = rng.permutation(n).astype(np.int64)
        side, _ = grow_bisection(indptr, indices, weights, loads, target, starts, bias)
        side = side.astype(np.int64)
        if rebalance_moves:
            rebalance_sides(indptr, indices, weights, loads, side, caps2, rebalance_moves, aim)
        fill = np.stack([loads[side == 0].sum(axis=0), loads[side == 1].sum(axis=0)])
        if fm:
            c = fm_refine(indptr, indices, weights, loads, side, caps2, lower_bounds(total, caps2),
                          max(50, n // 20), bias)
            fill = np.stack([loads[side == 0].sum(axis=0), loads[side == 1].sum(axis=0)])
        else:
            refine(indptr, indices, weights, loads, side, fill, caps2, CUT_DIST, rng, passes=refine_passes)
        from corefold.mapping.objectives import _edge_costs

        c = _edge_costs(indptr, indices, weights, side, CUT_DIST)[0] + float(bias[side == 0].sum())
        over = float(np.maximum(fill - caps2, 0).sum())
        key = (over, c)
        if best_key is None or key < best_key:
            best, best_key = side, key
    return best


def halves(slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split a list of interchangeable slots in two halves (count-based recursion)."""
    h = slots.size // 2
    return slots[:h], slots[h:]


@njit(cache=True, nogil=True)
def side_subgraph(indptr, indices, weights, side, which):
    """The subgraph induced by ``side == which``, in its own numbering (vertices keep their
    relative order). O(n + m of the input).

    Returns:
        (indptr, indices, weights) of the subgraph.
    """
    n = indptr.shape[0] - 1
    local = np.full(n, -1, np.int64)
    count = 0
    edges = 0
    for v in range(n):
        if side[v] != which:
            continue
        local[v] = count
        count += 1
        for e in range(indptr[v], indptr[v + 1]):
            if side[indices[e]] == which:
                edges += 1
    ptr = np.zeros(count + 1, np.int64)
    idx = np.empty(edges, np.int32)
    w = np.empty(edges, np.float64)
    p = 0
    for v in range(n):
        if side[v] != which:
            continue
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if side[u] == which:
                idx[p] = local[u]
                w[p] = weights[e]
                p += 1
        ptr[local[v] + 1] = p
    return ptr, idx, w


@njit(cache=True, nogil=True)
def external_bias(indptr, indices, weights, verts, owner, me, center, c0, c1):
    """Per vertex of ``verts``: sum over edges leaving the node of w * (d(c_u, c0) - d(c_u, c1)).

    ``center[u]`` is the centre of the region u is currently bound to; d is Manhattan;
    ``owner[u] != me`` marks vertices outside the node. This is Scotch's dual recursive
    bipartitioning: a bisection knows which way its vertices' outside neighbours lie.
    O(sum of degrees of verts).
    """
    bias = np.zeros(verts.shape[0])
    for i in range(verts.shape[0]):
        v = verts[i]
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if owner[u] != me:
                d0 = abs(center[u, 0] - c0[0]) + abs(center[u, 1] - c0[1])
                d1 = abs(center[u, 0] - c1[0]) + abs(center[u, 1] - c1[1])
                bias[i] += weights[e] * (d0 - d1)
    return bias


def multilevel_bisect(indptr, indices, weights, loads, caps2: np.ndarray, bias: np.ndarray,
                      rng: np.random.Generator, restarts: int = 4, repeats: int = 4,
                      min_shrink: float = 0.2, coarsest: int = 128, rebalance_moves: int = 0,
                      two_hop: bool = False, rebalance_tolerance: float | None = None) -> np.ndarray:
    """The seed's phases applied to one bisection: coarsen, grow, uncoarsen with FM.

    Coarsening merges vertices up to 1/``coarsest`` of the total load and stops near
    ``coarsest`` vertices or below ``min_shrink``; the coarsest graph is bisected by
    :func:`bisect` (greedy growing, restarts); every finer level is refined by
    :func:`fm_refine`, after :func:`rebalance` (``rebalance_moves`` > 0) restores the
    capacities the coarse sides missed (aimed at :func:`balance_caps` with
    ``rebalance_tolerance``). ``bias`` (per vertex) is summed onto coarse vertices.

    Returns:
        int64 side per vertex. Complexity O(repeats * m) plus the FM passes.
    """
    from corefold.mapping.partition.coarsen import Level, coarsen

    total = loads.sum(axis=0)
    limit = np.maximum(total // coarsest, 1).astype(np.int64)
    levels = coarsen(Level(indptr, indices, weights, loads), limit, rng, repeats, min_shrink, 40,
                     min_vertices=coarsest, two_hop=two_hop)
    biases = [bias]
    for lv in levels[:-1]:
        biases.append(np.bincount(lv.coarse_of, weights=biases[-1], minlength=int(lv.coarse_of.max()) + 1))
    top = levels[-1]
    side = bisect(top.indptr, top.indices, top.weights, top.loads, caps2, rng, restarts, bias=biases[-1],
                  rebalance_moves=rebalance_moves, rebalance_tolerance=rebalance_tolerance)
    lower2 = lower_bounds(total, caps2)
    aim = balance_caps(total, caps2, rebalance_tolerance)
    for li in range(len(levels) - 2, -1, -1):
        lv = levels[li]
        side = side[lv.coarse_of]
        if rebalance_moves:
            rebalance_sides(lv.indptr, lv.indices, lv.weights, lv.loads, side, caps2, rebalance_moves, aim)
        fm_refine(lv.indptr, lv.indices, lv.weights, lv.loads, side, caps2, lower2, max(50, lv.n // 20), biases[li])
    return side


def _bisection_cost(indptr, indices, weights, side, bias) -> float:
    from corefold.mapping.objectives import _edge_costs

    return float(_edge_costs(indptr, indices, weights, side, CUT_DIST)[0] + bias[side == 0].sum())


class _Parent:
    """A bisected node's subgraph until both children have taken theirs (thread-safe).

    ``side`` None: the root, whose one child is the whole graph."""

    def __init__(self, graph, side):
        import threading

        self._graph, self._side, self._left = graph, side, 2
        self._lock = threading.Lock()

    def child(self, which: int):
        if self._side is None:
            return self._graph
        with self._lock:
            graph, side = self._graph, self._side
            self._left -= 1
            if self._left == 0:
                self._graph = self._side = None
        return side_subgraph(*graph, side, which)


def recursive_bisection(indptr, indices, weights, loads, slot_caps: np.ndarray,
                        split: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
                        rng: np.random.Generator, restarts: int = 4,
                        slot_xy: np.ndarray | None = None, multilevel: bool = False,
                        repeats: int = 4, min_shrink: float = 0.2, progress=None,
                        bias_scale: float = 1.0, top_tries: int = 1, rebalance_moves: int = 0,
                        threads: int = 1, two_hop: bool = False,
                        rebalance_tolerance: float | None = None) -> np.ndarray:
    """Assign every vertex to a slot by recursive bisection, one depth at a time.

    The nodes of one depth hold disjoint vertex sets and are bisected independently, on
    ``threads`` threads (the Numba kernels release the GIL); each node takes its induced
    subgraph from its parent's (:func:`side_subgraph`) when it is bisected. Node ``i`` (heap numbering:
    root 1, children 2i and 2i + 1) draws from its own generator seeded by (one draw of
    ``rng``, i), so the result does not depend on ``threads`` or on scheduling.

    Args:
        slot_caps: int64 (s, dims) capacity of each slot.
        split: splits an array of slot ids into two non-empty arrays.
        slot_xy: (s, 2) slot coordinates; when given each bisection is biased by where its
            vertices' outside neighbours lie (dual recursive bipartitioning), as bound at
            the end of the previous depth.
        multilevel: bisect with :func:`multilevel_bisect` (else :func:`bisect` directly).
        progress: optional callable(1) after each bisection (there are s - 1).
        top_tries: multilevel bisections tried (cheapest kept) for nodes holding more than
            a quarter of the graph.
        rebalance_moves: cap on :func:`rebalance` moves per call (0 = off).
        threads: worker threads for the nodes of one depth.
        two_hop: 2-hop matching while coarsening (see :func:`.coarsen.two_hop_matching`).
        rebalance_tolerance: rebalance each side to its share of the load times (1 + this)
            (None: to its capacity); see :func:`balance_caps`.

    Returns:
        int64 slot id per vertex. Complexity O(log s) rounds over the graph.
    """
    n = indptr.shape[0] - 1
    part = np.zeros(n, np.int64)
    base = int(rng.integers(0, 2**63 - 1))
    owner = np.zeros(n, np.int64)
    center = None
    if slot_xy is not None:
        center = np.tile(slot_xy.mean(axis=0), (n, 1)).astype(np.float64)
    # NOTE: a node holds its parent, not its own subgraph: the subgraph is extracted when
    # the node is bisected, and the parent's is dropped once both children have theirs, so
    # a depth never holds all its subgraphs at once (vgg-small peak: 3.14 GiB -> 2.94 GiB;
    # 2.61 GiB with one induced subgraph of the whole graph per node, 0.29 s against 0.16 s
    # of extraction on mobilenet-tiny)
    nodes = [[1, np.arange(n, dtype=np.int64), np.arange(slot_caps.shape[0], dtype=np.int64),
              _Parent((indptr, indices, weights), None), 0]]

    def bisect_node(node):
        node_id, verts, slots, parent, which = node
        node[3] = None
        sptr, sidx, sw = parent.child(which)
        del parent
        node_rng = np.random.default_rng([base, node_id])
        s0, s1 = split(slots)
        c0 = c1 = None
        if slot_xy is not None:
            c0 = slot_xy[s0].mean(axis=0).astype(np.float64)
            c1 = slot_xy[s1].mean(axis=0).astype(np.float64)
        if slot_xy is not None and bias_scale != 0.0:
            bias = bias_scale * external_bias(indptr, indices, weights, verts, owner, node_id, center, c0, c1)
        else:
            bias = np.zeros(verts.size)
        caps2 = np.stack([slot_caps[s0].sum(axis=0), slot_caps[s1].sum(axis=0)])
        if multilevel:
            # NOTE: the top bisections shape everything below them; give them extra tries
            tries = top_tries if verts.size * 4 > n else 1
            side, best = None, None
            for _ in range(tries):
                cand = multilevel_bisect(sptr, sidx, sw, loads[verts], caps2, bias, node_rng, restarts, repeats,
                                         min_shrink, rebalance_moves=rebalance_moves, two_hop=two_hop,
                                         rebalance_tolerance=rebalance_tolerance)
                cost = _bisection_cost(sptr, sidx, sw, cand, bias) if tries > 1 else 0.0
                if best is None or cost < best:
                    side, best = cand, cost
        else:
            side = bisect(sptr, sidx, sw, loads[verts], caps2, node_rng, restarts, bias=bias,
                          rebalance_moves=rebalance_moves, rebalance_tolerance=rebalance_tolerance)
        me = None if s0.size == 1 and s1.size == 1 else _Parent((sptr, sidx, sw), side)  # leaves need none
        return side, s0, s1, c0, c1, me

    while nodes:
        work = []
        for node in nodes:
            node_id, verts, slots, _, _ = node
            if slots.size == 1 or verts.size == 0:
                part[verts] = slots[0]
            else:
                owner[verts] = node_id
                work.append(node)
        nodes = None  # the parents go as their children take their subgraphs
        results = run_indexed(lambda i, work=work: bisect_node(work[i]), len(work), threads)
        nodes = []
        for (node_id, verts, _, _, _), (side, s0, s1, c0, c1, me) in zip(work, results, strict=True):
            if center is not None:
                center[verts[side == 0]] = c0
                center[verts[side == 1]] = c1
            nodes.append([2 * node_id, verts[side == 0], s0, me, 0])
            nodes.append([2 * node_id + 1, verts[side == 1], s1, me, 1])
            if progress is not None:
                progress(1)
    return part
