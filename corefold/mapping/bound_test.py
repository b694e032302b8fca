import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from corefold.mapping.bound import traffic_bound
from corefold.mapping.objectives import hop_distance_matrix
from corefold.mapping.testing import from_matrix, random_graph


def _optimum(topo, xy, mesh_w, mesh_h, kappa, caps) -> float:
    """The least traffic over every assignment of the vertices to the cores that keeps
    both capacities, by enumeration (c^n assignments, vectorised)."""
    n, c = topo.num_vertices, len(xy)
    dist = hop_distance_matrix(xy, mesh_w, mesh_h, kappa)
    rows = np.repeat(np.arange(n), np.diff(topo.indptr))
    cols = np.asarray(topo.indices)
    w = np.asarray(topo.weights, float)
    every = np.array(list(itertools.product(range(c), repeat=n)))
    traffic = 0.5 * (dist[every[:, rows], every[:, cols]] * w).sum(axis=1)
    fits = np.ones(len(every), bool)
    for load, cap in ((topo.neuron_sizes, caps[0]), (topo.synapses, caps[1])):
        if cap is None:
            continue
        fill = np.stack([(load * (every == k)).sum(axis=1) for k in range(c)], axis=1)
        fits &= (fill <= cap).all(axis=1)
    assert fits.any()
    return float(traffic[fits].min())


CASES = [  # cores (global x, y), chip width, chip height, inter-chip hop cost
    (np.array([[0, 0], [1, 0], [0, 1], [1, 1]]), 2, 2, 1.0),  # a 2 x 2 mesh
    (np.array([[0, 0], [1, 0], [2, 0], [3, 0]]), 2, 1, 3.0),  # two chips of 2 x 1
    (np.array([[0, 0], [1, 0], [2, 0]]), 3, 1, 1.0),  # a row of three
]


@pytest.mark.parametrize("seed", range(12))
def test_the_bound_never_exceeds_the_optimum_found_by_enumeration(seed):
    """On random graphs of 7 vertices with random synapse loads, on three small meshes
    (one with a chip boundary worth 3 hops), with neuron and synapse capacities that bind,
    the bound is at most the least traffic over all 3^7 or 4^7 assignments; the LP's y is
    a vertex packing and the bound is at least the half sum."""
    rng = np.random.default_rng(seed)
    topo = random_graph(7, 3.0, seed, max_weight=4)
    topo.synapses = rng.integers(1, 6, 7).astype(np.int64)
    xy, mw, mh, kappa = CASES[seed % len(CASES)]
    ncap = int(np.ceil(7 / len(xy))) + int(rng.integers(0, 2))
    scap = int(np.ceil(topo.synapses.sum() / len(xy) * 1.3)) if seed % 2 else None
    if scap is not None:
        scap = max(scap, int(topo.synapses.max()))
    bound = traffic_bound(topo, xy, mw, mh, kappa, (ncap, scap))
    best = _optimum(topo, xy, mw, mh, kappa, (ncap, scap))
    assert bound.value <= best + 1e-9
    # a large board's closed-form ring sizes (L1 diamonds) give a bound no higher
    diamond = traffic_bound(topo, xy, mw, mh, kappa, (ncap, scap), ring_cores=0)
    assert diamond.value <= bound.value + 1e-9
    assert bound.half <= bound.value + 1e-9 and bound.method == "lp"
    rows = np.repeat(np.arange(7), np.diff(topo.indptr))
    assert (bound.charged[rows] + bound.charged[topo.indices] <= 1 + 1e-9).all()


def test_a_star_over_a_row_of_three_cores_is_bounded_exactly():
    """A centre with four leaves (weight 1 each), three cores in a row of two neurons each:
    the centre's core keeps one leaf, the two cores beside it take the other three at one
    hop, so the optimum is 3; the bound charges the centre (its leaves' own bounds are 0)
    and finds 3 too. Counting every edge from both ends would give 1.5."""
    a = sp.lil_matrix((5, 5))
    for leaf in range(1, 5):
        a[0, leaf] = a[leaf, 0] = 1.0
    topo = from_matrix(a)
    xy, mw, mh, kappa = CASES[2]
    bound = traffic_bound(topo, xy, mw, mh, kappa, (2, None))
    assert _optimum(topo, xy, mw, mh, kappa, (2, None)) == 3.0
    assert bound.value == pytest.approx(3.0) and bound.half == pytest.approx(1.5)
    np.testing.assert_allclose(bound.per_vertex, [3.0, 0, 0, 0, 0])
    assert bound.charged[0] == pytest.approx(1.0)


def test_the_synapse_capacity_raises_the_bound_and_a_large_graph_falls_back_to_the_half_sum():
    """The same star with 4 synapses on every vertex and 4 per core: one vertex per core,
    so over a row of five cores two leaves lie one hop from the centre and two lie two hops
    away; the bound finds that optimum, 6, where the neurons alone (two per core) would
    allow 3. Over ``lp_edges`` the half sum is used."""
    a = sp.lil_matrix((5, 5))
    for leaf in range(1, 5):
        a[0, leaf] = a[leaf, 0] = 1.0
    topo = from_matrix(a, synapses=[4, 4, 4, 4, 4])
    xy = np.array([[0, 0], [1, 0], [2, 0], [3, 0], [4, 0]])
    bound = traffic_bound(topo, xy, 5, 1, 1.0, (2, 4))
    assert bound.value == pytest.approx(_optimum(topo, xy, 5, 1, 1.0, (2, 4)))
    assert bound.value == pytest.approx(1 * 2 + 2 * 2)
    assert traffic_bound(topo, xy, 5, 1, 1.0, (2, None)).value == pytest.approx(3.0)
    half = traffic_bound(topo, xy, 5, 1, 1.0, (2, 4), lp_edges=0)
    # each leaf pays 1 hop at least too: (6 + 4 x 1) / 2
    assert half.method == "half" and half.value == pytest.approx(5.0) == bound.half
