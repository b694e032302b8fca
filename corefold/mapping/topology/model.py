"""The in-memory topology: a symmetric weighted graph in CSR form, with vertex sizes.

No Python object per vertex or edge: everything is a NumPy array.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Topology:
    """An undirected weighted graph of neurons (or of groups of neurons, once coarsened).

    Attributes:
        indptr: int64[n + 1]; the neighbours of vertex v are ``indices[indptr[v]:indptr[v+1]]``.
        indices: int32 or int64[m]; every edge appears in both directions (symmetric).
        weights: float32/int64[m]; traffic (e.g. synapse count or spike rate) on each edge,
            equal in both directions.
        neuron_sizes: int64[n]; neurons in each vertex (1 for a neuron-level graph).
        synapses: int64[n]; synapse memory (fan-in) each vertex needs on its core.
    """

    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray
    neuron_sizes: np.ndarray
    synapses: np.ndarray

    @property
    def num_vertices(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def num_edges(self) -> int:
        """Undirected edges (each stored twice)."""
        return int(self.indices.shape[0] // 2)
