import numpy as np

from corefold.mapping.objectives import loads_of, part_fill
from corefold.mapping.partition.initial import (
    bisect,
    fm_refine,
    grow_bisection,
    halves,
    lower_bounds,
    multilevel_bisect,
    recursive_bisection,
    side_subgraph,
)
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


def test_recursive_bisection_covers_every_vertex_once():
    topo = grid_graph(30, 30)
    loads = loads_of(topo)
    slot_caps = np.tile([[100, 10**9]], (10, 1))
    part = recursive_bisection(topo.indptr, topo.indices, topo.weights, loads, slot_caps, halves,
                               np.random.default_rng(0))
    assert part.shape == (900,) and part.min() >= 0 and part.max() <= 9
    assert np.bincount(part, minlength=10).sum() == 900


def test_recursive_bisection_is_the_same_on_any_number_of_threads():
    topo = grid_graph(40, 40)
    loads = loads_of(topo)
    slot_caps = np.tile([[110, 10**9]], (16, 1))
    xy = np.array([(x, y) for y in range(4) for x in range(4)])
    parts = [recursive_bisection(topo.indptr, topo.indices, topo.weights, loads, slot_caps, halves,
                                 np.random.default_rng(5), slot_xy=xy, multilevel=True, bias_scale=1.0,
                                 threads=t, two_hop=True) for t in (1, 2, 3)]
    assert (np.bincount(parts[0], minlength=16) <= 110).all()
    np.testing.assert_array_equal(parts[0], parts[1])
    np.testing.assert_array_equal(parts[0], parts[2])


def _cut(topo, side):
    return sum(topo.weights[e] for v in range(topo.num_vertices) for e in range(topo.indptr[v], topo.indptr[v + 1])
               if side[v] != side[topo.indices[e]]) / 2


def test_fm_objective_matches_recomputation_and_respects_bounds():
    topo = random_graph(300, 6, seed=4)
    loads = loads_of(topo)
    rng = np.random.default_rng(0)
    side = rng.integers(0, 2, 300).astype(np.int64)
    bias = rng.normal(0, 1, 300)
    caps2 = np.array([[170, 10**9], [170, 10**9]])
    lower2 = lower_bounds(loads.sum(axis=0), caps2)
    before = _cut(topo, side) + bias[side == 0].sum()
    after = fm_refine(topo.indptr, topo.indices, topo.weights, loads, side, caps2, lower2, 100, bias)
    assert np.isclose(after, _cut(topo, side) + bias[side == 0].sum())
    assert after < before
    fill = part_fill(loads, side, 2)
    assert (fill <= caps2).all() and (fill[:, 0] >= lower2[:, 0]).all()


def test_multilevel_bisection_finds_a_straight_cut_in_a_grid():
    topo = grid_graph(40, 40)
    loads = loads_of(topo)
    caps2 = np.array([[824, 10**9], [824, 10**9]])  # 3% slack, as the mapper leaves
    side = multilevel_bisect(topo.indptr, topo.indices, topo.weights, loads, caps2, np.zeros(1600),
                             np.random.default_rng(0))
    assert _cut(topo, side) <= 48  # a straight line costs 40
    assert 776 <= int((side == 0).sum()) <= 824


def test_rebalance_fits_both_capacities_where_growing_alone_does_not():
    from corefold.mapping.partition.initial import rebalance

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


def test_side_subgraph_equals_the_induced_submatrices():
    import scipy.sparse as sp

    topo = random_graph(400, 7, seed=11)
    side = np.random.default_rng(3).integers(0, 2, 400).astype(np.int64)
    a = sp.csr_matrix((topo.weights, topo.indices, topo.indptr), shape=(400, 400))
    for s in (0, 1):
        ptr, idx, w = side_subgraph(topo.indptr, topo.indices, np.asarray(topo.weights, np.float64), side, s)
        keep = np.flatnonzero(side == s)
        want = a[keep][:, keep]
        have = sp.csr_matrix((w, idx, ptr), shape=(keep.size, keep.size))
        np.testing.assert_allclose(have.toarray(), want.toarray())
