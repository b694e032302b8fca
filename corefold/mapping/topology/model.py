"""The in-memory topology: a symmetric weighted graph in CSR form, with vertex sizes.

No Python object per vertex or edge: everything is a NumPy array.

Canonical form (what every reader and generator returns, and what :meth:`Topology.validate`
checks): each row's neighbours are sorted strictly ascending (so no duplicate edges), there
are no self loops, the adjacency is symmetric with equal weights both ways, weights are
finite and >= 0, ``neuron_sizes >= 1`` and ``synapses >= 0``.

Synapse convention (NOTE: shared by every reader and generator): a *directed* synapse list
(u -> v, weight w) becomes the undirected graph with ``weight(u, v) = sum of w over
u -> v plus v -> u``, and ``synapses[v]`` counts the synapses that end at v (its fan-in:
the synapse memory v needs on its core), self synapses included; self loops are dropped
from the adjacency because they never cross cores.

Directions (optional, ``Topology.sends``): the symmetric adjacency forgets which way the
synapses run, which the multicast objective needs (a spike crosses to each destination
core once). ``sends[e]`` for the CSR entry e of row v (neighbour u = indices[e]) has bit 0
set when v has a synapse to u and bit 1 when u has one to v; every entry has at least one
bit, and the entry of u's row for v holds the same two bits swapped. ``None`` means the
directions are unknown: every edge is taken to run both ways.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from corefold.errors import CorefoldError


class TopologyError(CorefoldError):
    """A topology (file or arrays) is malformed; the message names the file or array."""


def index_dtype(num_vertices: int) -> np.dtype:
    """int32 when every vertex id fits, else int64."""
    return np.dtype(np.int32) if num_vertices < 2**31 else np.dtype(np.int64)


@dataclass
class Topology:
    """An undirected weighted graph of neurons (or of groups of neurons, once coarsened).

    Attributes:
        indptr: int64[n + 1]; the neighbours of vertex v are ``indices[indptr[v]:indptr[v+1]]``.
        indices: int32 or int64[m]; every edge appears in both directions (symmetric).
        weights: float32/int32/int64[m]; traffic (e.g. synapse count or spike rate) on each
            edge, equal in both directions.
        neuron_sizes: int64[n]; neurons in each vertex (1 for a neuron-level graph).
        synapses: int64[n]; synapse memory (fan-in) each vertex needs on its core.
        sends: uint8[m] or None; which way each edge's synapses run (see the module
            docstring: bit 0 = row vertex to neighbour, bit 1 = neighbour to row vertex).
    """

    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray
    neuron_sizes: np.ndarray
    synapses: np.ndarray
    sends: np.ndarray | None = None

    @property
    def num_vertices(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def num_edges(self) -> int:
        """Undirected edges (each stored twice)."""
        return int(self.indices.shape[0] // 2)

    def degree(self) -> np.ndarray:
        """int64[n]: number of neighbours of each vertex."""
        return np.diff(self.indptr)

    def weighted_degree(self) -> np.ndarray:
        """float64 or int64[n]: sum of the weights of each vertex's edges. O(m)."""
        acc = np.float64 if self.weights.dtype.kind == "f" else np.int64
        out = np.zeros(self.num_vertices, dtype=acc)
        nz = np.flatnonzero(np.diff(self.indptr))
        if nz.size:
            out[nz] = np.add.reduceat(self.weights, self.indptr[nz], dtype=acc)
        return out

    def total_weight(self) -> float | int:
        """Sum of the weights of the undirected edges (each counted once)."""
        acc = np.float64 if self.weights.dtype.kind == "f" else np.int64
        s = self.weights.sum(dtype=acc) / 2
        return float(s) if acc is np.float64 else int(s)

    def nbytes(self) -> int:
        arrays = (self.indptr, self.indices, self.weights, self.neuron_sizes, self.synapses, self.sends)
        return sum(a.nbytes for a in arrays if a is not None)

    @classmethod
    def from_edges(cls, src: np.ndarray, dst: np.ndarray, weights: np.ndarray | None = None,
                   num_vertices: int | None = None, neuron_sizes: np.ndarray | None = None,
                   weights_dtype: str | np.dtype | None = None, directions: bool = False) -> "Topology":
        """Build the canonical symmetric topology of a directed synapse list.

        ``weight(u, v) = sum of weights over u -> v and v -> u``; ``synapses[v]`` = number of
        synapses ending at v (self synapses included); self loops are dropped from the
        adjacency. A Numba kernel scatters both directions into CSR, sorts each row and
        merges duplicates in place: O(m log d) time, memory the inputs plus the result.

        Args:
            src, dst: integer arrays of the same length, ids in ``[0, num_vertices)``.
            weights: per-synapse traffic (default 1 each), >= 0.
            num_vertices: defaults to ``max id + 1``.
            neuron_sizes: default all 1.
            weights_dtype: of the result; default int64 for integer weights, float32
                otherwise (sums are accumulated in this dtype).
            directions: also record which way each edge's synapses run (``sends``,
                O(m log d) more).

        Raises:
            TopologyError: lengths differ, an id is out of range, a weight is negative, or
                summed weights overflow the dtype.
        """
        src = np.asarray(src)
        dst = np.asarray(dst)
        if src.shape != dst.shape or src.ndim != 1:
            raise TopologyError(f"edge arrays src {src.shape} and dst {dst.shape} differ in shape")
        if src.size and (src.dtype.kind not in "iu" or dst.dtype.kind not in "iu"):
            raise TopologyError("edge ids must be integers")
        n = int(num_vertices if num_vertices is not None else (max(src.max(), dst.max()) + 1 if src.size else 0))
        if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
            raise TopologyError(f"edge list has a vertex id outside [0, {n})")
        if weights is None:
            weights = np.ones(1, dtype=np.int64)  # broadcast by the kernel
            wdtype = np.dtype(weights_dtype or np.int64)
        else:
            weights = np.asarray(weights)
            if weights.shape != src.shape:
                raise TopologyError(f"weights {weights.shape} do not match edges {src.shape}")
            if weights.size and not (np.all(np.isfinite(weights)) and weights.min() >= 0):
                raise TopologyError("edge weights must be finite and >= 0")
            wdtype = np.dtype(weights_dtype or (np.int64 if weights.dtype.kind in "iub" else np.float32))
        synapses = np.bincount(dst, minlength=n).astype(np.int64) if n else np.zeros(0, np.int64)
        idt = index_dtype(n)
        if src.size:
            src, dst = src.astype(idt, copy=False), dst.astype(idt, copy=False)
        entries = 2 * int(np.count_nonzero(src != dst)) if src.size else 0
        indices = np.empty(entries, dtype=idt)
        w = np.empty(entries, dtype=wdtype)
        indptr, used = _symmetric_csr(n, src, dst, weights.astype(wdtype, copy=False), indices, w)
        if used < entries:  # duplicates merged: release the tail when it is worth it
            indices, w = indices[:used], w[:used]
            if used < 0.9 * entries:
                indices, w = indices.copy(), w.copy()
        if wdtype.kind in "iu" and w.size and w.min() < 0:
            raise TopologyError(f"summed edge weights overflow {wdtype.name}")
        sizes = np.ones(n, np.int64) if neuron_sizes is None else np.asarray(neuron_sizes, dtype=np.int64)
        sends = direction_mask(indptr, indices, src, dst) if directions else None
        return cls(indptr, indices, w, sizes, synapses, sends)

    def validate(self, name: str = "topology", check_symmetry: bool = True) -> None:
        """Check the canonical form (see the module docstring). O(m log d) time, O(1) extra memory.

        Raises:
            TopologyError: naming ``name`` and the first violated property.
        """
        n = self.num_vertices
        ip, ix, w = self.indptr, self.indices, self.weights
        if ip.ndim != 1 or ip.shape[0] < 1 or ip.dtype != np.int64:
            raise TopologyError(f"{name}: indptr must be a 1-D int64 array of n + 1 entries")
        if ip[0] != 0 or ip[-1] != ix.shape[0] or (n and np.any(np.diff(ip) < 0)):
            raise TopologyError(f"{name}: indptr must start at 0, never decrease and end at len(indices)")
        if ix.ndim != 1 or ix.dtype.kind not in "iu":
            raise TopologyError(f"{name}: indices must be a 1-D integer array")
        if w.shape != ix.shape or w.dtype.kind not in "iuf":
            raise TopologyError(f"{name}: weights must be numbers, one per index")
        if ix.size and (ix.min() < 0 or ix.max() >= n):
            raise TopologyError(f"{name}: a neighbour id is outside [0, {n})")
        if w.size and (w.min() < 0 or (w.dtype.kind == "f" and not np.all(np.isfinite(w)))):
            raise TopologyError(f"{name}: weights must be finite and >= 0")
        for attr, low in (("neuron_sizes", 1), ("synapses", 0)):
            a = getattr(self, attr)
            if a.shape != (n,) or a.dtype.kind not in "iu":
                raise TopologyError(f"{name}: {attr} must be an integer array of {n} entries")
            if n and a.min() < low:
                raise TopologyError(f"{name}: {attr} must be >= {low}")
        bad = _first_unsorted_row(ip, ix)
        if bad >= 0:
            raise TopologyError(f"{name}: neighbours of vertex {bad} are not strictly ascending "
                                "(unsorted, duplicate or self loop)")
        if check_symmetry:
            bad = _first_asymmetric_row(ip, ix, w)
            if bad >= 0:
                raise TopologyError(f"{name}: vertex {bad} has an edge without an equal-weight reverse edge")
        if self.sends is not None:
            if self.sends.shape != ix.shape or self.sends.dtype != np.uint8:
                raise TopologyError(f"{name}: sends must be a uint8 array, one per index")
            bad = _first_bad_direction(ip, ix, self.sends)
            if bad >= 0:
                raise TopologyError(f"{name}: vertex {bad} has an edge whose directions (sends) are empty, "
                                    "out of range or do not mirror its reverse edge")


