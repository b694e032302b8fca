r"""Coarsening by heavy-edge matching (SPEC M4 §2).

One pass visits the vertices in a random order; each unmatched vertex v is paired with the
unmatched neighbour u of largest rating (edge weight) whose merged load fits
``limit`` in every dimension (seed: 1/15 of a core's capacity). Several passes with
different orders are run and the one that matched the most edge weight (so dropped the
most weight from the coarse graph) is kept. Levels are built until one removes fewer than
``min_shrink`` of the vertices.

Each pass is O(m); contraction is one O(n + m) pass with a position array (no Python object per edge).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from corefold.mapping.topology.model import Topology


@dataclass
class Level:
    """One graph of the hierarchy and the map from its vertices to the next coarser level."""

    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray
    loads: np.ndarray  # int64 (n, 2)
    coarse_of: np.ndarray | None = None  # int64 (n,), vertex -> vertex of the next level

    @property
    def n(self) -> int:
        return self.indptr.shape[0] - 1


@njit(cache=True, nogil=True)
def heavy_edge_matching(indptr, indices, weights, loads, limit, order, expansion=False):
    """Match along heaviest admissible edges in ``order``.

    With ``expansion`` the rating is w^2 / (n_u n_v) (KaHIP's expansion*2: prefers light
    vertices, so coarse vertices stay even); otherwise the edge weight (the seed).

    Returns:
        (mate, matched_weight): mate[v] = partner or v itself; the summed weight of
        matched edges.
    """
    n = indptr.shape[0] - 1
    mate = np.full(n, -1, np.int64)
    matched = 0.0
    for v in order:
        if mate[v] != -1:
            continue
        best = -1
        best_e = -1
        best_w = -1.0
        l0 = loads[v, 0]
        l1 = loads[v, 1]
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if u == v or mate[u] != -1:
                continue
            if l0 + loads[u, 0] > limit[0] or l1 + loads[u, 1] > limit[1]:
                continue
            w = weights[e]
            if expansion:
                w = w * w / (max(l0, 1) * max(loads[u, 0], 1))
            if w > best_w:
                best_w = w
                best = u
                best_e = e
        if best >= 0:
            mate[v] = best
            mate[best] = v
            matched += weights[best_e]
        else:
            mate[v] = v
    return mate, matched


@njit(cache=True, nogil=True)
def two_hop_matching(indptr, indices, loads, limit, mate, order):
    """Pair vertices left unmatched that share a neighbour (METIS's 2-hop matching).

    Layered graphs (a CNN's neurons link only to the layers next to theirs) leave many
    vertices whose neighbours are all taken; without this a level shrinks by a third, not a
    half, and the hierarchy gets deep. Visits hubs in ``order``; the unmatched neighbours of
    each hub are paired in adjacency order when their merged load fits ``limit``. ``mate``
    (mate[v] == v: unmatched) is updated in place. O(n + m).

    Returns:
        the number of new pairs.
    """
    pairs = 0
    for h in order:
        pending = -1
        for e in range(indptr[h], indptr[h + 1]):
            u = indices[e]
            if u == h or mate[u] != u:
                continue
            if pending < 0:
                pending = u
            elif loads[pending, 0] + loads[u, 0] <= limit[0] and loads[pending, 1] + loads[u, 1] <= limit[1]:
                mate[pending] = u
                mate[u] = pending
                pending = -1
                pairs += 1
    return pairs


@njit(cache=True, nogil=True)
def _contract(indptr, indices, weights, mate, coarse_of, nc):
    """One pass: coarse vertex c (leaders in increasing order) gathers the edges of its one or
    two fine vertices; ``pos`` finds an edge already written for c. O(n + m)."""
    n = indptr.shape[0] - 1
    cindptr = np.zeros(nc + 1, np.int64)
    cindices = np.empty(indptr[n], np.int32)
    cweights = np.empty(indptr[n], np.float64)
    pos = np.full(nc, -1, np.int64)
    ptr = 0
    for v in range(n):
        u = mate[v]
        if u < v:
            continue
        c = coarse_of[v]
        start = ptr
        for side in range(2):
            x = v if side == 0 else u
            if side == 1 and u == v:
                break
            for e in range(indptr[x], indptr[x + 1]):
                cu = coarse_of[indices[e]]
                if cu == c:
                    continue
                p = pos[cu]
                if p >= start:
                    cweights[p] += weights[e]
                else:
                    pos[cu] = ptr
                    cindices[ptr] = cu
                    cweights[ptr] = weights[e]
                    ptr += 1
        cindptr[c + 1] = ptr
    # NOTE: the buffers are sized for the fine graph; copy so the hierarchy keeps only what it uses
    return cindptr, cindices[:ptr].copy(), cweights[:ptr].copy()


def contract(level: Level, mate: np.ndarray) -> Level:
    """Merge every matched pair; sets ``level.coarse_of`` and returns the coarse level. O(m)."""
    n = level.n
    leader = np.minimum(np.arange(n), mate)
    is_leader = leader == np.arange(n)
    cid = np.cumsum(is_leader) - 1
    coarse_of = cid[leader].astype(np.int64)
    nc = int(is_leader.sum())
    cindptr, cindices, cweights = _contract(level.indptr, level.indices, level.weights, mate, coarse_of, nc)
    loads = np.zeros((nc, level.loads.shape[1]), np.int64)
    for d in range(level.loads.shape[1]):
        loads[:, d] = np.bincount(coarse_of, weights=level.loads[:, d], minlength=nc).astype(np.int64)
    level.coarse_of = coarse_of
    return Level(cindptr, cindices, cweights, loads)


def finest_level(topo: Topology, loads: np.ndarray) -> Level:
    """The neuron-level graph as a :class:`Level` (int32 indices, float64 weights)."""
    indices = topo.indices if topo.indices.dtype == np.int32 else topo.indices.astype(np.int32)
    weights = topo.weights if topo.weights.dtype == np.float64 else topo.weights.astype(np.float64)
    return Level(np.asarray(topo.indptr, np.int64), indices, weights, loads)


def coarsen(finest: Level, limit: np.ndarray, rng: np.random.Generator, repeats: int = 4,
            min_shrink: float = 0.2, max_levels: int = 40, min_vertices: int = 1,
            expansion: bool = False, progress=None, two_hop: bool = False) -> list[Level]:
    """Build the hierarchy [finest, ..., coarsest].

    Args:
        finest: the input graph.
        limit: int64 (2,), the largest load a merged vertex may have.
        rng: seeded generator for the visiting orders.
        repeats: matching passes per level (best kept).
        min_shrink: stop once a level would remove fewer than this fraction of vertices.
        max_levels: stop after this many levels.
        min_vertices: never coarsen a graph with this many vertices or fewer.
        expansion: rate edges by w^2 / (n_u n_v) instead of w.
        progress: optional callable(n_vertices) called per level.
        two_hop: when over 10% of the vertices stay unmatched, pair those that share a
            neighbour (:func:`two_hop_matching`, METIS's rule).

    Complexity: O(repeats * m) per level; levels shrink geometrically.
    """
    levels = [finest]
    limit = np.asarray(limit, np.int64)
    while len(levels) <= max_levels:
        cur = levels[-1]
        n = cur.n
        if n <= min_vertices:
            break
        best_mate, best_w = None, -1.0
        for _ in range(max(1, repeats)):
            order = rng.permutation(n)
            mate, w = heavy_edge_matching(cur.indptr, cur.indices, cur.weights, cur.loads, limit, order, expansion)
            if w > best_w:
                best_mate, best_w, best_order = mate, w, order
        if two_hop and np.count_nonzero(best_mate == np.arange(n)) > 0.1 * n:
            two_hop_matching(cur.indptr, cur.indices, cur.loads, limit, best_mate, best_order)
        nc = int(np.count_nonzero(best_mate >= np.arange(n)))
        if n - nc < min_shrink * n:
            break
        levels.append(contract(cur, best_mate))
        if progress is not None:
            progress(nc)
    return levels
