r"""A lower bound on the hop-weighted traffic of *every* mapping that keeps the capacities.

:func:`~corefold.mapping.objectives.traffic_lower_bound` bounds the traffic of one
partition's groups over their placements; this one bounds the optimum over all
partitions and placements, so a mapping's traffic over it says how far from the best
possible the mapping can be at most (SPEC M4; issue 14 item 7, lenet-tight).

Notation as in :mod:`~corefold.mapping.objectives`: edge weights :math:`w_{uv}`, vertex
loads :math:`(n_v, s_v)` (neurons, synapses), per-core capacities :math:`(N, S)`, hop
distance :math:`h`, traffic :math:`T = \sum_{\{u,v\}} w_{uv} h(c(u), c(v))`.

1. **Per vertex.** :math:`T_u = \sum_{v \sim u} w_{uv} h(c(u), c(v))` is what u's edges
   cost. u's own core holds at most :math:`a_u` of u's incident weight, the most that
   neighbours of total load at most :math:`(N - n_u, S - s_u)` can have; any other core at
   most :math:`b_u` (the same with :math:`(N, S)`). Each is bounded by the smaller of two
   fractional knapsacks, one per capacity (either one alone is a relaxation). With
   :math:`K(t)` the most cores any core has within hop distance :math:`t` (itself
   included), at most :math:`a_u + (K(t) - 1) b_u` of the weight lies within t, so with the
   distinct distances :math:`0 = t_0 < t_1 < \dots`

   .. math:: T_u \ge L_u = \sum_k (t_{k+1} - t_k)\, \max(0,\; W_u - a_u - (K(t_k) - 1)\, b_u).

2. **Over the vertices.** Every edge has two ends, so :math:`\sum_u y_u T_u \le T` for any
   :math:`y \ge 0` with :math:`y_u + y_v \le 1` on every edge (a fractional vertex
   packing). The bound is :math:`\max_y \sum_u y_u L_u` over those y, a linear program
   (HiGHS); its optimum is half-integral. On a layered network it charges each edge to the
   end that pays for it: on lenet-tight the pool1 neurons, whose ~200 conv2 readers (150
   synapses each) fit 84 to a core, carry the bound, and the conv2 neurons, whose 150
   inputs could all share their core, count nothing. :math:`y = \tfrac12` everywhere
   (every edge from both ends, the bound of stop 31: 1.10e5 there) is one feasible point;
   it is used when the program is larger than ``lp_edges``.

What it does not see: every vertex gets its nearest cores at once, so the perimeter of a
core's region (the receptive fields a core boundary cuts, in every layer) costs nothing
here. On lenet-tight it gives 1.95e5 against corefold's 3.85e5; a bound within 1.1x would
have to charge those boundaries.

Complexity: O(m log m) for the per-vertex bounds (each vertex's incident edges sorted
twice), O(c^2) for K over c cores (up to :data:`RING_CORES`; a closed form above), and one
LP over n variables and m/2 rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numba import njit

from corefold.mapping.objectives import hop_distance_matrix, loads_of
from corefold.mapping.topology.model import Topology

#: Above this many undirected edges, y = 1/2 replaces the linear program (module doc).
LP_EDGES = 4_000_000
#: Above this many cores, K(t) is not measured on the c x c hop distances but bounded by
#: the cores of a diamond of L1 radius t, ``1 + 2 t (t + 1)`` (hops are at least the L1
#: distance, so the bound stays valid, only looser near the board's edges).
RING_CORES = 4096


@dataclass(frozen=True)
class TrafficBound:
    """:func:`traffic_bound`'s result.

    Attributes:
        value: T >= value for every mapping that keeps the capacities.
        half: the same per-vertex bounds counted from both ends (y = 1/2), <= value.
        method: ``"lp"`` (the vertex-packing program) or ``"half"`` (too large for it).
        per_vertex: float64[n], the L_u of the module docstring.
        charged: float64[n], the y the bound uses.
    """

    value: float
    half: float
    method: str
    per_vertex: np.ndarray
    charged: np.ndarray


@njit(cache=True)
def _knapsack(w, size, room):  # pragma: no cover - compiled
    """The most weight items of ``size`` fit in ``room``, fractions allowed (an upper
    bound on the 0/1 knapsack). O(k log k)."""
    if room <= 0:
        total = 0.0
        for i in range(w.size):
            if size[i] <= 0:
                total += w[i]
        return total
    ratio = np.empty(w.size)
    for i in range(w.size):
        ratio[i] = np.inf if size[i] <= 0 else w[i] / size[i]
    order = np.argsort(-ratio)
    left, total = float(room), 0.0
    for i in order:
        if size[i] <= 0:
            total += w[i]
        elif size[i] <= left:
            total += w[i]
            left -= size[i]
        else:
            total += w[i] * left / size[i]
            break
    return total


@njit(cache=True)
def _per_vertex(indptr, indices, weights, neurons, synapses, ncap, scap, steps, within):  # pragma: no cover
    """L_u for every vertex (module docstring, step 1); ``scap`` < 0: no synapse capacity."""
    n = indptr.size - 1
    out = np.zeros(n)
    for u in range(n):
        lo, hi = indptr[u], indptr[u + 1]
        if hi == lo:
            continue
        nb = indices[lo:hi]
        w = weights[lo:hi].astype(np.float64)
        total = w.sum()
        sn = neurons[nb].astype(np.float64)
        a = _knapsack(w, sn, ncap - neurons[u])
        b = _knapsack(w, sn, ncap)
        if scap >= 0:
            ss = synapses[nb].astype(np.float64)
            a = min(a, _knapsack(w, ss, scap - synapses[u]))
            b = min(b, _knapsack(w, ss, scap))
        lb = 0.0
        for k in range(steps.size):
            beyond = total - a - (within[k] - 1) * b
            if beyond <= 0:
                break
            lb += steps[k] * beyond
        out[u] = lb
    return out


def _rings(core_xy: np.ndarray, mesh_width: int, mesh_height: int, interchip_hop_cost: float,
           ring_cores: int = RING_CORES):
    """(steps t_{k+1} - t_k, K(t_k)) over the distinct hop distances of the cores: O(c^2)
    up to ``ring_cores`` cores; above, unit steps of L1 distance with K bounded by the
    diamond (:data:`RING_CORES`), O(sqrt c)."""
    c = len(core_xy)
    if c > ring_cores:
        t = np.arange(0, c + 1)
        within = np.minimum(1 + 2 * t * (t + 1), c)
        last = int(np.searchsorted(within, c)) + 1
        return np.ones(last, np.float64), within[:last]
    dist = hop_distance_matrix(core_xy, mesh_width, mesh_height, interchip_hop_cost)
    ts = np.unique(dist)
    within = np.array([int((dist <= t).sum(axis=1).max()) for t in ts], np.int64)
    steps = np.diff(ts)
    return steps, within[:-1]


def traffic_bound(topo: Topology, core_xy: np.ndarray, mesh_width: int, mesh_height: int,
                  interchip_hop_cost: float, caps: tuple[int, int | None],
                  lp_edges: int = LP_EDGES, ring_cores: int = RING_CORES) -> TrafficBound:
    """A lower bound on T over every mapping of ``topo`` onto the cores ``core_xy`` (c, 2),
    global coordinates on chips of ``mesh_width`` x ``mesh_height``) in which no core holds
    more than ``caps`` = (neurons, synapses or None) (module docstring).

    Complexity: O(m log m + c^2) and an LP of n variables and m/2 rows (m edge entries).
    """
    from scipy.optimize import linprog

    loads = loads_of(topo)
    ncap, scap = int(caps[0]), -1 if caps[1] is None else int(caps[1])
    steps, within = _rings(np.asarray(core_xy), mesh_width, mesh_height, interchip_hop_cost, ring_cores)
    per = _per_vertex(np.asarray(topo.indptr, np.int64), np.asarray(topo.indices, np.int64),
                      np.asarray(topo.weights, np.float64), loads[:, 0].copy(), loads[:, 1].copy(),
                      ncap, scap, steps.astype(np.float64), within.astype(np.float64))
    n = topo.num_vertices
    half = 0.5 * float(per.sum())
    if not per.any():
        return TrafficBound(0.0, 0.0, "lp", per, np.zeros(n))
    if topo.num_edges > lp_edges:
        return TrafficBound(half, half, "half", per, np.full(n, 0.5))
    rows = np.repeat(np.arange(n), np.diff(topo.indptr))
    cols = np.asarray(topo.indices, np.int64)
    upper = rows < cols
    r, c = rows[upper], cols[upper]
    e = r.size
    packing = sp.csr_matrix((np.ones(2 * e), (np.r_[np.arange(e), np.arange(e)], np.r_[r, c])), shape=(e, n))
    res = linprog(-per, A_ub=packing, b_ub=np.ones(e), bounds=(0, 1), method="highs")
    if res.status != 0:  # pragma: no cover - the program is always feasible (y = 0) and bounded
        return TrafficBound(half, half, "half", per, np.full(n, 0.5))
    y = np.clip(res.x, 0.0, 1.0)
    # the solver's y may break y_u + y_v <= 1 by its tolerance: scale it back inside
    worst = float((y[r] + y[c]).max()) if e else 0.0
    if worst > 1.0:
        y = y / worst
    return TrafficBound(max(float(per @ y), half), half, "lp", per, y)
