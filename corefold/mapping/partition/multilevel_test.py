import numpy as np

from corefold.mapping.objectives import loads_of
from corefold.mapping.partition.multilevel import multilevel_bisect
from corefold.mapping.testing import crossing_weight, grid_graph


def test_multilevel_bisection_finds_a_straight_cut_in_a_grid():
    topo = grid_graph(40, 40)
    loads = loads_of(topo)
    caps2 = np.array([[824, 10**9], [824, 10**9]])  # 3% slack, as the mapper leaves
    side = multilevel_bisect(topo.indptr, topo.indices, topo.weights, loads, caps2, np.zeros(1600),
                             np.random.default_rng(0))
    assert crossing_weight(topo, side) <= 48  # a straight line costs 40
    assert 776 <= int((side == 0).sum()) <= 824
