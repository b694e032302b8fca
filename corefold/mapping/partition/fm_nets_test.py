import numpy as np

from corefold.mapping.nets import Hypergraph, incidence
from corefold.mapping.partition.fm_nets import cut_nets, fm_refine_nets, net_counts, net_gains


def _random_hypergraph(n, nets, seed, max_size=8):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, max_size + 1, nets)
    pins = np.concatenate([rng.choice(n, s, replace=False) for s in sizes])
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    return Hypergraph(ptr.astype(np.int64), pins.astype(np.int64), rng.integers(1, 4, nets).astype(np.float64))


def _brute_cut(h, side):
    return sum(h.weight[e] for e in range(h.num_nets) if len(set(side[h.pins[h.ptr[e]:h.ptr[e + 1]]])) == 2)


def test_net_gains_are_the_exact_change_of_the_cut():
    h = _random_hypergraph(60, 90, seed=1)
    side = np.random.default_rng(2).integers(0, 2, 60).astype(np.int64)
    vptr, vnets = incidence(h.ptr, h.pins, 60)
    gain = net_gains(h.ptr, h.pins, h.weight, vptr, vnets, side, net_counts(h.ptr, h.pins, side))
    base = _brute_cut(h, side)
    assert cut_nets(h.ptr, h.pins, h.weight, side) == base
    for v in range(60):
        flipped = side.copy()
        flipped[v] = 1 - flipped[v]
        assert gain[v] == base - _brute_cut(h, flipped)


def test_fm_on_nets_tracks_its_objective_and_keeps_the_capacities():
    for seed in range(4):
        h = _random_hypergraph(200, 260, seed=seed)
        vptr, vnets = incidence(h.ptr, h.pins, 200)
        rng = np.random.default_rng(seed)
        side = rng.integers(0, 2, 200).astype(np.int64)
        loads = np.stack([np.ones(200, np.int64), rng.integers(0, 5, 200)], axis=1)
        caps2 = np.array([[110, 10**9], [110, 10**9]])
        lower2 = np.array([[90, 0], [90, 0]])
        bias = rng.normal(0, 0.5, 200)
        before = _brute_cut(h, side) + bias[side == 0].sum()
        after = fm_refine_nets(h.ptr, h.pins, h.weight, vptr, vnets, loads, side, caps2, lower2, 60, bias)
        assert np.isclose(after, _brute_cut(h, side) + bias[side == 0].sum())
        assert after < before
        n0 = int((side == 0).sum())
        assert 90 <= n0 <= 110
