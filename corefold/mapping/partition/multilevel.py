r"""One bisection done the multilevel way: the seed's three phases on one part of the graph.

Coarsen (:mod:`.coarsen`, heavy-edge matching), cut the coarsest graph by greedy growing
(:func:`~.initial.bisect`), then project the sides level by level, rebalancing
(:mod:`.balance`) and refining by Fiduccia-Mattheyses (:mod:`.fm`) on each, as METIS's
``pmetis.c`` bisects (``MlevelRecursiveBisection``).
"""

from __future__ import annotations

import numpy as np

from corefold.mapping.partition.balance import balance_caps, lower_bounds, rebalance_sides
from corefold.mapping.partition.coarsen import Level, coarsen
from corefold.mapping.partition.fm import fm_refine
from corefold.mapping.partition.initial import bisect


def multilevel_bisect(indptr, indices, weights, loads, caps2: np.ndarray, bias: np.ndarray,
                      rng: np.random.Generator, restarts: int = 4, repeats: int = 4,
                      min_shrink: float = 0.2, coarsest: int = 128, rebalance_moves: int = 0,
                      two_hop: bool = False, rebalance_tolerance: float | None = None, max_levels: int = 40,
                      expansion: bool = False) -> np.ndarray:
    """The seed's phases applied to one bisection: coarsen, grow, uncoarsen with FM.

    Coarsening merges vertices up to 1/``coarsest`` of the total load and stops near
    ``coarsest`` vertices or below ``min_shrink``; the coarsest graph is bisected by
    :func:`bisect` (greedy growing, restarts); every finer level is refined by
    :func:`fm_refine`, after :func:`rebalance` (``rebalance_moves`` > 0) restores the
    capacities the coarse sides missed (aimed at :func:`balance_caps` with
    ``rebalance_tolerance``). ``bias`` (per vertex) is summed onto coarse vertices. At most
    ``max_levels`` levels; ``expansion`` rates edges by w^2 / (n_u n_v) while matching.

    Returns:
        int64 side per vertex. Complexity O(repeats * m) plus the FM passes.
    """
    total = loads.sum(axis=0)
    limit = np.maximum(total // coarsest, 1).astype(np.int64)
    levels = coarsen(Level(indptr, indices, weights, loads), limit, rng, repeats, min_shrink, max_levels,
                     min_vertices=coarsest, expansion=expansion, two_hop=two_hop)
    biases = [bias]
    for lv in levels[:-1]:
        biases.append(np.bincount(lv.coarse_of, weights=biases[-1], minlength=int(lv.coarse_of.max()) + 1))
    top = levels[-1]
    side = bisect(top.indptr, top.indices, top.weights, top.loads, caps2, rng, restarts, bias=biases[-1],
                  rebalance_moves=rebalance_moves, rebalance_tolerance=rebalance_tolerance)
    lower2 = lower_bounds(total, caps2)
    aim = balance_caps(total, caps2, rebalance_tolerance)
    for li in range(len(levels) - 2, -1, -1):
        lv = levels[li]
        side = side[lv.coarse_of]
        if rebalance_moves:
            rebalance_sides(lv.indptr, lv.indices, lv.weights, lv.loads, side, caps2, rebalance_moves, aim)
        fm_refine(lv.indptr, lv.indices, lv.weights, lv.loads, side, caps2, lower2, max(50, lv.n // 20), biases[li])
    return side
