import numpy as np
import scipy.sparse as sp

from corefold.mapping.objectives import edge_costs, loads_of, part_fill
from corefold.mapping.partition.exchange import eject_pass, refine_with_exchanges
from corefold.mapping.testing import from_matrix, random_graph


def _line_dist(k):
    x = np.arange(k)
    return np.abs(x[:, None] - x[None, :]).astype(np.float64)


def test_eject_pair_unblocks_a_move_into_a_full_core():
    # a sits on core 0 but all 3 of its edges go to core 1, which is full (5 neurons);
    # b (one edge into core 1) can make room for it
    #   vertices: 0 = a, 1 = b, 2..4 = a's neighbours on core 1, 5 = b's neighbour on core 1
    rows = [0, 0, 0, 1]
    cols = [2, 3, 4, 5]
    a = sp.coo_matrix((np.ones(4), (rows, cols)), shape=(6, 6))
    topo = from_matrix(a + a.T, synapses=[10, 0, 10, 10, 10, 0])
    loads = loads_of(topo)
    part = np.array([0, 1, 1, 1, 1, 1], np.int64)
    caps = np.array([[6, 40], [5, 40]], np.int64)
    fill = part_fill(loads, part, 2)
    dist = _line_dist(2)
    assert edge_costs(topo.indptr, topo.indices, topo.weights, part, dist)[1] == 3.0
    gain, changes = eject_pass(topo.indptr, topo.indices, topo.weights, loads, part, fill, caps, dist)
    # a moves in (-3), the cheapest member to send back is b (+1): 3 -> 1
    assert changes == 1 and gain == 2.0
    assert part.tolist() == [1, 0, 1, 1, 1, 1]
    assert edge_costs(topo.indptr, topo.indices, topo.weights, part, dist)[1] == 1.0
    assert (fill == part_fill(loads, part, 2)).all() and (fill <= caps).all()


def test_exchanges_gain_exactly_and_keep_both_capacities():
    for seed in range(3):
        rng = np.random.default_rng(seed)
        topo = random_graph(400, 6, seed=seed)
        loads = loads_of(topo)
        loads[:, 1] = np.where(rng.random(400) < 0.3, 12, rng.integers(0, 3, 400))
        k = 8
        part = np.repeat(np.arange(k), 50)[rng.permutation(400)].astype(np.int64)
        fill = part_fill(loads, part, k)
        caps = fill.max(axis=0)[None, :].repeat(k, axis=0)  # the fullest core is exactly full
        caps[:, 0] = 50  # every core exactly full in neurons: only exchanges can move
        dist = _line_dist(k)
        before = edge_costs(topo.indptr, topo.indices, topo.weights, part, dist)[1]
        gain, changes = eject_pass(topo.indptr, topo.indices, topo.weights, loads, part, fill, caps, dist)
        after = edge_costs(topo.indptr, topo.indices, topo.weights, part, dist)[1]
        assert changes > 0 and gain > 0 and np.isclose(before - after, gain)
        assert (fill == part_fill(loads, part, k)).all() and (fill <= caps).all()
        total = refine_with_exchanges(topo.indptr, topo.indices, topo.weights, loads, part, fill, caps, dist,
                                      np.random.default_rng(0), rounds=3)
        final = edge_costs(topo.indptr, topo.indices, topo.weights, part, dist)[1]
        assert total >= 0 and np.isclose(after - final, total)
        assert (fill == part_fill(loads, part, k)).all() and (fill <= caps).all()
        assert np.bincount(part, minlength=k).tolist() == [50] * k
