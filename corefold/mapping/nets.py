r"""Nets (hyperedges) of a topology, for the multicast objective.

A spiking neuron's spike crosses to each core that holds one of its destinations once,
however many synapses it has there (multicast). So the unit of traffic is the *net* of a
source vertex s: s and its destinations, :math:`e_s = \{s\} \cup \mathrm{out}(s)`, of
weight :math:`w_s` (the vertex's neuron count: one spike per neuron).

Two forms:

* :class:`Fanout` (source, destinations): what the multicast tree needs (the root is the
  source's core). Built from a topology's ``sends`` (or, when the directions are unknown,
  every neighbour is a destination). No copy when the directions are unknown.
* :class:`Hypergraph` (pin sets, the source among the pins): what the partitioner
  optimises, the connectivity :math:`\sum_e w_e(\lambda_e - 1)` with :math:`\lambda_e` the
  number of parts net e touches (KaHyPar's km1). Restricting every net to one side of a
  bisection (:func:`restrict`, cut-net splitting) makes the cut nets summed over a
  recursive bisection equal the k-way connectivity.

Everything is CSR arrays and Numba kernels; no Python object per net.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from corefold.mapping.topology.model import Topology


@dataclass
class Fanout:
    """Net of every vertex v: destinations ``pins[ptr[v]:ptr[v+1]]`` (v itself never among
    them), weight ``weight[v]``; a vertex with no destinations sends nothing."""

    ptr: np.ndarray
    pins: np.ndarray
    weight: np.ndarray

    @property
    def num_pins(self) -> int:
        return int(self.ptr[-1])


@dataclass
class Hypergraph:
    """Nets as pin sets: net i holds the vertices ``pins[ptr[i]:ptr[i+1]]`` (at least two,
    distinct), weight ``weight[i]``."""

    ptr: np.ndarray
    pins: np.ndarray
    weight: np.ndarray

    @property
    def num_nets(self) -> int:
        return int(self.ptr.shape[0] - 1)


@njit(cache=True, nogil=True)
def _out_rows(indptr, indices, sends):
    n = indptr.shape[0] - 1
    ptr = np.zeros(n + 1, np.int64)
    for v in range(n):
        c = 0
        for e in range(indptr[v], indptr[v + 1]):
            if sends[e] & 1:
                c += 1
        ptr[v + 1] = ptr[v] + c
    pins = np.empty(ptr[n], indices.dtype)
    p = 0
    for v in range(n):
        for e in range(indptr[v], indptr[v + 1]):
            if sends[e] & 1:
                pins[p] = indices[e]
                p += 1
    return ptr, pins


def fanout_of(topo: Topology) -> Fanout:
    """Each vertex's destinations (``sends`` bit 0; every neighbour when ``sends`` is None).

    Complexity: O(m); no copy without directions.
    """
    weight = np.asarray(topo.neuron_sizes, np.float64)
    if topo.sends is None:
        return Fanout(np.asarray(topo.indptr, np.int64), topo.indices, weight)
    ptr, pins = _out_rows(np.asarray(topo.indptr, np.int64), topo.indices, topo.sends)
    return Fanout(ptr, pins, weight)


@njit(cache=True, nogil=True)
def _pin_sets(fptr, fpins, fweight):
    n = fptr.shape[0] - 1
    nets = 0
    total = 0
    for v in range(n):
        d = fptr[v + 1] - fptr[v]
        if d > 0:
            nets += 1
            total += d + 1
    ptr = np.zeros(nets + 1, np.int64)
    pins = np.empty(total, np.int64)
    weight = np.empty(nets)
    i = 0
    p = 0
    for v in range(n):
        if fptr[v + 1] == fptr[v]:
            continue
        pins[p] = v
        p += 1
        for e in range(fptr[v], fptr[v + 1]):
            pins[p] = fpins[e]
            p += 1
        weight[i] = fweight[v]
        i += 1
        ptr[i] = p
    return ptr, pins, weight


def hypergraph_of(fanout: Fanout) -> Hypergraph:
    """Pin sets {v} + destinations of every vertex with destinations. O(n + pins)."""
    ptr, pins, weight = _pin_sets(fanout.ptr, fanout.pins, fanout.weight)
    return Hypergraph(ptr, pins, weight)


@njit(cache=True, nogil=True)
def incidence(ptr, pins, n):
    """Vertex -> nets CSR (the transpose of the pin lists): (vptr, vnets). O(n + pins)."""
    vptr = np.zeros(n + 1, np.int64)
    for p in range(pins.shape[0]):
        vptr[pins[p] + 1] += 1
    for v in range(n):
        vptr[v + 1] += vptr[v]
    cursor = vptr[:-1].copy()
    vnets = np.empty(pins.shape[0], np.int64)
    for i in range(ptr.shape[0] - 1):
        for p in range(ptr[i], ptr[i + 1]):
            v = pins[p]
            vnets[cursor[v]] = i
            cursor[v] += 1
    return vptr, vnets


@njit(cache=True, nogil=True)
def restrict(ptr, pins, weight, side, which):
    """Every net cut down to its pins with ``side == which``, renumbered in that side's
    order (vertices keep their relative order); nets left with fewer than two pins go.
    This is cut-net splitting: each side of a bisection keeps its part of a cut net.
    O(pins + n).

    Returns:
        (ptr, pins, weight) of the side's hypergraph.
    """
    n = side.shape[0]
    local = np.full(n, -1, np.int64)
    c = 0
    for v in range(n):
        if side[v] == which:
            local[v] = c
            c += 1
    nets = 0
    total = 0
    for i in range(ptr.shape[0] - 1):
        k = 0
        for p in range(ptr[i], ptr[i + 1]):
            if local[pins[p]] >= 0:
                k += 1
        if k >= 2:
            nets += 1
            total += k
    optr = np.zeros(nets + 1, np.int64)
    opins = np.empty(total, np.int64)
    ow = np.empty(nets)
    j = 0
    q = 0
    for i in range(ptr.shape[0] - 1):
        k = 0
        for p in range(ptr[i], ptr[i + 1]):
            if local[pins[p]] >= 0:
                k += 1
        if k < 2:
            continue
        for p in range(ptr[i], ptr[i + 1]):
            lv = local[pins[p]]
            if lv >= 0:
                opins[q] = lv
                q += 1
        ow[j] = weight[i]
        j += 1
        optr[j] = q
    return optr, opins, ow


@njit(cache=True, nogil=True)
def contract(ptr, pins, weight, coarse_of, nc):
    """Nets on the coarse vertices: pins mapped through ``coarse_of`` and deduplicated;
    nets left with one pin (all inside one coarse vertex) go. O(pins).

    Returns:
        (ptr, pins, weight) of the coarse hypergraph.
    """
    stamp = np.full(nc, -1, np.int64)
    optr = np.zeros(ptr.shape[0], np.int64)
    opins = np.empty(pins.shape[0], np.int64)
    ow = np.empty(ptr.shape[0] - 1)
    j = 0
    q = 0
    for i in range(ptr.shape[0] - 1):
        start = q
        for p in range(ptr[i], ptr[i + 1]):
            c = coarse_of[pins[p]]
            if stamp[c] != i:
                stamp[c] = i
                opins[q] = c
                q += 1
        if q - start < 2:
            q = start
            continue
        ow[j] = weight[i]
        j += 1
        optr[j] = q
    return optr[:j + 1].copy(), opins[:q].copy(), ow[:j].copy()


@njit(cache=True, nogil=True)
def connectivity(ptr, pins, weight, part, k):
    """:math:`\\sum_e w_e (\\lambda_e - 1)`: the km1 objective of ``part``. O(pins)."""
    stamp = np.full(k, -1, np.int64)
    total = 0.0
    for i in range(ptr.shape[0] - 1):
        lam = 0
        for p in range(ptr[i], ptr[i + 1]):
            q = part[pins[p]]
            if stamp[q] != i:
                stamp[q] = i
                lam += 1
        if lam > 1:
            total += weight[i] * (lam - 1)
    return total


@njit(cache=True, nogil=True)
def fanout_connectivity(fptr, fpins, fweight, part, k):
    """:func:`connectivity` of the nets {v} + destinations, straight from a :class:`Fanout`
    (no pin-set copy). O(pins)."""
    stamp = np.full(k, -1, np.int64)
    total = 0.0
    for v in range(fptr.shape[0] - 1):
        if fptr[v + 1] == fptr[v]:
            continue
        stamp[part[v]] = v
        lam = 1
        for p in range(fptr[v], fptr[v + 1]):
            q = part[fpins[p]]
            if stamp[q] != v:
                stamp[q] = v
                lam += 1
        total += fweight[v] * (lam - 1)
    return total


@njit(cache=True, nogil=True)
def _star_weights(indptr, indices, sends, fptr, fweight):
    n = indptr.shape[0] - 1
    out = np.zeros(indices.shape[0])
    for v in range(n):
        dv = fptr[v + 1] - fptr[v]
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            s = sends[e] if sends.shape[0] > 0 else 3
            if s & 1 and dv > 0:
                out[e] += fweight[v] / dv
            du = fptr[u + 1] - fptr[u]
            if s & 2 and du > 0:
                out[e] += fweight[u] / du
    return out


def star_weights(topo: Topology, fanout: Fanout) -> np.ndarray:
    """Edge weights of the nets' star model: the edge from source s to a destination
    weighs :math:`w_s / |\\mathrm{out}(s)|` (both directions summed), so a net weighs
    :math:`w_s` in all and a vertex sharing a small net with another is tied to it more
    than one sharing a large net (KaHyPar's heavy-edge rating, :math:`w_e / (|e| - 1)`).
    The partitioner coarsens and grows on these weights under the multicast objective.
    O(m)."""
    sends = topo.sends if topo.sends is not None else np.zeros(0, np.uint8)
    return _star_weights(np.asarray(topo.indptr, np.int64), topo.indices, sends, fanout.ptr,
                         np.asarray(fanout.weight, np.float64))


@njit(cache=True, nogil=True)
def net_matching(hptr, hpins, hw, vptr, vnets, loads, limit, order, seed, max_nets, max_pins):
    """Pair vertices that share heavy small nets (KaHyPar's heavy-edge rating
    :math:`r(u, v) = \\sum_{e \\ni u, v} w_e / (|e| - 1)`), visiting ``order``.

    Unlike a graph's edges, the rating sees *siblings*: two destinations of the same
    sources (a conv layer's channels at one position share all their input nets) are
    rated by every net they share. A vertex rates at most ``max_nets`` of its nets (a
    random sample beyond) and at most ``max_pins`` pins of each (sampled, the rating
    scaled up), so a visit costs O(max_nets * max_pins). As KaHyPar does, the rating is
    divided by the two vertices' neuron counts, so coarse vertices grow evenly (lenet,
    multicast: connectivity 7,776 -> 7,223, mean of seeds 0-2). A pair's merged load stays
    within ``limit``. ``mate[v] == v``: unmatched.

    Returns:
        (mate, pairs).
    """
    np.random.seed(seed)
    n = vptr.shape[0] - 1
    mate = np.full(n, -1, np.int64)
    score = np.zeros(n)
    stamp = np.full(n, -1, np.int64)
    touched = np.empty(max(1, max_nets * max_pins), np.int64)
    pairs = 0
    for idx in range(order.shape[0]):
        u = order[idx]
        if mate[u] != -1:
            continue
        deg = vptr[u + 1] - vptr[u]
        nt = 0
        for j in range(min(deg, max_nets)):
            e = vnets[vptr[u] + (j if deg <= max_nets else np.random.randint(deg))]
            size = hptr[e + 1] - hptr[e]
            if size < 2:
                continue
            r = hw[e] / (size - 1)
            take = size
            if size > max_pins:
                take = max_pins
                r *= size / max_pins
            for q in range(take):
                v = hpins[hptr[e] + (q if size <= max_pins else np.random.randint(size))]
                if v == u or mate[v] != -1:
                    continue
                if loads[u, 0] + loads[v, 0] > limit[0] or loads[u, 1] + loads[v, 1] > limit[1]:
                    continue
                if stamp[v] != idx:
                    stamp[v] = idx
                    score[v] = 0.0
                    touched[nt] = v
                    nt += 1
                score[v] += r
        best = -1
        best_s = 0.0
        for t in range(nt):
            v = touched[t]
            sv = score[v] / (max(loads[u, 0], 1) * max(loads[v, 0], 1))
            if sv > best_s:
                best_s = sv
                best = v
        if best >= 0:
            mate[u] = best
            mate[best] = u
            pairs += 1
        else:
            mate[u] = u
    return mate, pairs
