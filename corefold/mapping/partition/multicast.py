r"""k-way refinement of the XY multicast traffic, with exact gains per net.

The objective is :func:`corefold.mapping.objectives.multicast_traffic`: every source
vertex s (net s, weight :math:`w_s`) pays the links of the XY tree from its core to the set
of cores holding its destinations. Per net the state is :math:`\Phi(s, p)`, its
destinations on part p, and a summary of its tree: the row span :math:`[x_{min}, x_{max}]`
on the root's row and, per column x, the number of destination parts there and their span
:math:`[lo_x, hi_x]` (the root's row included).

Moving vertex v from part i to part t changes

* every net s with v among its destinations only where a part enters or leaves its set:
  :math:`\Phi(s, i)` falls to 0 (i leaves; its column is recomputed from the parts in it,
  O(H), and the row span from the columns, O(W)) or :math:`\Phi(s, t)` rises from 0 (t
  joins: O(1) from the summary); the root's own part never counts;
* v's own net, whose root moves: recomputed from :math:`\Phi(v, \cdot)`, O(k).

A pass visits the boundary vertices in random order and makes the move of least (most
negative) change into an adjacent part that fits every capacity, as the seed's move
refinement (SPEC M4 §5) does for the cut. Memory: :math:`\Phi` is dense, n x k int32.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from corefold.mapping.objectives import span_cost
from corefold.mapping.partition.refine import ObjectiveMismatch, boundary_around, boundary_vertices

#: The dense state (Phi: vertices x parts int32, plus per-net column summaries) is kept
#: only up to this many vertex-part pairs (about 1 GB); larger mappings refine on the
#: synapse objective's graph instead.
MULTICAST_MAX_STATE = 250_000_000


@njit(cache=True, nogil=True)
def _summarise(s, phi, part, px, py, colptr, colparts, mw, mh, extra, minx, maxx, cnt, lo, hi):
    """Rebuild net s's tree summary from Phi(s, .); returns its cost. O(k + W)."""
    r = part[s]
    xr = px[r]
    yr = py[r]
    width = cnt.shape[1]
    for x in range(width):
        cnt[s, x] = 0
        lo[s, x] = yr
        hi[s, x] = yr
    mn = xr
    mx = xr
    k = phi.shape[1]
    for p in range(k):
        if p == r or phi[s, p] == 0:
            continue
        x = px[p]
        y = py[p]
        cnt[s, x] += 1
        if y < lo[s, x]:
            lo[s, x] = y
        if y > hi[s, x]:
            hi[s, x] = y
        if x < mn:
            mn = x
        if x > mx:
            mx = x
    minx[s] = mn
    maxx[s] = mx
    return _cost(s, mn, mx, cnt, lo, hi, mw, mh, extra)


@njit(cache=True, nogil=True)
def _cost(s, mn, mx, cnt, lo, hi, mw, mh, extra):
    c = 0.0
    any_col = False
    for x in range(cnt.shape[1]):
        if cnt[s, x] > 0:
            any_col = True
            c += span_cost(lo[s, x], hi[s, x], mh, extra)
    if not any_col:
        return 0.0
    return c + span_cost(mn, mx, mw, extra)


@njit(cache=True, nogil=True)
def _column_without(s, x, gone, r, phi, py, colptr, colparts, yr):
    """(count, lo, hi) of net s's destination parts in column x, leaving out part ``gone``."""
    c = 0
    a = yr
    b = yr
    for j in range(colptr[x], colptr[x + 1]):
        p = colparts[j]
        if p == gone or p == r or phi[s, p] == 0:
            continue
        c += 1
        y = py[p]
        if y < a:
            a = y
        if y > b:
            b = y
    return c, a, b


@njit(cache=True, nogil=True)
def _delta(s, rem, add, phi, part, px, py, colptr, colparts, mw, mh, extra, minx, maxx, cnt, lo, hi):
    """Change of net s's tree cost when part ``rem`` leaves its destinations and part
    ``add`` joins them (-1: none). O(1) for a pure addition, O(W + H) with a removal."""
    r = part[s]
    xr = px[r]
    yr = py[r]
    old = _cost(s, minx[s], maxx[s], cnt, lo, hi, mw, mh, extra)
    width = cnt.shape[1]
    if rem < 0:
        xt = px[add]
        yt = py[add]
        if cnt[s, xt] == 0:
            col = span_cost(min(yr, yt), max(yr, yt), mh, extra)
            had = False
            for x in range(width):
                if cnt[s, x] > 0:
                    had = True
                    break
            row_old = span_cost(minx[s], maxx[s], mw, extra) if had else 0.0
            return col + span_cost(min(minx[s], xt), max(maxx[s], xt), mw, extra) - row_old
        a = lo[s, xt]
        b = hi[s, xt]
        return (span_cost(min(a, yt), max(b, yt), mh, extra) - span_cost(a, b, mh, extra)
                + span_cost(min(minx[s], xt), max(maxx[s], xt), mw, extra)
                - span_cost(minx[s], maxx[s], mw, extra))
    # with a removal: the new cost from the columns, the removed part's column recomputed
    xi = px[rem]
    ci, ai, bi = _column_without(s, xi, rem, r, phi, py, colptr, colparts, yr)
    xt = px[add] if add >= 0 else -1
    yt = py[add] if add >= 0 else 0
    mn = xr
    mx = xr
    c = 0.0
    any_col = False
    for x in range(width):
        if x == xi:
            n_, a, b = ci, ai, bi
        else:
            n_, a, b = cnt[s, x], lo[s, x], hi[s, x]
        if x == xt:
            if n_ == 0:
                a = yr
                b = yr
            n_ += 1
            a = min(a, yt)
            b = max(b, yt)
        if n_ > 0:
            any_col = True
            c += span_cost(a, b, mh, extra)
            if x < mn:
                mn = x
            if x > mx:
                mx = x
    new = c + span_cost(mn, mx, mw, extra) if any_col else 0.0
    return new - old


