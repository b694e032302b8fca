import numpy as np
import scipy.sparse as sp

from corefold.mapping.objectives import loads_of
from corefold.mapping.partition.coarsen import (
    coarsen,
    contract,
    finest_level,
    heavy_edge_matching,
    two_hop_matching,
)
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


def _layered(width, layers, fan):
    """Neurons in layers; each links to ``fan`` neighbours-by-position of the next layer (a
    CNN's connectivity: no edges inside a layer)."""
    rows, cols = [], []
    for layer in range(layers - 1):
        for d in range(fan):
            src = np.arange(width) + layer * width
            dst = (np.arange(width) + d) % width + (layer + 1) * width
            rows.append(src)
            cols.append(dst)
    r, c = np.concatenate(rows), np.concatenate(cols)
    n = width * layers
    a = sp.coo_matrix((np.ones(r.size), (r, c)), shape=(n, n))
    from corefold.mapping.testing import from_matrix

    return from_matrix(a + a.T)


def test_two_hop_pairs_only_unmatched_vertices_with_a_common_neighbour():
    topo = _layered(50, 4, 3)
    lv = finest_level(topo, loads_of(topo))
    n = lv.n
    limit = np.array([2, 10**9])
    order = np.random.default_rng(0).permutation(n)
    mate, _ = heavy_edge_matching(lv.indptr, lv.indices, lv.weights, lv.loads, limit, order)
    before = mate.copy()
    pairs = two_hop_matching(lv.indptr, lv.indices, lv.loads, limit, mate, order)
    assert pairs > 0
    assert (mate[mate] == np.arange(n)).all()
    new = np.flatnonzero((mate != before) & (np.arange(n) < mate))
    assert new.size == pairs
    assert (before[new] == new).all() and (before[mate[new]] == mate[new]).all()  # both were unmatched
    a = _matrix(lv)
    for v in new:
        u = mate[v]
        assert a[v, u] == 0  # not adjacent (else the heavy-edge pass would have matched them) ...
        assert a[v].multiply(a[u]).nnz > 0  # ... but they share a neighbour
    # the contraction of a matching with non-adjacent pairs is still P^T A P
    coarse = contract(lv, mate)
    p = sp.csr_matrix((np.ones(n), (np.arange(n), lv.coarse_of)), shape=(n, coarse.n))
    want = (p.T @ a @ p).tolil()
    want.setdiag(0)
    np.testing.assert_allclose(_matrix(coarse).toarray(), want.toarray())


def test_two_hop_makes_layered_hierarchies_shallower():
    topo = _layered(400, 6, 3)
    lv = finest_level(topo, loads_of(topo))
    limit = np.array([64, 10**9])
    plain = coarsen(lv, limit, np.random.default_rng(0), repeats=1, min_shrink=0.2, min_vertices=40)
    lv = finest_level(topo, loads_of(topo))
    hop = coarsen(lv, limit, np.random.default_rng(0), repeats=1, min_shrink=0.2, min_vertices=40, two_hop=True)
    assert hop[1].n < plain[1].n
    assert hop[1].n <= 0.55 * hop[0].n
    for levels in (plain, hop):
        assert levels[-1].loads[:, 0].max() <= 64
        assert levels[-1].loads[:, 0].sum() == 2400
