r"""Every objective of the mapper, in one place.

Notation: a symmetric graph with edge weights :math:`w_{uv}` (each undirected edge stored
twice in CSR), vertex loads :math:`\ell_v \in \mathbb{N}^2` (neurons, synapses), a part
:math:`p(v)` per vertex and a core :math:`c(p) = (x, y)` per part.

* cut: :math:`\sum_{\{u,v\}: p(u) \ne p(v)} w_{uv}`
* fill of part :math:`q`: :math:`F_q = \sum_{p(v)=q} \ell_v`; a capacity violation is a
  core with :math:`F_{q,d} > C_d` in some dimension :math:`d`.
* balance: :math:`\max_q F_{q,d} / \bar F_d` per dimension.
* hop distance between cores :math:`a, b` on a board of chips of :math:`W \times H` cores:
  :math:`h(a,b) = |x_a-x_b| + |y_a-y_b| + (\kappa-1)(|\lfloor x_a/W\rfloor - \lfloor x_b/W\rfloor|
  + |\lfloor y_a/H\rfloor - \lfloor y_b/H\rfloor|)` where :math:`\kappa` is the inter-chip hop
  cost (an XY route crosses each chip boundary between the two cores exactly once).
* hop-weighted traffic: :math:`T = \sum_{\{u,v\}} w_{uv}\, h(c(p(u)), c(p(v)))`.
* link load under XY routing: an undirected edge's weight is split evenly between its two
  directions; each direction travels along x first, then along y, and adds its share to
  every directed link it uses. The maximum over links is the congestion.
* lower bound on :math:`T` for the given groups: in a 2D mesh at most :math:`4d` cores lie
  at distance :math:`d` from a core, so group :math:`a` with quotient edge weights sorted
  descending :math:`q_1 \ge q_2 \ge \dots` pays at least :math:`\sum_i q_i d_i` with
  :math:`d_i` = 1 for the first 4, 2 for the next 8, and so on; every edge has two ends, so
  :math:`T \ge \tfrac12 \sum_a \sum_i q_i d_i \ge` cut.

Multicast (``objective="multicast"``; nets from :mod:`corefold.mapping.nets`): a source
vertex s on core :math:`r` sends one spike of weight :math:`w_s` to the set :math:`D_s` of
cores holding its destinations (:math:`r` excluded), along the XY multicast tree: the
spike runs along row :math:`y_r` to every destination column, then up and down each
column. The tree's links are the row span :math:`[\min(x_r, x_D), \max(x_r, x_D)]` on row
:math:`y_r` and, per destination column x, the span :math:`[\min(y_r, y_{D,x}),
\max(y_r, y_{D,x})]`; a link that crosses a chip boundary costs :math:`\kappa`.

* multicast traffic :math:`M = \sum_s w_s\, |\mathrm{tree}_s|` (hop-weighted);
* multicast link loads: every tree link carries :math:`w_s`; on one chip the loads sum to M;
* connectivity :math:`\sum_s w_s (\lambda_s - 1)` with :math:`\lambda_s` the number of
  cores the net touches: a tree spanning :math:`\lambda_s` cores has at least
  :math:`\lambda_s - 1` links, so this is a lower bound on M for any placement of these groups.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit

from corefold.mapping.nets import fanout_connectivity, fanout_of
from corefold.mapping.topology.model import Topology


def loads_of(topo: Topology) -> np.ndarray:
    """Vertex loads as an int64 array (n, 2): neurons, synapses."""
    return np.stack([np.asarray(topo.neuron_sizes, np.int64), np.asarray(topo.synapses, np.int64)], axis=1)


def hop_distance_matrix(xy: np.ndarray, mesh_width: int, mesh_height: int,
                        interchip_hop_cost: float) -> np.ndarray:
    """Pairwise hop costs h(a, b) between cores ``xy`` (c, 2) in global coordinates: float64 (c, c).

    Complexity: O(c^2) time and memory.
    """
    xy = np.asarray(xy, np.int64)
    dx = np.abs(xy[:, None, 0] - xy[None, :, 0])
    dy = np.abs(xy[:, None, 1] - xy[None, :, 1])
    cx = xy[:, 0] // mesh_width
    cy = xy[:, 1] // mesh_height
    chips = np.abs(cx[:, None] - cx[None, :]) + np.abs(cy[:, None] - cy[None, :])
    return (dx + dy + (interchip_hop_cost - 1.0) * chips).astype(np.float64)


@njit(cache=True, nogil=True)
def edge_costs(indptr, indices, weights, part, dist):
    """(cut, D-weighted sum) over undirected edges: the cut and, with D = hop distances
    between the parts' cores, the hop-weighted traffic T. O(m)."""
    n = indptr.shape[0] - 1
    cut = 0.0
    cost = 0.0
    for v in range(n):
        pv = part[v]
        for e in range(indptr[v], indptr[v + 1]):
            pu = part[indices[e]]
            if pu != pv:
                cut += weights[e]
                cost += weights[e] * dist[pv, pu]
    return 0.5 * cut, 0.5 * cost