@njit(cache=True, nogil=True)
def _apply_pin(s, p, step, phi, part, px, py, colptr, colparts, minx, maxx, cnt, lo, hi):
    """Phi(s, p) += step (+1 or -1), keeping the summary. O(1) or O(W + H)."""
    r = part[s]
    phi[s, p] += step
    if p == r:
        return
    x = px[p]
    y = py[p]
    if step > 0 and phi[s, p] == 1:
        cnt[s, x] += 1
        if y < lo[s, x]:
            lo[s, x] = y
        if y > hi[s, x]:
            hi[s, x] = y
        if x < minx[s]:
            minx[s] = x
        if x > maxx[s]:
            maxx[s] = x
    elif step < 0 and phi[s, p] == 0:
        yr = py[r]
        c, a, b = _column_without(s, x, -1, r, phi, py, colptr, colparts, yr)
        cnt[s, x] = c
        lo[s, x] = a
        hi[s, x] = b
        if c == 0 and (x == minx[s] or x == maxx[s]):
            mn = px[r]
            mx = px[r]
            for z in range(cnt.shape[1]):
                if cnt[s, z] > 0:
                    if z < mn:
                        mn = z
                    if z > mx:
                        mx = z
            minx[s] = mn
            maxx[s] = mx


@njit(cache=True, nogil=True)
def multicast_state(fptr, fpins, part, px, py, k, width, mw, mh, extra):
    """Phi (n, k) int32, the per-net summaries and the total cost (weights applied by the caller)."""
    n = fptr.shape[0] - 1
    phi = np.zeros((n, k), np.int32)
    for s in range(n):
        for e in range(fptr[s], fptr[s + 1]):
            phi[s, part[fpins[e]]] += 1
    colptr = np.zeros(width + 1, np.int64)
    for p in range(k):
        colptr[px[p] + 1] += 1
    for x in range(width):
        colptr[x + 1] += colptr[x]
    colparts = np.empty(k, np.int64)
    cur = colptr[:-1].copy()
    for p in range(k):
        colparts[cur[px[p]]] = p
        cur[px[p]] += 1
    minx = np.zeros(n, np.int64)
    maxx = np.zeros(n, np.int64)
    cnt = np.zeros((n, width), np.int32)
    lo = np.zeros((n, width), np.int64)
    hi = np.zeros((n, width), np.int64)
    cost = np.zeros(n)
    for s in range(n):
        cost[s] = _summarise(s, phi, part, px, py, colptr, colparts, mw, mh, extra, minx, maxx, cnt, lo, hi)
    return phi, colptr, colparts, minx, maxx, cnt, lo, hi, cost


