import numpy as np

from corefold.mapping.objectives import edge_costs, loads_of, part_fill
from corefold.mapping.partition.balance import balance_caps, rebalance_sides
from corefold.mapping.partition.bisection import CUT_DIST
from corefold.mapping.partition.multiconstraint import rebalance_heap
from corefold.mapping.partition.multilevel import multilevel_bisect
from corefold.mapping.testing import grid_graph, random_graph


def _two_load_graph(seed):
    """A random graph whose vertices are synapse-heavy (20) or synapse-free (0), so both
    capacities bind and a side can be full in one dimension and empty-ish in the other."""
    topo = random_graph(600, 6, seed=seed)
    loads = loads_of(topo)
    loads[:, 1] = np.where(np.random.default_rng(seed).random(600) < 0.4, 20, 0)
    return topo, loads


def test_balance_caps_aims_at_shares_only_when_two_capacities_bind():
    total = np.array([900, 4000])
    caps2 = np.array([[500, 3000], [500, 3000]])
    assert (balance_caps(total, caps2, None) == caps2).all()
    assert balance_caps(total, caps2, 0.0).tolist() == [[450, 2000], [450, 2000]]
    assert balance_caps(total, caps2, 0.1).tolist() == [[495, 2200], [495, 2200]]
    # unequal halves get their own shares, never above the capacity
    caps3 = np.array([[300, 2000], [600, 4000]])
    assert balance_caps(total, caps3, 0.0).tolist() == [[300, 1334], [600, 2667]]
    # one binding capacity (synapses far below theirs): the capacities are kept
    assert (balance_caps(np.array([900, 10]), caps2, 0.0) == caps2).all()


def test_rebalance_heap_lowers_overflow_and_reports_it():
    for seed in range(3):
        topo, loads = _two_load_graph(seed)
        total = loads.sum(axis=0)
        caps2 = np.array([np.ceil(total * 0.52), np.ceil(total * 0.52)], np.int64)
        side = np.zeros(600, np.int64)
        side[np.random.default_rng(seed).permutation(600)[:150]] = 1  # side 0 far over in both
        scale = 1.0 / caps2.sum(axis=0)
        over0 = (np.maximum(part_fill(loads, side, 2) - caps2, 0) * scale).sum()
        moves, left = rebalance_heap(topo.indptr, topo.indices, topo.weights, loads, side, caps2, 10_000)
        over1 = (np.maximum(part_fill(loads, side, 2) - caps2, 0) * scale).sum()
        assert moves > 0 and over1 < over0 and np.isclose(left, over1)
        assert set(np.unique(side)) <= {0, 1}
        # the full rebalance finishes; both sides then fit
        rebalance_sides(topo.indptr, topo.indices, topo.weights, loads, side, caps2, 10_000)
        assert (part_fill(loads, side, 2) <= caps2).all()


def test_rebalance_heap_takes_the_cut_cheapest_moves():
    topo = grid_graph(20, 10)
    loads = loads_of(topo)
    loads[:, 1] = 5
    side = (np.arange(200) % 20 >= 15).astype(np.int64)  # 150 | 50: a straight cut of 10
    caps2 = np.array([[100, 500], [100, 500]])
    moves, left = rebalance_heap(topo.indptr, topo.indices, topo.weights, loads, side, caps2, 10_000)
    assert left == 0.0 and moves == 50
    assert part_fill(loads, side, 2).tolist() == [[100, 500], [100, 500]]
    # boundary vertices first: the cut stays a (possibly stepped) line, never scattered
    assert edge_costs(topo.indptr, topo.indices, topo.weights, side, CUT_DIST)[0] <= 14


def test_multilevel_bisection_with_both_capacities_binding_fits():
    for seed in range(3):
        topo, loads = _two_load_graph(seed)
        total = loads.sum(axis=0)
        caps2 = np.array([np.ceil(total * 0.51), np.ceil(total * 0.51)], np.int64)
        side = multilevel_bisect(topo.indptr, topo.indices, topo.weights, loads, caps2, np.zeros(600),
                                 np.random.default_rng(seed), restarts=2, repeats=1, rebalance_moves=2000,
                                 rebalance_tolerance=0.0)
        assert set(np.unique(side)) <= {0, 1}
        assert (part_fill(loads, side, 2) <= caps2).all()