@njit(cache=True, nogil=True)
def part_overflow(fill, caps, p, scale):
    """Overflow of part ``p``: sum_d max(0, fill[p, d] - caps[p, d]) * scale[d]. O(dims)."""
    o = 0.0
    for d in range(fill.shape[1]):
        if fill[p, d] > caps[p, d]:
            o += (fill[p, d] - caps[p, d]) * scale[d]
    return o


def cut(topo: Topology, part: np.ndarray) -> float:
    """Weight of the edges whose ends lie in different parts. O(m)."""
    k = int(part.max()) + 1 if part.size else 1
    return float(edge_costs(topo.indptr, topo.indices, topo.weights, np.asarray(part, np.int64),
                             np.zeros((k, k)))[0])


def part_costs(topo: Topology, part: np.ndarray, dist: np.ndarray) -> tuple[float, float]:
    """(cut, sum of w * dist[part u, part v]) for parts with a distance matrix. O(m)."""
    return tuple(float(x) for x in edge_costs(topo.indptr, topo.indices, topo.weights,
                                              np.asarray(part, np.int64), dist))


def part_fill(loads: np.ndarray, part: np.ndarray, k: int) -> np.ndarray:
    """Per-part load sums, int64 (k, 2)."""
    out = np.zeros((k, loads.shape[1]), np.int64)
    for d in range(loads.shape[1]):
        out[:, d] = np.bincount(part, weights=loads[:, d], minlength=k).astype(np.int64)
    return out


