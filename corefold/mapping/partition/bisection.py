r"""The state of one bisection shared by its phases: side loads, flip gains, overflow.

A bisection is an int64 ``side`` (0/1) per vertex; its two sides' capacities are
``caps2`` (2, dims). Growing (:mod:`.initial`), Fiduccia-Mattheyses (:mod:`.fm`) and
balancing (:mod:`.balance`, :mod:`.multiconstraint`) read and update it through these
helpers, as METIS's phases share one ``graph_t``.

* :func:`side_fill`: summed loads of the two sides;
* :func:`flip_gains`, :func:`flip`: the cut gain :math:`W_{other}(v) - W_{own}(v)` of moving
  each vertex, kept up to date as vertices move;
* :func:`bisection_overflow`: :math:`\sum_{s,d} \max(0, F_{s,d} - C_{s,d}) / (C_{0,d} + C_{1,d})`,
  the total normalised overflow the balancing phase lowers;
* :func:`bisection_cost`: the cut plus the external bias of side 0.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from corefold.mapping.objectives import edge_costs, part_overflow

#: The distance matrix of a bisection's two sides: refinement with it minimises the cut.
CUT_DIST = np.array([[0.0, 1.0], [1.0, 0.0]])


@njit(cache=True, nogil=True)
def side_fill(side, loads):
    """Summed loads ``(2, dims)`` of the two sides of a bisection. O(n * dims)."""
    fill = np.zeros((2, loads.shape[1]), np.int64)
    for v in range(side.shape[0]):
        for d in range(loads.shape[1]):
            fill[side[v], d] += loads[v, d]
    return fill


@njit(cache=True, nogil=True)
def bisection_overflow(fill, caps2, scale):
    """Total overflow sum_{s, d} max(0, fill - cap) * scale_d of the two sides of a bisection."""
    return part_overflow(fill, caps2, 0, scale) + part_overflow(fill, caps2, 1, scale)


@njit(cache=True, nogil=True)
def overflow_if_flipped(loads, side, fill, caps2, scale, v):
    """:func:`bisection_overflow` after v changes side (``fill`` is left as it was). O(dims)."""
    s = side[v]
    t = 1 - s
    for d in range(loads.shape[1]):
        fill[s, d] -= loads[v, d]
        fill[t, d] += loads[v, d]
    o = bisection_overflow(fill, caps2, scale)
    for d in range(loads.shape[1]):
        fill[s, d] += loads[v, d]
        fill[t, d] -= loads[v, d]
    return o


@njit(cache=True, nogil=True)
def overflow_scale(caps2):
    """Per-dimension weight 1 / (both sides' capacity) of :func:`bisection_overflow`."""
    dims = caps2.shape[1]
    scale = np.empty(dims)
    for d in range(dims):
        scale[d] = 1.0 / max(caps2[0, d] + caps2[1, d], 1)
    return scale


@njit(cache=True, nogil=True)
def flip_gains(indptr, indices, weights, side):
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
def flip(indptr, indices, weights, loads, side, fill, gain, v):
    """Move v to the other side, updating ``side``, ``fill`` and the flip gains of v and its
    neighbours (:func:`flip_gains`) in place. O(deg v + dims)."""
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


def bisection_cost(indptr, indices, weights, side, bias) -> float:
    """Cut of ``side`` plus ``bias[v]`` for every v on side 0. O(m)."""
    return float(edge_costs(indptr, indices, weights, side, CUT_DIST)[0] + bias[side == 0].sum())
