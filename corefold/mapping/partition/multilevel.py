r"""One bisection done the multilevel way: the seed's three phases on one part of the graph.

Coarsen (:mod:`.coarsen`, heavy-edge matching), cut the coarsest graph by greedy growing
(:func:`~.initial.bisect`), then project the sides level by level, rebalancing
(:mod:`.balance`) and refining by Fiduccia-Mattheyses (:mod:`.fm`) on each, as METIS's
``pmetis.c`` bisects (``MlevelRecursiveBisection``).
"""

from __future__ import annotations

import numpy as np

from corefold.mapping.nets import contract as contract_nets
from corefold.mapping.nets import incidence, net_matching
from corefold.mapping.partition.balance import balance_caps, lower_bounds, rebalance_sides
from corefold.mapping.partition.coarsen import Level, coarsen, contract
from corefold.mapping.partition.fm import fm_refine
from corefold.mapping.partition.fm_nets import fm_refine_nets
from corefold.mapping.partition.initial import bisect


def multilevel_bisect(indptr, indices, weights, loads, caps2: np.ndarray, bias: np.ndarray,
                      rng: np.random.Generator, restarts: int = 4, repeats: int = 4,
                      min_shrink: float = 0.2, coarsest: int = 128, rebalance_moves: int = 0,
                      two_hop: bool = False, rebalance_tolerance: float | None = None, max_levels: int = 40,
                      expansion: bool = False, nets: tuple | None = None) -> np.ndarray:
    """The seed's phases applied to one bisection: coarsen, grow, uncoarsen with FM.

    Coarsening merges vertices up to 1/``coarsest`` of the total load and stops near
    ``coarsest`` vertices or below ``min_shrink``; the coarsest graph is bisected by
    :func:`bisect` (greedy growing, restarts); every finer level is refined by
    :func:`fm_refine`, after :func:`rebalance` (``rebalance_moves`` > 0) restores the
    capacities the coarse sides missed (aimed at :func:`balance_caps` with
    ``rebalance_tolerance``). ``bias`` (per vertex) is summed onto coarse vertices. At most
    ``max_levels`` levels; ``expansion`` rates edges by w^2 / (n_u n_v) while matching.
    With ``nets`` (pin sets ``(ptr, pins, weight)``) the levels come from
    :func:`_coarsen_on_nets` and every level refines the cut nets
    (:func:`~.fm_nets.fm_refine_nets`) instead of the cut edges.

    Returns:
        int64 side per vertex. Complexity O(repeats * m) plus the FM passes.
    """
    total = loads.sum(axis=0)
    limit = np.maximum(total // coarsest, 1).astype(np.int64)
    if nets is not None:
        levels, level_nets = _coarsen_on_nets(Level(indptr, indices, weights, loads), nets, limit, rng, min_shrink,
                                              max_levels, coarsest)
    else:
        levels = coarsen(Level(indptr, indices, weights, loads), limit, rng, repeats, min_shrink, max_levels,
                         min_vertices=coarsest, expansion=expansion, two_hop=two_hop)
        level_nets = [nets]
        if nets is not None:
            for li in range(len(levels) - 1):
                level_nets.append(contract_nets(*level_nets[-1], levels[li].coarse_of, levels[li + 1].n))
    biases = [bias]
    for lv in levels[:-1]:
        biases.append(np.bincount(lv.coarse_of, weights=biases[-1], minlength=int(lv.coarse_of.max()) + 1))
    top = levels[-1]
    side = bisect(top.indptr, top.indices, top.weights, top.loads, caps2, rng, restarts, bias=biases[-1],
                  rebalance_moves=rebalance_moves, rebalance_tolerance=rebalance_tolerance, nets=level_nets[-1])
    lower2 = lower_bounds(total, caps2)
    aim = balance_caps(total, caps2, rebalance_tolerance)
    for li in range(len(levels) - 2, -1, -1):
        lv = levels[li]
        side = side[lv.coarse_of]
        if rebalance_moves:
            rebalance_sides(lv.indptr, lv.indices, lv.weights, lv.loads, side, caps2, rebalance_moves, aim)
        stall = max(50, lv.n // 20)
        if nets is None:
            fm_refine(lv.indptr, lv.indices, lv.weights, lv.loads, side, caps2, lower2, stall, biases[li])
        else:
            level_nets[li + 1] = None  # the coarser nets are done with
            vptr, vnets = incidence(level_nets[li][0], level_nets[li][1], lv.n)
            fm_refine_nets(*level_nets[li], vptr, vnets, lv.loads, side, caps2, lower2, stall, biases[li])
    return side


#: With nets, vertices are matched by the nets' heavy-edge rating
#: (:func:`~corefold.mapping.nets.net_matching`), which sees siblings that share input
#: nets; a graph's edges do not (lenet, multicast: connectivity of the recursive bisection
#: 10,890 -> 7,809 on seed 0). A visit rates at most RATING_NETS nets and RATING_PINS pins
#: of each (32 and 64: 6,979 against 7,776 mean over seeds 0-2, in twice the time).
RATING_NETS = 16
RATING_PINS = 32


def _coarsen_on_nets(finest: Level, nets: tuple, limit: np.ndarray, rng: np.random.Generator, min_shrink: float,
                     max_levels: int, coarsest: int) -> tuple[list[Level], list[tuple]]:
    """Levels matched by :func:`~corefold.mapping.nets.net_matching`, with their nets.

    The graph is contracted along (its edges sum onto the coarse pairs, pairs need not be
    adjacent), the nets by :func:`~corefold.mapping.nets.contract`. Stops as
    :func:`~.coarsen.coarsen` does. O(levels * (m + pins + n * RATING_NETS * RATING_PINS)).
    """
    levels = [finest]
    level_nets = [nets]
    while len(levels) <= max_levels:
        cur = levels[-1]
        n = cur.n
        if n <= coarsest:
            break
        vptr, vnets = incidence(level_nets[-1][0], level_nets[-1][1], n)
        mate, pairs = net_matching(*level_nets[-1], vptr, vnets, cur.loads, limit, rng.permutation(n),
                                   int(rng.integers(2**31)), RATING_NETS, RATING_PINS)
        if pairs < min_shrink * n:
            break
        levels.append(contract(cur, mate))
        level_nets.append(contract_nets(*level_nets[-1], cur.coarse_of, levels[-1].n))
    return levels, level_nets