@numba.njit(cache=True)
def _symmetric_csr(n, src, dst, w, indices, weights):  # pragma: no cover - numba
    """Both directions of every non-self synapse into CSR rows, sorted, duplicates summed.

    ``w`` has one weight per synapse or a single one for all. Returns (indptr, entries used).
    """
    one = w.shape[0] == 1
    deg = np.zeros(n + 1, np.int64)
    for e in range(src.shape[0]):
        u, v = src[e], dst[e]
        if u != v:
            deg[u + 1] += 1
            deg[v + 1] += 1
    indptr = np.cumsum(deg)
    cursor = indptr[:-1].copy()
    for e in range(src.shape[0]):
        u, v = src[e], dst[e]
        if u != v:
            x = w[0] if one else w[e]
            indices[cursor[u]] = v
            weights[cursor[u]] = x
            cursor[u] += 1
            indices[cursor[v]] = u
            weights[cursor[v]] = x
            cursor[v] += 1
    out = 0
    start = 0
    for r in range(n):
        end = indptr[r + 1]
        order = np.argsort(indices[start:end])
        row_i = indices[start:end][order]
        row_w = weights[start:end][order]
        for i in range(row_i.shape[0]):
            if i > 0 and row_i[i] == row_i[i - 1]:
                weights[out - 1] += row_w[i]
            else:
                indices[out] = row_i[i]
                weights[out] = row_w[i]
                out += 1
        start = end
        indptr[r + 1] = out
    return indptr, out


