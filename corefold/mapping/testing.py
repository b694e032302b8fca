"""Small seeded graphs for the mapper's tests (no topology files needed)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from corefold.mapping.topology.model import Topology


def from_matrix(a: sp.spmatrix, neuron_sizes=None, synapses=None) -> Topology:
    """A Topology from a symmetric sparse matrix (diagonal dropped)."""
    a = sp.csr_matrix(a, dtype=np.float64)
    a.setdiag(0)
    a.eliminate_zeros()
    a.sort_indices()
    n = a.shape[0]
    return Topology(a.indptr.astype(np.int64), a.indices.astype(np.int32), a.data.copy(),
                    np.ones(n, np.int64) if neuron_sizes is None else np.asarray(neuron_sizes, np.int64),
                    np.diff(a.indptr).astype(np.int64) if synapses is None else np.asarray(synapses, np.int64))


def random_graph(n: int, avg_degree: float, seed: int, max_weight: int = 3) -> Topology:
    """Erdos-Renyi-like symmetric graph with integer weights in [1, max_weight]."""
    rng = np.random.default_rng(seed)
    m = int(n * avg_degree / 2)
    u = rng.integers(0, n, m)
    v = rng.integers(0, n, m)
    w = rng.integers(1, max_weight + 1, m).astype(np.float64)
    a = sp.coo_matrix((w, (u, v)), shape=(n, n)).tocsr()
    a = a + a.T
    return from_matrix(a)


def grid_graph(width: int, height: int) -> Topology:
    """4-neighbour grid, unit weights."""
    idx = np.arange(width * height).reshape(height, width)
    r = np.concatenate([idx[:, :-1].ravel(), idx[:-1, :].ravel()])
    c = np.concatenate([idx[:, 1:].ravel(), idx[1:, :].ravel()])
    a = sp.coo_matrix((np.ones(r.size), (r, c)), shape=(width * height,) * 2)
    return from_matrix(a + a.T)


def conv_like_graph(n: int, half_band: int, stride: int = 31) -> Topology:
    """Banded graph: v links to v +- 1..half_band and v +- stride (a conv layer's locality)."""
    offs = list(range(1, half_band + 1)) + [stride]
    rows, cols = [], []
    for d in offs:
        rows.append(np.arange(n - d))
        cols.append(np.arange(d, n))
    r, c = np.concatenate(rows), np.concatenate(cols)
    a = sp.coo_matrix((np.ones(r.size), (r, c)), shape=(n, n))
    return from_matrix(a + a.T)


def crossing_weight(topo: Topology, side: np.ndarray) -> float:
    """Weight of the edges whose ends lie on different sides, edge by edge in plain Python
    (a reference for the Numba kernels' incremental cuts). O(m)."""
    return sum(topo.weights[e] for v in range(topo.num_vertices) for e in range(topo.indptr[v], topo.indptr[v + 1])
               if side[v] != side[topo.indices[e]]) / 2

