import numpy as np
import scipy.sparse as sp

from corefold.mapping.objectives import hop_distance_matrix
from corefold.mapping.place.force import _traffic, anneal_placement, improve_placement, swap_delta


def _case(seed, k=12, w=5, h=4):
    rng = np.random.default_rng(seed)
    dense = (rng.random((k, k)) < 0.3) * rng.integers(1, 9, (k, k)).astype(float)
    dense = dense + dense.T
    np.fill_diagonal(dense, 0)
    cores = np.array([(x, y) for y in range(h) for x in range(w)])
    pos = rng.permutation(w * h)[:k].astype(np.int64)
    return sp.csr_matrix(dense), cores, pos


def test_swap_delta_is_exact():
    q, cores, pos = _case(0)
    dist = hop_distance_matrix(cores, 5, 4, 1.0)
    occupant = np.full(20, -1, np.int64)
    occupant[pos] = np.arange(12)
    for a in range(12):
        for c in range(20):
            if c == pos[a]:
                continue
            d = swap_delta(q.indptr.astype(np.int64), q.indices.astype(np.int64), q.data, pos, occupant, dist, a, c)
            new = pos.copy()
            b = occupant[c]
            new[a] = c
            if b >= 0:
                new[b] = pos[a]
            assert np.isclose(d, _traffic(q, new, dist) - _traffic(q, pos, dist))


def test_improve_placement_lowers_traffic_and_keeps_one_group_per_core():
    q, cores, pos = _case(1)
    dist = hop_distance_matrix(cores, 5, 4, 1.0)
    before = _traffic(q, pos, dist)
    gain = improve_placement(q, pos, cores, dist, 5, 4, np.random.default_rng(0), debug=True)
    assert gain > 0 and np.isclose(before - _traffic(q, pos, dist), gain)
    assert np.unique(pos).size == 12


def test_annealing_chains_lower_traffic_and_ignore_the_thread_count():
    q, cores, pos = _case(5, k=16, w=5, h=4)
    dist = hop_distance_matrix(cores, 5, 4, 1.0)
    grid = np.arange(20).reshape(4, 5)
    before = _traffic(q, pos, dist)
    ends = []
    for threads in (1, 2):
        p = pos.copy()
        gain = anneal_placement(q, p, dist, cores, grid, 20_000, seed=9, chains=3, threads=threads)
        assert np.unique(p).size == 16
        assert np.isclose(before - _traffic(q, p, dist), gain) and gain > 0
        ends.append(p)
    np.testing.assert_array_equal(ends[0], ends[1])