@numba.njit(cache=True)
def _first_unsorted_row(indptr, indices):  # pragma: no cover - numba
    for v in range(indptr.shape[0] - 1):
        prev = -1
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if u <= prev or u == v:
                return v
            prev = u
    return -1


@numba.njit(cache=True)
def _first_asymmetric_row(indptr, indices, weights):  # pragma: no cover - numba
    for v in range(indptr.shape[0] - 1):
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            lo, hi = indptr[u], indptr[u + 1]
            while lo < hi:  # rows are sorted: binary search for v in u's row
                mid = (lo + hi) // 2
                if indices[mid] < v:
                    lo = mid + 1
                else:
                    hi = mid
            if lo >= indptr[u + 1] or indices[lo] != v or weights[lo] != weights[e]:
                return v
    return -1


@numba.njit(cache=True)
def _find(indptr, indices, v, u):  # pragma: no cover - numba
    """Position of u in v's sorted row, or -1. O(log deg v)."""
    lo, hi = indptr[v], indptr[v + 1]
    while lo < hi:
        mid = (lo + hi) // 2
        if indices[mid] < u:
            lo = mid + 1
        else:
            hi = mid
    if lo < indptr[v + 1] and indices[lo] == u:
        return lo
    return -1


@numba.njit(cache=True)
def direction_mask(indptr, indices, src, dst):  # pragma: no cover - numba
    """``sends`` of a canonical CSR built from the synapses ``src -> dst``. O(synapses log d)."""
    sends = np.zeros(indices.shape[0], np.uint8)
    for i in range(src.shape[0]):
        u, v = src[i], dst[i]
        if u == v:
            continue
        e = _find(indptr, indices, u, v)
        sends[e] |= 1
        e = _find(indptr, indices, v, u)
        sends[e] |= 2
    return sends


@numba.njit(cache=True)
def _first_bad_direction(indptr, indices, sends):  # pragma: no cover - numba
    for v in range(indptr.shape[0] - 1):
        for e in range(indptr[v], indptr[v + 1]):
            s = sends[e]
            if s == 0 or s > 3:
                return v
            r = _find(indptr, indices, indices[e], v)
            if r < 0 or sends[r] != ((s & 1) << 1 | (s >> 1)):
                return v
    return -1
