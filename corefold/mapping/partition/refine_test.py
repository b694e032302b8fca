import numpy as np
import pytest

from corefold.mapping.objectives import edge_costs, loads_of, part_fill
from corefold.mapping.partition.refine import ObjectiveMismatch, refine, repair_capacity
from corefold.mapping.testing import random_graph


def _setup(seed, k=6, n=400):
    topo = random_graph(n, 6, seed=seed)
    loads = loads_of(topo)
    part = np.random.default_rng(seed).integers(0, k, n)
    return topo, loads, part


@pytest.mark.parametrize("metric", ["cut", "hops"])
def test_refine_gain_matches_recomputation_and_never_overfills(metric):
    topo, loads, part = _setup(0)
    k = 6
    dist = 1.0 - np.eye(k) if metric == "cut" else np.abs(np.arange(k)[:, None] - np.arange(k)[None, :]) * 1.0
    fill = part_fill(loads, part, k)
    caps = np.tile(fill.max(axis=0) + 3, (k, 1))
    before = edge_costs(topo.indptr, topo.indices, topo.weights, part, dist)[1]
    gain = refine(topo.indptr, topo.indices, topo.weights, loads, part, fill, caps, dist,
                  np.random.default_rng(1), passes=5, debug=True)
    after = edge_costs(topo.indptr, topo.indices, topo.weights, part, dist)[1]
    assert gain > 0 and np.isclose(before - after, gain)
    assert (fill == part_fill(loads, part, k)).all()
    assert (fill <= caps).all()


def test_debug_mode_raises_on_mismatch(monkeypatch):
    import corefold.mapping.partition.refine as mod

    topo, loads, part = _setup(1)
    dist = 1.0 - np.eye(6)
    fill = part_fill(loads, part, 6)
    caps = np.tile([[10**6, 10**9]], (6, 1))
    real = mod.refine_pass

    def lying(*args):
        gain, moves = real(*args)
        return gain + 1.0, moves

    monkeypatch.setattr(mod, "refine_pass", lying)
    with pytest.raises(ObjectiveMismatch):
        refine(topo.indptr, topo.indices, topo.weights, loads, part, fill, caps, dist,
               np.random.default_rng(0), passes=1, debug=True)


def test_repair_empties_overfull_parts():
    topo, loads, _ = _setup(2, n=300)
    part = np.zeros(300, np.int64)
    part[250:] = 1  # part 0 holds 250, capacity 80 each over 4 parts
    fill = part_fill(loads, part, 4)
    caps = np.tile([[80, 10**9]], (4, 1))
    dist = 1.0 - np.eye(4)
    left = repair_capacity(topo.indptr, topo.indices, topo.weights, loads, part, fill, caps, dist)
    assert left == 0
    assert (part_fill(loads, part, 4) <= caps).all()
    assert (fill == part_fill(loads, part, 4)).all()


def test_swaps_gain_exactly_in_full_parts():
    from corefold.mapping.partition.exchange import refine_with_exchanges
    from corefold.mapping.partition.refine import swap_pass

    topo, loads, part = _setup(3, k=8, n=480)
    k = 8
    part = np.repeat(np.arange(k), 60)[np.random.default_rng(3).permutation(480)]
    xy = np.stack([np.arange(k) % 4, np.arange(k) // 4], axis=1)
    dist = np.abs(xy[:, None, :] - xy[None, :, :]).sum(axis=2).astype(np.float64)
    fill = part_fill(loads, part, k)
    caps = fill.copy()  # every part exactly full: no single move fits, only swaps
    before = edge_costs(topo.indptr, topo.indices, topo.weights, part, dist)[1]
    gain, swaps = swap_pass(topo.indptr, topo.indices, topo.weights, loads, part, fill, caps, dist)
    after = edge_costs(topo.indptr, topo.indices, topo.weights, part, dist)[1]
    assert swaps > 0 and gain > 0 and np.isclose(before - after, gain)
    assert (fill == part_fill(loads, part, k)).all() and (fill <= caps).all()
    total = refine_with_exchanges(topo.indptr, topo.indices, topo.weights, loads, part, fill, caps, dist,
                                  np.random.default_rng(0), rounds=4, scan=0, debug=True)
    final = edge_costs(topo.indptr, topo.indices, topo.weights, part, dist)[1]
    assert total > 0 and np.isclose(after - final, total)
    assert (fill == part_fill(loads, part, k)).all() and (fill <= caps).all()
    assert np.bincount(part, minlength=k).tolist() == [60] * k
