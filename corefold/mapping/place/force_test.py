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


def _line_case():
    """Five cores in a row (x = 0..4), group g on core g; Q[0,3] = 10, Q[0,4] = 1, Q[1,2] = 1.

    Net forces: group 0 is pulled right by 10*3 + 1*4 = 34, group 3 left by 30, group 4 left
    by 4, groups 1 and 2 by 1. Hop-weighted traffic T = 30 + 4 + 1 = 35.
    """
    dense = np.zeros((5, 5))
    for a, b, w in ((0, 3, 10.0), (0, 4, 1.0), (1, 2, 1.0)):
        dense[a, b] = dense[b, a] = w
    cores = np.array([(x, 0) for x in range(5)])
    return sp.csr_matrix(dense), cores, hop_distance_matrix(cores, 5, 1, 1.0)


def test_force_directed_step_swaps_the_most_pulled_group_towards_its_pull():
    """SPEC M4 §9: visit the 5% of groups with the largest net force, largest first; swap
    each with the group, in the direction it is pulled, whose swap costs least.

    One iteration visiting one group (fraction 0.2 of 5): group 0 (force +34) looks right;
    by hand, moving it to core 1, 2, 3, 4 (swapping with the group there) changes T by
    -10, -22, -3, -20, so it swaps with group 2: pos = [2, 1, 0, 3, 4], gain 22.

    Mutations (each made in ``place/force.py`` and run; each fails this test):
    * the swap step removed (``_apply_swap`` not called in ``_force_iterations``): pos
      unchanged, gain 0;
    * the swap step reversed (``sx``/``sy`` negated: looks against the pull): group 0
      finds no core to its left, pos unchanged;
    * the smallest force visited first (``np.argsort(mag)``): group 1 or 2 moves instead;
    * the first improving core taken instead of the cheapest: core 1, gain 10.
    """
    q, cores, dist = _line_case()
    pos = np.arange(5, dtype=np.int64)
    gain = improve_placement(q, pos, cores, dist, 5, 1, np.random.default_rng(0), fraction=0.2,
                             iterations=1, swap_passes=0, radius=4, debug=True)
    assert pos.tolist() == [2, 1, 0, 3, 4]
    assert gain == 22.0
    assert _traffic(q, pos, dist) == 13.0


def _pull(q, pos, cores):
    """Net force per group, sum_b Q_ab (p_b - p_a), by brute force."""
    dense = q.toarray()
    xy = cores[pos].astype(float)
    return (dense[:, :, None] * (xy[None, :, :] - xy[:, None, :])).sum(axis=1)


def test_force_directed_iterations_run_until_no_directed_swap_helps():
    """SPEC M4 §9's stop rule: iterations go on until no swap helps (or the cap). After
    them, no group has a core in the quadrant of its pull, within the radius, whose swap
    lowers T (checked by brute force with :func:`swap_delta`), and a further call gains 0.

    Mutations (in ``place/force.py``; each fails this test): one iteration only
    (``range(iterations)`` -> ``range(1)``); the swap step removed.
    """
    for seed in range(3):
        q, cores, pos = _case(seed, k=12, w=4, h=3)
        dist = hop_distance_matrix(cores, 4, 3, 1.0)
        improve_placement(q, pos, cores, dist, 4, 3, np.random.default_rng(0), fraction=1.0, iterations=200,
                          swap_passes=0, radius=3)
        occupant = np.full(cores.shape[0], -1, np.int64)
        occupant[pos] = np.arange(pos.shape[0])
        qptr, qidx, qw = q.indptr.astype(np.int64), q.indices.astype(np.int64), q.data.astype(np.float64)
        force = _pull(q, pos, cores)
        for a in range(pos.shape[0]):
            sx, sy = np.sign(force[a])
            for c in range(cores.shape[0]):
                dx, dy = cores[c] - cores[pos[a]]
                toward = (dx == 0 or np.sign(dx) == sx) and (dy == 0 or np.sign(dy) == sy)
                if c != pos[a] and toward and abs(dx) + abs(dy) <= 3 and (sx, sy) != (0, 0):
                    assert swap_delta(qptr, qidx, qw, pos, occupant, dist, a, c) > -1e-9
        settled = pos.copy()
        again = improve_placement(q, pos, cores, dist, 4, 3, np.random.default_rng(1), fraction=1.0, iterations=200,
                                  swap_passes=0, radius=3)
        assert again == 0.0 and (pos == settled).all()
