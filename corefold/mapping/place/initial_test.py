import numpy as np
import scipy.sparse as sp

from corefold.errors import CapacityError
from corefold.mapping.place.initial import choose_region, place_groups, region_split
from corefold.mapping.testing import grid_graph


def _usable(w, h, bad=()):
    return np.array([(x, y) for y in range(h) for x in range(w) if (x, y) not in bad])


def test_region_has_k_usable_cores_and_avoids_unusable():
    bad = {(1, 1), (2, 2)}
    cores = choose_region(_usable(6, 6, bad), 10, 6, 6, 6, 6, 1.0)
    assert cores.shape == (10, 2) and len({tuple(c) for c in cores}) == 10
    assert not ({tuple(c) for c in cores} & bad)
    span = cores.max(axis=0) - cores.min(axis=0) + 1
    assert span.sum() <= 8  # compact: a 3x4 or 4x3 box at most


def test_region_stays_on_one_chip_when_it_can():
    cores = choose_region(_usable(8, 4), 12, 8, 4, 4, 4, 8.0)  # two 4x4 chips
    assert len(set((cores[:, 0] // 4).tolist())) == 1


def test_region_raises_when_board_too_small():
    try:
        choose_region(_usable(2, 2), 5, 2, 2, 2, 2, 1.0)
    except CapacityError as exc:
        assert "5 cores" in str(exc)
    else:
        raise AssertionError("expected CapacityError")


def test_region_split_halves_are_balanced_and_disjoint():
    xy = _usable(5, 3)
    s0, s1 = region_split(xy)(np.arange(15))
    assert set(s0) | set(s1) == set(range(15)) and not set(s0) & set(s1)
    assert xy[s0, 0].max() < xy[s1, 0].min()  # cut across the longer (x) side


def test_place_groups_one_group_per_core_and_keeps_neighbours_close():
    topo = grid_graph(4, 4)  # the group graph is itself a 4x4 grid
    q = sp.csr_matrix((topo.weights, topo.indices, topo.indptr), shape=(16, 16))
    slots = _usable(4, 4)
    pos = place_groups(q, slots, np.random.default_rng(0))
    assert np.unique(pos).size == 16
    coo = q.tocoo()
    hops = np.abs(slots[pos[coo.row]] - slots[pos[coo.col]]).sum(axis=1)
    assert hops.mean() <= 2.0
