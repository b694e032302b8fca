"""Step 2 of lowering, second phase: the clustering's groups onto the mesh's cores
(:mod:`corefold.backend.place` describes both phases), with the M4 placement kernels of
:mod:`corefold.mapping` through a plain weighted graph of the groups' traffic.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from corefold.backend.place import Clustering
from corefold.target import Target


def place_on_mesh(clustering: Clustering, target: Target, seed: int = 0, effort: int = 1) -> list[tuple[int, int]]:
    """Core ``(x, y)`` of every group, by the M4 placement kernels (module docstring).

    ``effort`` scales the force-directed iterations and annealing steps. Cost: O(W^2 H^2)
    for the region, O((k + nnz) log k) for the bisection, O(steps * degree) for the swaps.
    """
    from corefold.mapping.objectives import hop_distance_matrix
    from corefold.mapping.place.force import improve_placement
    from corefold.mapping.place.initial import choose_region, place_groups

    k = clustering.groups
    usable = np.array(target.usable_cores, np.int64).reshape(-1, 2)
    if k == 0:
        return []
    rows, cols, vals = [], [], []
    for (a, b), w in clustering.traffic.items():
        rows += [a, b]
        cols += [b, a]
        vals += [w, w]
    q = sp.csr_matrix((np.array(vals, np.float64), (np.array(rows, np.int64), np.array(cols, np.int64))),
                      shape=(k, k))
    q.sum_duplicates()
    rng = np.random.default_rng(seed)
    slots = choose_region(usable, k, target.width, target.height, target.mesh_width, target.mesh_height,
                          target.interchip_hop_cost)
    grid = np.full((target.height, target.width), -1, np.int64)
    grid[usable[:, 1], usable[:, 0]] = np.arange(usable.shape[0])
    pos = grid[slots[:, 1], slots[:, 0]][place_groups(q, slots, rng, restarts=2)]
    dist = hop_distance_matrix(usable, target.mesh_width, target.mesh_height, target.interchip_hop_cost)
    if q.nnz:
        improve_placement(q, pos, usable, dist, target.width, target.height, rng, iterations=20 * effort,
                          swap_passes=3, anneal_steps=200 * k * effort, anneal_work=2e6 * effort)
    return [(int(usable[p, 0]), int(usable[p, 1])) for p in pos]
