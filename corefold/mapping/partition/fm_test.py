import numpy as np

from corefold.mapping.objectives import loads_of, part_fill
from corefold.mapping.partition.balance import lower_bounds
from corefold.mapping.partition.fm import fm_refine
from corefold.mapping.testing import crossing_weight, random_graph


def test_fm_objective_matches_recomputation_and_respects_bounds():
    topo = random_graph(300, 6, seed=4)
    loads = loads_of(topo)
    rng = np.random.default_rng(0)
    side = rng.integers(0, 2, 300).astype(np.int64)
    bias = rng.normal(0, 1, 300)
    caps2 = np.array([[170, 10**9], [170, 10**9]])
    lower2 = lower_bounds(loads.sum(axis=0), caps2)
    before = crossing_weight(topo, side) + bias[side == 0].sum()
    after = fm_refine(topo.indptr, topo.indices, topo.weights, loads, side, caps2, lower2, 100, bias)
    assert np.isclose(after, crossing_weight(topo, side) + bias[side == 0].sum())
    assert after < before
    fill = part_fill(loads, side, 2)
    assert (fill <= caps2).all() and (fill[:, 0] >= lower2[:, 0]).all()
