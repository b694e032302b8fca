import numpy as np

from corefold.mapping.objectives import loads_of
from corefold.mapping.partition.recursive import halves, recursive_bisection, side_subgraph
from corefold.mapping.testing import grid_graph, random_graph


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
