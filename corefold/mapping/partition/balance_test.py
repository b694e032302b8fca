import numpy as np

from corefold.mapping.objectives import loads_of, part_fill
from corefold.mapping.partition.balance import rebalance
from corefold.mapping.partition.initial import bisect
from corefold.mapping.testing import grid_graph


def test_rebalance_fits_both_capacities_where_growing_alone_does_not():
    topo = grid_graph(20, 20)
    loads = loads_of(topo)
    # the left half of the grid is synapse-heavy: a side grown to half the neurons from
    # there holds far more than half the synapses
    loads[:, 1] = np.where(np.arange(400) % 20 < 10, 9, 1)
    caps2 = np.array([[210, 1100], [210, 1100]])  # total 400 neurons, 2000 synapses
    side = (np.arange(400) % 20 >= 10).astype(np.int64)  # left half -> side 0: 1800 synapses
    assert (part_fill(loads, side, 2) > caps2).any()
    moves = rebalance(topo.indptr, topo.indices, topo.weights, loads, side, caps2, 10_000)
    assert moves > 0 and (part_fill(loads, side, 2) <= caps2).all()
    again = side.copy()
    assert rebalance(topo.indptr, topo.indices, topo.weights, loads, again, caps2, 10_000) == 0
    assert (again == side).all()
    # a bisection with rebalancing fits; its sides partition the vertices
    out = bisect(topo.indptr, topo.indices, topo.weights, loads, caps2, np.random.default_rng(0), 2,
                 rebalance_moves=10_000)
    assert set(np.unique(out)) <= {0, 1} and (part_fill(loads, out, 2) <= caps2).all()
