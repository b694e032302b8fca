r"""Kernels of the out-of-core mapper: matching, contraction and refinement on row chunks.

An archive is read as chunks of consecutive vertices ``first .. first + k - 1`` in local
CSR (``indptr`` from 0, ``indices`` global ids); the per-vertex arrays (``mate``,
``coarse_of``, ``part``, loads) are global and in RAM, the edges only a chunk at a time
(see :mod:`corefold.mapping.out_of_core`).

* :func:`match_rows`: the seed's heavy-edge matching (SPEC M4 §2) over one chunk's
  vertices in the given order, against the global ``mate``;
* :func:`coarse_ids`: coarse vertex ids, leaders (the lower id of a pair) in id order;
* :func:`contract_rows`: the coarse rows of a chunk's leaders (the two fine rows mapped
  through ``coarse_of``, duplicates summed, sorted) and the fine rows' matched flags;
* :func:`refine_rows`: the seed's move refinement (SPEC M4 §5) over one chunk;
* :func:`quotient_rows`: a chunk's contribution to the group graph.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from corefold.mapping.topology.archive import FLAG_MATCHED


@njit(cache=True, nogil=True)
def match_rows(first, indptr, indices, weights, loads, limit, mate, order):
    """Heavy-edge matching of the chunk's vertices in ``order`` (local ids): each unmatched
    vertex takes its heaviest edge to an unmatched neighbour whose merged load fits
    ``limit``; ``mate`` (global, -1 = not yet visited, v = unmatched) is updated.
    O(chunk edges).

    Returns:
        (pairs, matched weight).
    """
    pairs = 0
    matched = 0.0
    for i in range(order.shape[0]):
        lv = order[i]
        v = first + lv
        if mate[v] != -1:
            continue
        best = -1
        best_w = -1.0
        for e in range(indptr[lv], indptr[lv + 1]):
            u = indices[e]
            if u == v or mate[u] != -1:
                continue
            if loads[v, 0] + loads[u, 0] > limit[0] or loads[v, 1] + loads[u, 1] > limit[1]:
                continue
            w = weights[e]
            if w > best_w:
                best_w = w
                best = u
        if best >= 0:
            mate[v] = best
            mate[best] = v
            pairs += 1
            matched += best_w
        else:
            mate[v] = v
    return pairs, matched


def coarse_ids(mate: np.ndarray) -> tuple[np.ndarray, int]:
    """Coarse id of every vertex: its pair's leader (lower id) ranked among the leaders.

    Returns:
        (coarse_of int64[n], number of coarse vertices). O(n).
    """
    n = mate.shape[0]
    ids = np.arange(n, dtype=np.int64)
    mate = np.where(mate < 0, ids, mate)
    leader = np.minimum(ids, mate)
    is_leader = leader == ids
    rank = np.cumsum(is_leader) - 1
    return rank[leader].astype(np.int64), int(is_leader.sum())


@njit(cache=True, nogil=True)
def _row(v, wfirst, wptr, widx, ww, xids, xptr, xidx, xw):
    """(indices, weights) of vertex v: from the window of rows, else from the extra rows."""
    lv = v - wfirst
    if 0 <= lv < wptr.shape[0] - 1:
        return widx[wptr[lv]:wptr[lv + 1]], ww[wptr[lv]:wptr[lv + 1]]
    lo, hi = 0, xids.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if xids[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return xidx[xptr[lo]:xptr[lo + 1]], xw[xptr[lo]:xptr[lo + 1]]


@njit(cache=True, nogil=True)
def contract_rows(first, end, wfirst, wptr, widx, ww, xids, xptr, xidx, xw, mate, coarse_of, nc):
    """Coarse rows of the leaders among ``first .. end - 1``, in coarse id order, and the
    matched flags of the fine rows ``first .. end - 1``.

    The rows of vertices ``wfirst ..`` are the window (``wptr`` local CSR); a partner
    outside it is found among the extra rows ``xids`` (sorted ids, ``xptr`` CSR). Each
    coarse row is the union of its one or two fine rows mapped through ``coarse_of``,
    without the vertex itself, duplicates summed, sorted by coarse id.
    O(edges of the rows involved * log degree).

    Returns:
        (cptr, cidx, cw, flags): coarse CSR (local to the leaders here) and uint8 flags
        for the fine rows' entries (:data:`FLAG_MATCHED` on the edge to the mate).
    """
    lo = first - wfirst
    fine_edges = wptr[end - wfirst] - wptr[lo]
    flags = np.zeros(fine_edges, np.uint8)
    leaders = 0
    cap = 0
    for v in range(first, end):
        u = mate[v]
        if u < v:
            continue
        leaders += 1
        a, _ = _row(v, wfirst, wptr, widx, ww, xids, xptr, xidx, xw)
        cap += a.shape[0]
        if u != v:
            b, _ = _row(u, wfirst, wptr, widx, ww, xids, xptr, xidx, xw)
            cap += b.shape[0]
    base = wptr[lo]
    for v in range(first, end):
        u = mate[v]
        if u == v:
            continue
        for e in range(wptr[v - wfirst], wptr[v - wfirst + 1]):
            if widx[e] == u:
                flags[e - base] = FLAG_MATCHED
    cptr = np.zeros(leaders + 1, np.int64)
    cidx = np.empty(cap, np.int64)
    cw = np.empty(cap, np.float64)
    pos = np.full(nc, -1, np.int64)
    p = 0
    r = 0
    for v in range(first, end):
        u = mate[v]
        if u < v:
            continue
        c = coarse_of[v]
        start = p
        for side in range(2):
            if side == 1 and u == v:
                break
            x = v if side == 0 else u
            idx, w = _row(x, wfirst, wptr, widx, ww, xids, xptr, xidx, xw)
            for j in range(idx.shape[0]):
                cu = coarse_of[idx[j]]
                if cu == c:
                    continue
                q = pos[cu]
                if q >= start:
                    cw[q] += w[j]
                else:
                    pos[cu] = p
                    cidx[p] = cu
                    cw[p] = w[j]
                    p += 1
        order = np.argsort(cidx[start:p])
        ri = cidx[start:p][order].copy()
        rw = cw[start:p][order].copy()
        cidx[start:p] = ri
        cw[start:p] = rw
        r += 1
        cptr[r] = p
    return cptr, cidx[:p], cw[:p], flags


@njit(cache=True, nogil=True)
def refine_rows(first, indptr, indices, weights, loads, part, fill, caps, dist, order):
    """The seed's move refinement over the chunk's vertices in ``order`` (local ids): a
    vertex goes to the adjacent part of least :math:`\\sum_j W_j D_{tj}` when that is
    below its own part's and the part has room. ``part`` and ``fill`` are updated.
    O(chunk edges + sum of a(v)^2).

    Returns:
        (gain, moves).
    """
    k = dist.shape[0]
    acc = np.zeros(k)
    stamp = np.full(k, -1, np.int64)
    touched = np.empty(k, np.int64)
    gain = 0.0
    moves = 0
    for idx in range(order.shape[0]):
        lv = order[idx]
        v = first + lv
        i = part[v]
        nt = 0
        for e in range(indptr[lv], indptr[lv + 1]):
            p = part[indices[e]]
            if stamp[p] != idx:
                stamp[p] = idx
                acc[p] = 0.0
                touched[nt] = p
                nt += 1
            acc[p] += weights[e]
        if nt == 0 or (nt == 1 and touched[0] == i):
            continue
        base = 0.0
        for a in range(nt):
            base += acc[touched[a]] * dist[i, touched[a]]
        best = -1e-9
        bt = -1
        for b in range(nt):
            t = touched[b]
            if t == i:
                continue
            c = -base
            for a in range(nt):
                c += acc[touched[a]] * dist[t, touched[a]]
            if c < best:
                fits = True
                for d in range(loads.shape[1]):
                    if fill[t, d] + loads[v, d] > caps[t, d]:
                        fits = False
                if fits:
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
def quotient_rows(first, indptr, indices, weights, part, q):
    """Add the chunk's edges to the dense group graph ``q`` (each undirected edge is seen
    from both ends over the whole archive). O(chunk edges)."""
    for lv in range(indptr.shape[0] - 1):
        a = part[first + lv]
        for e in range(indptr[lv], indptr[lv + 1]):
            b = part[indices[e]]
            if a != b:
                q[a, b] += weights[e]
