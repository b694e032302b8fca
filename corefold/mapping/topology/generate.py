"""Seeded synthetic topologies: Watts-Strogatz small worlds and random graphs.

Neuron-level topologies of real CNN layer stacks are in
:mod:`~corefold.mapping.topology.generate_cnn`. Every generator takes its seed explicitly;
the same arguments give the same arrays.
"""

from __future__ import annotations

import numba
import numpy as np

from corefold.mapping.topology.model import Topology, TopologyError, index_dtype

_RNG_CHUNK = 1 << 22


def small_world(n: int, k: int, p: float = 0.1, seed: int = 0) -> Topology:
    """A Watts-Strogatz small world built straight into CSR with bounded memory.

    Ring lattice: vertex u links to its ``k / 2`` clockwise neighbours ``u + 1 .. u + k/2``
    (mod n); each such link is rewired with probability ``p`` to ``(u, w)``, w uniform over
    the other vertices. A rewired link that lands on an existing one merges into it
    (weights add) instead of being redrawn. Each link is a reciprocal pair of synapses
    (u -> v and v -> u), so by the synapse convention its weight is 2 and ``synapses[v]`` is
    v's number of links: ``n * k`` synapses in all (10^8 for n = 10^6, k = 100).

    int32 indices and weights (n < 2^31). Time O(n k log k); peak memory about
    ``n k (2 + 4 + 4)`` bytes (targets, indices, weights): ~1 GB for 10^8 synapses.

    Raises:
        TopologyError: k odd, k < 2 or k >= n, p outside [0, 1].
    """
    if k < 2 or k % 2 or k >= n:
        raise TopologyError(f"small world needs an even k with 2 <= k < n (got n={n}, k={k})")
    if not 0.0 <= p <= 1.0:
        raise TopologyError(f"small world rewiring probability p={p} is outside [0, 1]")
    if n >= 2**31:
        raise TopologyError(f"small world n={n} needs int64 ids; use n < 2^31")
    rng = np.random.default_rng(seed)
    half = k // 2
    links = n * half
    target = np.empty(links, dtype=np.int32)
    for s in range(0, links, _RNG_CHUNK):
        e = np.arange(s, min(s + _RNG_CHUNK, links), dtype=np.int64)
        u = e // half
        t = (u + e % half + 1) % n
        rewire = np.flatnonzero(rng.random(e.shape[0]) < p)
        w = rng.integers(0, n - 1, size=rewire.shape[0])
        w += w >= u[rewire]  # skip u itself
        t[rewire] = w
        target[s:s + e.shape[0]] = t
    indptr, indices, weights = _ring_csr(n, half, target)
    del target
    synapses = _row_sums(indptr, weights) // 2
    return Topology(indptr, indices, weights, np.ones(n, np.int64), synapses)


@numba.njit(cache=True)
def _ring_csr(n, half, target):  # pragma: no cover - numba
    """CSR of the links (e // half, target[e]), both directions, weight 2, duplicates merged."""
    deg = np.zeros(n + 1, np.int64)
    for e in range(target.shape[0]):
        deg[e // half + 1] += 1
        deg[target[e] + 1] += 1
    indptr = np.cumsum(deg)
    cursor = indptr[:-1].copy()
    indices = np.empty(indptr[n], np.int32)
    for e in range(target.shape[0]):
        u = e // half
        t = target[e]
        indices[cursor[u]] = t
        cursor[u] += 1
        indices[cursor[t]] = u
        cursor[t] += 1
    weights = np.empty(indptr[n], np.int32)
    out = 0
    start = 0
    for v in range(n):
        end = indptr[v + 1]
        row = np.sort(indices[start:end])
        for i in range(row.shape[0]):
            if i > 0 and row[i] == row[i - 1]:
                weights[out - 1] += 2
            else:
                indices[out] = row[i]
                weights[out] = 2
                out += 1
        start = end
        indptr[v + 1] = out
    return indptr, indices[:out], weights[:out]


def _row_sums(indptr: np.ndarray, weights: np.ndarray) -> np.ndarray:
    out = np.zeros(indptr.shape[0] - 1, dtype=np.int64)
    nz = np.flatnonzero(np.diff(indptr))
    if nz.size:
        out[nz] = np.add.reduceat(weights, indptr[nz], dtype=np.int64)
    return out


def random_topology(n: int, synapses: int, seed: int = 0, *, max_weight: int = 1,
                    max_neuron_size: int = 1, isolated: float = 0.0) -> Topology:
    """A random directed synapse list on ``n`` neurons, symmetrised (for tests).

    ``synapses`` directed synapses with uniform random ends (self synapses allowed: they
    count as fan-in but leave no edge), weights uniform in ``[1, max_weight]``, neuron sizes
    uniform in ``[1, max_neuron_size]``; a fraction ``isolated`` of the vertices gets no
    synapse at all. O(m log m).
    """
    rng = np.random.default_rng(seed)
    connected = np.flatnonzero(rng.random(n) >= isolated) if isolated > 0 else np.arange(n)
    if connected.size == 0:
        connected = np.arange(min(n, 1))
    src = connected[rng.integers(0, connected.size, synapses)]
    dst = connected[rng.integers(0, connected.size, synapses)]
    w = rng.integers(1, max_weight + 1, synapses, dtype=np.int64)
    sizes = rng.integers(1, max_neuron_size + 1, n, dtype=np.int64)
    return Topology.from_edges(src.astype(index_dtype(n)), dst.astype(index_dtype(n)), w, n, sizes)
