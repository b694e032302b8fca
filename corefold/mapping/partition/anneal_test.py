import numpy as np

from corefold.mapping.objectives import edge_costs, loads_of, part_fill
from corefold.mapping.partition.anneal import anneal_vertices
from corefold.mapping.testing import random_graph


def _setup(seed):
    rng = np.random.default_rng(seed)
    topo = random_graph(500, 6, seed=seed)
    loads = loads_of(topo)
    loads[:, 1] = np.where(rng.random(500) < 0.3, 15, rng.integers(0, 3, 500))
    k = 9
    part = np.repeat(np.arange(k), 56)[:500][rng.permutation(500)].astype(np.int64)
    fill = part_fill(loads, part, k)
    caps = np.repeat(fill.max(axis=0)[None, :], k, axis=0)  # the fullest core is exactly full
    caps[:, 0] = 56  # neurons: 8 cores exactly full, one with 52
    xy = np.stack([np.arange(k) % 3, np.arange(k) // 3], axis=1)
    dist = np.abs(xy[:, None, :] - xy[None, :, :]).sum(axis=2).astype(np.float64)
    return topo, loads, part, fill, caps, dist


def test_annealing_keeps_capacities_and_reports_its_exact_gain():
    for seed in range(3):
        topo, loads, part, fill, caps, dist = _setup(seed)
        before = edge_costs(topo.indptr, topo.indices, topo.weights, part, dist)[1]
        gain = anneal_vertices(topo.indptr, topo.indices, topo.weights, loads, part, fill, caps, dist, 50_000, seed)
        after = edge_costs(topo.indptr, topo.indices, topo.weights, part, dist)[1]
        assert gain > 0 and np.isclose(before - after, gain)
        assert part.min() >= 0 and part.max() < 9 and part.shape == (500,)
        assert (fill == part_fill(loads, part, 9)).all() and (fill <= caps).all()


def test_annealing_is_deterministic_and_never_worse():
    topo, loads, part, fill, caps, dist = _setup(5)
    runs = []
    for _ in range(2):
        p, f = part.copy(), fill.copy()
        anneal_vertices(topo.indptr, topo.indices, topo.weights, loads, p, f, caps, dist, 20_000, 7)
        runs.append(p)
    assert (runs[0] == runs[1]).all()
    # no steps: the mapping is returned unchanged
    p, f = part.copy(), fill.copy()
    assert anneal_vertices(topo.indptr, topo.indices, topo.weights, loads, p, f, caps, dist, 0, 7) == 0.0
    assert (p == part).all() and (f == fill).all()


def test_annealing_chains_give_the_same_mapping_on_any_number_of_threads():
    topo, loads, part, fill, caps, dist = _setup(4)
    before = edge_costs(topo.indptr, topo.indices, topo.weights, part, dist)[1]
    ends = []
    for threads in (1, 2):
        p, f = part.copy(), fill.copy()
        gain = anneal_vertices(topo.indptr, topo.indices, topo.weights, loads, p, f, caps, dist, 30_000, 3,
                               chains=2, threads=threads)
        assert np.isclose(before - edge_costs(topo.indptr, topo.indices, topo.weights, p, dist)[1], gain)
        assert (f == part_fill(loads, p, 9)).all() and (f <= caps).all()
        ends.append(p)
    assert (ends[0] == ends[1]).all()
