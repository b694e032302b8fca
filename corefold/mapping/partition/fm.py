r"""Fiduccia-Mattheyses refinement of a bisection (SPEC M4 §5, two parts), as METIS's ``fm.c``.

The objective is the cut plus ``bias[v]`` for every vertex on side 0; a move must keep the
receiving side within its capacity and the giving side above its lower bound
(:func:`~.balance.lower_bounds`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from corefold.mapping.partition.bisection import side_fill
from corefold.mapping.partition.heap import heap_pop, heap_push


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
                size = heap_push(hk, hv, size, -gain[v], v)
        best_cut = cut
        best_len = 0
        nmoved = 0
        since = 0
        cur = cut
        while size > 0 and since < stall:
            key, v, size = heap_pop(hk, hv, size)
            if locked[v]:
                continue
            if -key != gain[v]:
                # NOTE: gains that fall are not pushed when they fall (half the pushes);
                # the stale, too-high entry comes out early and goes back at the true gain
                if -key > gain[v] and size < cap:
                    size = heap_push(hk, hv, size, -gain[v], v)
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
                        size = heap_push(hk, hv, size, -gain[u], u)
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