def capacity_violations(fill: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Number of parts over capacity in each dimension, int64 (2,)."""
    return (fill > np.asarray(caps)[None, :]).sum(axis=0)


def balance(fill: np.ndarray) -> np.ndarray:
    """max / mean fill per dimension over the non-empty parts (1.0 = perfect)."""
    used = fill[(fill > 0).any(axis=1)]
    if used.shape[0] == 0:
        return np.ones(fill.shape[1])
    mean = used.mean(axis=0)
    return np.where(mean > 0, used.max(axis=0) / np.maximum(mean, 1e-300), 1.0)


@njit(cache=True, nogil=True)
def _quotient_dense(indptr, indices, weights, part, k):
    q = np.zeros((k, k))
    n = indptr.shape[0] - 1
    for v in range(n):
        pv = part[v]
        for e in range(indptr[v], indptr[v + 1]):
            pu = part[indices[e]]
            if pu != pv:
                q[pv, pu] += weights[e]
    return q


def quotient_graph(indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray, part: np.ndarray,
                   k: int) -> sp.csr_matrix:
    """The group graph: Q[a, b] = weight between parts a != b, symmetric CSR (k, k).

    Complexity: O(m + k^2) time, O(k^2) memory.
    """
    return sp.csr_matrix(_quotient_dense(indptr, indices, weights, np.asarray(part, np.int64), k))


def hop_weighted_traffic_quotient(q: sp.csr_matrix, dist: np.ndarray) -> float:
    """T from the group graph and the groups' distance matrix."""
    coo = q.tocoo()
    return float(0.5 * np.sum(coo.data * dist[coo.row, coo.col]))


def traffic_lower_bound(q: sp.csr_matrix) -> float:
    """The 4d-neighbours lower bound on T for these groups on any 2D mesh (see module doc)."""
    total = 0.0
    for a in range(q.shape[0]):
        row = np.sort(q.data[q.indptr[a]:q.indptr[a + 1]])[::-1]
        if row.size == 0:
            continue
        # distance of the i-th nearest slot: d such that 2d(d-1) < i+1 <= 2d(d+1)
        i = np.arange(1, row.size + 1)
        d = np.ceil((-1 + np.sqrt(1 + 2 * i)) / 2)
        total += float(np.sum(row * d))
    return 0.5 * total


def link_loads(q: sp.csr_matrix, xy: np.ndarray, width: int, height: int) -> np.ndarray:
    """Directed link loads under XY routing, float64 (height, width, 4).

    Channel 0: link (x, y) -> (x+1, y) (east); 1: (x, y) -> (x-1, y) (west);
    2: (x, y) -> (x, y+1) (north); 3: (x, y) -> (x, y-1) (south). Every ordered pair of
    groups (a, b) sends Q[a, b] / 2 from a's core to b's core. Vectorised with difference
    arrays: O(nnz(Q) + width * height).
    """
    coo = q.tocoo()
    keep = coo.row != coo.col
    a, b, load = coo.row[keep], coo.col[keep], 0.5 * coo.data[keep]
    xa, ya = xy[a, 0], xy[a, 1]
    xb, yb = xy[b, 0], xy[b, 1]
    out = np.zeros((height, width, 4))
    # x leg along row ya
    diff = np.zeros((height, width + 1))
    m = xb > xa
    np.add.at(diff, (ya[m], xa[m]), load[m])
    np.add.at(diff, (ya[m], xb[m]), -load[m])
    out[:, :, 0] = np.cumsum(diff, axis=1)[:, :width]
    diff[:] = 0
    m = xb < xa
    np.add.at(diff, (ya[m], xb[m] + 1), load[m])
    np.add.at(diff, (ya[m], xa[m] + 1), -load[m])
    out[:, :, 1] = np.cumsum(diff, axis=1)[:, :width]
    # y leg along column xb
    diff = np.zeros((height + 1, width))
    m = yb > ya
    np.add.at(diff, (ya[m], xb[m]), load[m])
    np.add.at(diff, (yb[m], xb[m]), -load[m])
    out[:, :, 2] = np.cumsum(diff, axis=0)[:height, :]
    diff[:] = 0
    m = yb < ya
    np.add.at(diff, (yb[m] + 1, xb[m]), load[m])
    np.add.at(diff, (ya[m] + 1, xb[m]), -load[m])
    out[:, :, 3] = np.cumsum(diff, axis=0)[:height, :]
    return out


def evaluate(topo: Topology, core_xy: np.ndarray, width: int, height: int, mesh_width: int,
             mesh_height: int, interchip_hop_cost: float,
             caps: tuple[int, int | None], objective: str = "synapse") -> dict:
    """Every objective of a neuron -> core mapping, from scratch.

    Args:
        topo: the neuron-level graph.
        core_xy: int (n, 2) global core coordinates per vertex.
        width, height: board size in cores; mesh_width, mesh_height: one chip's size.
        interchip_hop_cost: cost of a hop between chips in on-chip hops.
        caps: (neurons per core, synapses per core or None).
        objective: ``synapse`` (traffic, bound and link loads per synapse) or
            ``multicast`` (per spike along its XY multicast tree; the bound is the
            connectivity). Both traffics are always reported (``synapse_traffic``,
            ``multicast_traffic``).

    Returns:
        dict with cut, traffic, lower_bound, max_link_load, fill arrays and violations.
    """
    core_xy = np.asarray(core_xy, np.int64)
    core_id = core_xy[:, 1] * width + core_xy[:, 0]
    used, part = np.unique(core_id, return_inverse=True)
    k = used.shape[0]
    used_xy = np.stack([used % width, used // width], axis=1)
    dist = hop_distance_matrix(used_xy, mesh_width, mesh_height, interchip_hop_cost)
    c, t = part_costs(topo, part, dist)
    q = quotient_graph(topo.indptr, topo.indices, topo.weights, part, k)
    fill = part_fill(loads_of(topo), part, k)
    cap_arr = np.array([caps[0], caps[1] if caps[1] is not None else np.iinfo(np.int64).max], np.int64)
    fan = fanout_of(topo)
    mc, mloads = multicast_traffic(fan, core_xy, width, height, mesh_width, mesh_height, interchip_hop_cost,
                                   with_loads=True)
    km1 = float(fanout_connectivity(fan.ptr, fan.pins, np.asarray(fan.weight, np.float64), part.astype(np.int64), k))
    if objective == "multicast":
        links, traffic, bound = mloads, mc, km1
    else:
        links, traffic, bound = link_loads(q, used_xy, width, height), t, traffic_lower_bound(q)
    return {
        "objective": objective,
        "cut": c,
        "traffic": traffic,
        "synapse_traffic": t,
        "multicast_traffic": mc,
        "connectivity": km1,
        "lower_bound": bound,
        "max_link_load": float(links.max()) if links.size else 0.0,
        "link_loads": links,
        "cores_used": k,
        "fill": fill,
        "violations": capacity_violations(fill, cap_arr),
    }


@njit(cache=True, nogil=True)
def span_cost(lo, hi, chip, extra):
    """Cost of the straight segment lo..hi (lo <= hi) of one row or column: its links, plus
    ``extra`` (kappa - 1) per chip boundary (every ``chip`` cores) it crosses. O(1)."""
    return (hi - lo) + extra * (hi // chip - lo // chip)


@njit(cache=True, nogil=True)
def _multicast(fptr, fpins, fweight, vx, vy, width, height, mesh_w, mesh_h, extra, loads):
    """Total XY multicast tree cost; adds each tree's links to ``loads`` (H, W, 4) unless it
    is empty (shape (0, 0, 4)). O(pins + tree links when loads are wanted)."""
    n = fptr.shape[0] - 1
    colstamp = np.full(width, -1, np.int64)
    lo = np.zeros(width, np.int64)
    hi = np.zeros(width, np.int64)
    cols = np.empty(width, np.int64)
    want = loads.shape[0] > 0
    total = 0.0
    for s in range(n):
        if fptr[s + 1] == fptr[s]:
            continue
        xr = vx[s]
        yr = vy[s]
        minx = xr
        maxx = xr
        ncols = 0
        for p in range(fptr[s], fptr[s + 1]):
            u = fpins[p]
            x = vx[u]
            y = vy[u]
            if x == xr and y == yr:
                continue
            if colstamp[x] != s:
                colstamp[x] = s
                lo[x] = yr
                hi[x] = yr
                cols[ncols] = x
                ncols += 1
            if y < lo[x]:
                lo[x] = y
            if y > hi[x]:
                hi[x] = y
            if x < minx:
                minx = x
            if x > maxx:
                maxx = x
        if ncols == 0:
            continue
        w = fweight[s]
        cost = span_cost(minx, maxx, mesh_w, extra)
        for i in range(ncols):
            x = cols[i]
            cost += span_cost(lo[x], hi[x], mesh_h, extra)
        total += w * cost
        if want:
            for x in range(xr, maxx):
                loads[yr, x, 0] += w
            for x in range(minx + 1, xr + 1):
                loads[yr, x, 1] += w
            for i in range(ncols):
                x = cols[i]
                for y in range(yr, hi[x]):
                    loads[y, x, 2] += w
                for y in range(lo[x] + 1, yr + 1):
                    loads[y, x, 3] += w
    return total


def multicast_traffic(fanout, core_xy: np.ndarray, width: int, height: int, mesh_width: int, mesh_height: int,
                      interchip_hop_cost: float, with_loads: bool = False):
    """Hop-weighted XY multicast traffic M of a vertex -> core mapping (module docstring).

    Args:
        fanout: :class:`~corefold.mapping.nets.Fanout` (destinations of each vertex).
        core_xy: int (n, 2) global core coordinates per vertex.
        with_loads: also return the directed link loads (H, W, 4), channels as in
            :func:`link_loads`.

    Returns:
        M, or (M, loads). O(pins + total tree links).
    """
    core_xy = np.asarray(core_xy, np.int64)
    loads = np.zeros((height, width, 4) if with_loads else (0, 0, 4))
    total = _multicast(fanout.ptr, fanout.pins, np.asarray(fanout.weight, np.float64), core_xy[:, 0].copy(),
                       core_xy[:, 1].copy(), width, height, mesh_width, mesh_height,
                       float(interchip_hop_cost) - 1.0, loads)
    return (float(total), loads) if with_loads else float(total)


@njit(cache=True, nogil=True)
def _star_quotient(fptr, fpins, fweight, part, k):
    q = np.zeros((k, k))
    stamp = np.full(k, -1, np.int64)
    for s in range(fptr.shape[0] - 1):
        r = part[s]
        stamp[r] = s
        for p in range(fptr[s], fptr[s + 1]):
            b = part[fpins[p]]
            if stamp[b] != s:
                stamp[b] = s
                q[r, b] += fweight[s]
                q[b, r] += fweight[s]
    return q


def multicast_quotient(fanout, part: np.ndarray, k: int) -> sp.csr_matrix:
    """The group graph of the multicast objective's star model: Q[a, b] = weight of the
    nets rooted in a with a destination in b, plus the same from b to a.

    Sum Q[a, b] D(a, b) / 2 over groups is the sum over nets of the distances from the root
    to each destination core: an upper bound on the multicast traffic (a tree shares its
    links), used to place the groups. O(pins + k^2).
    """
    return sp.csr_matrix(_star_quotient(fanout.ptr, fanout.pins, np.asarray(fanout.weight, np.float64),
                                        np.asarray(part, np.int64), k))
