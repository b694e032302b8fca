import numpy as np
import scipy.sparse as sp

from corefold.mapping.objectives import loads_of
from corefold.mapping.partition.coarsen import coarsen, contract, finest_level, heavy_edge_matching
from corefold.mapping.testing import conv_like_graph, random_graph


def _matrix(level):
    return sp.csr_matrix((level.weights, level.indices, level.indptr), shape=(level.n, level.n))


def test_matching_respects_limit_and_is_symmetric():
    topo = random_graph(300, 6, seed=0)
    loads = loads_of(topo)
    loads[:, 0] = np.random.default_rng(0).integers(1, 5, 300)
    lv = finest_level(topo, loads)
    limit = np.array([5, 10**9])
    mate, w = heavy_edge_matching(lv.indptr, lv.indices, lv.weights, lv.loads, limit,
                                  np.random.default_rng(1).permutation(300))
    assert (mate[mate] == np.arange(300)).all()
    pairs = np.flatnonzero(mate != np.arange(300))
    assert (loads[pairs, 0] + loads[mate[pairs], 0] <= 5).all()
    a = _matrix(lv).tolil()
    assert np.isclose(w, sum(a[v, mate[v]] for v in pairs if mate[v] > v))


def test_contraction_equals_projected_matrix():
    topo = random_graph(200, 8, seed=2)
    lv = finest_level(topo, loads_of(topo))
    mate, _ = heavy_edge_matching(lv.indptr, lv.indices, lv.weights, lv.loads, np.array([2, 10**9]),
                                  np.random.default_rng(3).permutation(200))
    coarse = contract(lv, mate)
    p = sp.csr_matrix((np.ones(200), (np.arange(200), lv.coarse_of)), shape=(200, coarse.n))
    want = (p.T @ _matrix(lv) @ p).tolil()
    want.setdiag(0)
    got = _matrix(coarse)
    np.testing.assert_allclose(got.toarray(), want.toarray())
    assert (coarse.loads.sum(axis=0) == lv.loads.sum(axis=0)).all()


def test_hierarchy_stops_and_keeps_limit():
    topo = conv_like_graph(3000, 3)
    lv = finest_level(topo, loads_of(topo))
    limit = np.array([40, 10**9])
    levels = coarsen(lv, limit, np.random.default_rng(0), repeats=4, min_shrink=0.2)
    assert len(levels) > 3
    for a, b in zip(levels, levels[1:], strict=False):
        assert b.n <= 0.8 * a.n
        assert a.coarse_of.shape[0] == a.n and a.coarse_of.max() == b.n - 1
    assert levels[-1].loads[:, 0].max() <= 40
    assert levels[-1].loads[:, 0].sum() == 3000