@njit(cache=True, nogil=True)
def multicast_pass(indptr, indices, fptr, fpins, fw, iptr, inets, loads, part, fill, caps, px, py, order,
                   phi, colptr, colparts, minx, maxx, cnt, lo, hi, cost, mw, mh, extra):
    """One pass of moves in ``order`` (see the module docstring); updates ``part``,
    ``fill`` and the state in place.

    Returns:
        (gain, moves): the decrease of the multicast traffic and the number of moves.
    """
    k = fill.shape[0]
    stamp = np.full(k, -1, np.int64)
    cand = np.empty(k, np.int64)
    delta = np.zeros(k)
    gain = 0.0
    moves = 0
    for idx in range(order.shape[0]):
        v = order[idx]
        i = part[v]
        nc = 0
        for e in range(indptr[v], indptr[v + 1]):
            t = part[indices[e]]
            if t != i and stamp[t] != idx:
                stamp[t] = idx
                cand[nc] = t
                delta[nc] = 0.0
                nc += 1
        if nc == 0:
            continue
        for j in range(iptr[v], iptr[v + 1]):
            s = inets[j]
            r = part[s]
            w = fw[s]
            rem = i if (i != r and phi[s, i] == 1) else -1
            drem = 0.0
            if rem >= 0:
                drem = _delta(s, rem, -1, phi, part, px, py, colptr, colparts, mw, mh, extra, minx, maxx, cnt, lo, hi)
            for c in range(nc):
                t = cand[c]
                add = t != r and phi[s, t] == 0
                if rem >= 0 and add:
                    delta[c] += w * _delta(s, rem, t, phi, part, px, py, colptr, colparts, mw, mh, extra, minx,
                                           maxx, cnt, lo, hi)
                elif rem >= 0:
                    delta[c] += w * drem
                elif add:
                    delta[c] += w * _delta(s, -1, t, phi, part, px, py, colptr, colparts, mw, mh, extra, minx,
                                           maxx, cnt, lo, hi)
        best = -1e-9
        bt = -1
        own = fptr[v + 1] > fptr[v]
        for c in range(nc):
            t = cand[c]
            d = delta[c]
            if own:
                part[v] = t
                d += fw[v] * (_summarise(v, phi, part, px, py, colptr, colparts, mw, mh, extra, minx, maxx, cnt,
                                         lo, hi) - cost[v])
                part[v] = i
            if d < best:
                fits = True
                for dd in range(loads.shape[1]):
                    if fill[t, dd] + loads[v, dd] > caps[t, dd]:
                        fits = False
                if fits:
                    best = d
                    bt = t
        if own:
            _summarise(v, phi, part, px, py, colptr, colparts, mw, mh, extra, minx, maxx, cnt, lo, hi)
        if bt < 0:
            continue
        for j in range(iptr[v], iptr[v + 1]):
            s = inets[j]
            _apply_pin(s, i, -1, phi, part, px, py, colptr, colparts, minx, maxx, cnt, lo, hi)
            _apply_pin(s, bt, 1, phi, part, px, py, colptr, colparts, minx, maxx, cnt, lo, hi)
            cost[s] = _cost(s, minx[s], maxx[s], cnt, lo, hi, mw, mh, extra)
        part[v] = bt
        if own:
            cost[v] = _summarise(v, phi, part, px, py, colptr, colparts, mw, mh, extra, minx, maxx, cnt, lo, hi)
        for dd in range(loads.shape[1]):
            fill[i, dd] -= loads[v, dd]
            fill[bt, dd] += loads[v, dd]
        gain -= best
        moves += 1
    return gain, moves


def refine_multicast(indptr, indices, fanout, loads, part, fill, caps, part_xy: np.ndarray, width: int,
                     mesh_width: int, mesh_height: int, interchip_hop_cost: float, rng: np.random.Generator,
                     passes: int = 3, debug: bool = False) -> float:
    """Move refinement of the multicast traffic until a pass gains nothing.

    Args:
        indptr, indices: the (symmetric) graph: a vertex may move to its neighbours' parts.
        fanout: :class:`~corefold.mapping.nets.Fanout`, the nets.
        part, fill: updated in place; caps: int64 (k, dims), never exceeded by a move.
        part_xy: int64 (k, 2) global core coordinates of each part.
        width: the board's width in cores.
        debug: recompute the traffic after every pass and raise on mismatch.

    Returns:
        the decrease of the multicast traffic.

    Raises:
        ObjectiveMismatch: debug only, if the incremental gain disagrees with recomputation.

    Complexity: O(n k) memory; a pass O(sum over visited vertices of fan-in * candidates + k).
    """
    from corefold.mapping.nets import incidence
    from corefold.mapping.objectives import multicast_traffic

    k = fill.shape[0]
    px = np.ascontiguousarray(part_xy[:, 0], np.int64)
    py = np.ascontiguousarray(part_xy[:, 1], np.int64)
    extra = float(interchip_hop_cost) - 1.0
    fw = np.asarray(fanout.weight, np.float64)
    iptr, inets = incidence(fanout.ptr, fanout.pins, part.shape[0])
    state = multicast_state(fanout.ptr, fanout.pins, part, px, py, k, width, mesh_width, mesh_height, extra)

    def traffic() -> float:
        return multicast_traffic(fanout, part_xy[part], width, int(py.max()) + 1, mesh_width, mesh_height,
                                 interchip_hop_cost)

    before = traffic() if debug else 0.0
    total = 0.0
    order = boundary_vertices(indptr, indices, part)
    for _ in range(passes):
        if order.size == 0:
            break
        order = order[rng.permutation(order.size)]
        prev = part[order]
        gain, moves = multicast_pass(indptr, indices, fanout.ptr, fanout.pins, fw, iptr, inets, loads, part, fill,
                                     caps, px, py, order, *state, mesh_width, mesh_height, extra)
        total += gain
        if debug:
            after = traffic()
            if not np.isclose(before - after, gain, rtol=1e-9, atol=1e-6):
                raise ObjectiveMismatch(f"objective function mismatch: multicast gain {gain}, "
                                        f"recomputed {before - after}")
            before = after
        if moves == 0 or gain <= 1e-12:
            break
        order = boundary_around(indptr, indices, part, order[part[order] != prev])
    return total
