import numpy as np

from corefold.mapping.objectives import loads_of, part_fill
from corefold.mapping.partition.initial import bisect, grow_bisection
from corefold.mapping.testing import grid_graph, random_graph


def test_growing_stays_within_target_and_reports_its_cut():
    topo = grid_graph(20, 20)
    loads = loads_of(topo)
    side, cut = grow_bisection(topo.indptr, topo.indices, topo.weights, loads, np.array([200, 10**9]),
                               np.random.default_rng(0).permutation(400), np.zeros(400))
    assert (side == 0).sum() <= 200 and (side == 0).sum() >= 190
    crossing = sum(topo.weights[e] for v in range(400) for e in range(topo.indptr[v], topo.indptr[v + 1])
                   if side[v] != side[topo.indices[e]]) / 2
    assert cut == crossing
    assert cut <= 40  # a grid's greedy cut is near the 20 of a straight line


def test_bisect_fits_both_sides():
    topo = random_graph(500, 6, seed=1)
    loads = loads_of(topo)
    caps2 = np.array([[260, 10**9], [260, 10**9]])
    side = bisect(topo.indptr, topo.indices, topo.weights, loads, caps2, np.random.default_rng(2), restarts=4)
    fill = part_fill(loads, side, 2)
    assert (fill <= caps2).all()
