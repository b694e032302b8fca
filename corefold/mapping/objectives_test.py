import itertools

import numpy as np
import scipy.sparse as sp

from corefold.mapping import objectives
from corefold.mapping.testing import random_graph


def test_xy_link_loads_hand_computed_on_3x3():
    # groups 0 at (0,0), 1 at (2,1); Q = 4 -> 2 each way.
    q = sp.csr_matrix(np.array([[0.0, 4.0], [4.0, 0.0]]))
    xy = np.array([[0, 0], [2, 1]])
    links = objectives.link_loads(q, xy, 3, 3)
    want = np.zeros((3, 3, 4))
    want[0, 0, 0] = want[0, 1, 0] = 2  # 0 -> 1: east along y=0 from x=0 to x=2
    want[0, 2, 2] = 2  # then north at x=2 from y=0 to y=1
    want[1, 2, 1] = want[1, 1, 1] = 2  # 1 -> 0: west along y=1 from x=2 to x=0
    want[1, 0, 3] = 2  # then south at x=0 from y=1 to y=0
    np.testing.assert_array_equal(links, want)
    # total link load equals hop-weighted traffic
    dist = objectives.hop_distance_matrix(xy, 3, 3, 1.0)
    assert links.sum() == objectives.hop_weighted_traffic_quotient(q, dist) == 12


def test_link_loads_brute_force_random():
    rng = np.random.default_rng(0)
    k, w, h = 6, 4, 3
    cores = rng.permutation(w * h)[:k]
    xy = np.stack([cores % w, cores // w], axis=1)
    dense = rng.integers(0, 5, (k, k)).astype(float)
    dense = dense + dense.T
    np.fill_diagonal(dense, 0)
    want = np.zeros((h, w, 4))
    for a in range(k):
        for b in range(k):
            load = dense[a, b] / 2
            x, y = xy[a]
            while x != xy[b, 0]:
                step = 1 if xy[b, 0] > x else -1
                want[y, x, 0 if step == 1 else 1] += load
                x += step
            while y != xy[b, 1]:
                step = 1 if xy[b, 1] > y else -1
                want[y, x, 2 if step == 1 else 3] += load
                y += step
    np.testing.assert_allclose(objectives.link_loads(sp.csr_matrix(dense), xy, w, h), want)


def test_hop_distance_counts_interchip_hops():
    xy = np.array([[1, 0], [2, 0], [3, 3], [0, 0]])
    d = objectives.hop_distance_matrix(xy, 2, 2, 8.0)  # 2x2 chips, crossing costs 8 hops
    assert d[0, 1] == 8  # one hop, across the chip boundary
    assert d[0, 3] == 1
    assert d[3, 2] == 6 + 7 * 2  # crosses one boundary in x and one in y


def test_cut_traffic_fill_match_brute_force():
    topo = random_graph(60, 5, seed=3)
    rng = np.random.default_rng(1)
    part = rng.integers(0, 5, 60)
    xy = np.array([[0, 0], [1, 0], [2, 0], [0, 1], [2, 2]])
    dist = objectives.hop_distance_matrix(xy, 3, 3, 1.0)
    cut = traffic = 0.0
    for v in range(60):
        for e in range(topo.indptr[v], topo.indptr[v + 1]):
            u = topo.indices[e]
            if u > v and part[u] != part[v]:
                cut += topo.weights[e]
                traffic += topo.weights[e] * (abs(xy[part[u]] - xy[part[v]]).sum())
    c, t = objectives.part_costs(topo, part, dist)
    assert np.isclose(c, cut) and np.isclose(t, traffic)
    assert np.isclose(objectives.cut(topo, part), cut)
    fill = objectives.part_fill(objectives.loads_of(topo), part, 5)
    assert fill[:, 0].tolist() == np.bincount(part, minlength=5).tolist()
    ev = objectives.evaluate(topo, xy[part], 3, 3, 3, 3, 1.0, (20, None))
    assert np.isclose(ev["traffic"], traffic) and np.isclose(ev["cut"], cut)
    assert ev["violations"].tolist() == [int((np.bincount(part) > 20).sum()), 0]


def test_lower_bound_is_below_every_placement_and_above_cut():
    rng = np.random.default_rng(5)
    k = 5
    dense = rng.integers(0, 6, (k, k)).astype(float)
    dense = dense + dense.T
    np.fill_diagonal(dense, 0)
    q = sp.csr_matrix(dense)
    lb = objectives.traffic_lower_bound(q)
    assert lb >= dense.sum() / 2  # the cut
    cores = np.array([(x, y) for y in range(3) for x in range(2)])
    dist = objectives.hop_distance_matrix(cores, 2, 3, 1.0)
    best = min(objectives.hop_weighted_traffic_quotient(q, dist[np.ix_(p, p)])
               for p in itertools.permutations(range(6), k))
    assert lb <= best + 1e-9


def _xy_links(src, dst):
    """Directed links of the XY route src -> dst: ((x, y), channel)."""
    (x, y), (tx, ty) = src, dst
    out = []
    while x != tx:
        out.append(((x, y), 0) if tx > x else ((x, y), 1))
        x += 1 if tx > x else -1
    while y != ty:
        out.append(((x, y), 2) if ty > y else ((x, y), 3))
        y += 1 if ty > y else -1
    return out


def test_multicast_tree_hand_computed_on_3x3():
    from corefold.mapping.nets import Fanout
    from corefold.mapping.objectives import multicast_traffic

    # source 0 on core (1, 1) sends to cores (0, 0), (2, 0), (2, 2), (1, 2) and its own core
    xy = np.array([(1, 1), (0, 0), (2, 0), (2, 2), (1, 2), (1, 1), (2, 2)])
    fan = Fanout(np.array([0, 6, 6, 6, 6, 6, 6, 6]), np.array([1, 2, 3, 4, 5, 6]), np.ones(7))
    total, loads = multicast_traffic(fan, xy, 3, 3, 3, 3, 1.0, with_loads=True)
    # row 1 from x=0 to 2 (2 links), column 0 down 1, column 2 down 1 and up 1, column 1 up 1
    assert total == 6.0 and loads.sum() == 6.0
    assert loads[1, 1, 0] == loads[1, 1, 1] == loads[1, 0, 3] == loads[1, 2, 2] == loads[1, 2, 3] == loads[1, 1, 2] == 1
    # one chip boundary every 2 cores in x (chips of 2x3), kappa 3: the row link 1 -> 2 costs 3
    assert multicast_traffic(fan, xy, 3, 3, 2, 3, 3.0) == 8.0


def test_multicast_matches_the_union_of_xy_routes():
    from corefold.mapping.nets import fanout_of
    from corefold.mapping.objectives import multicast_traffic
    from corefold.mapping.topology.model import Topology

    rng = np.random.default_rng(4)
    src, dst = rng.integers(0, 60, 400), rng.integers(0, 60, 400)
    topo = Topology.from_edges(src, dst, num_vertices=60, directions=True)
    xy = np.stack([rng.integers(0, 6, 60), rng.integers(0, 4, 60)], axis=1)
    fan = fanout_of(topo)
    want = np.zeros((4, 6, 4))
    cost = 0.0
    for s in range(60):
        links = set()
        for d in {int(u) for u in dst[src == s] if u != s}:
            links |= set(_xy_links(tuple(xy[s]), tuple(xy[d])))
        for (x, y), ch in links:
            want[y, x, ch] += 1
            # chips of 3 x 2 cores: a link crossing a chip boundary costs kappa = 4
            nx, ny = x + (ch == 0) - (ch == 1), y + (ch == 2) - (ch == 3)
            cost += 4.0 if (nx // 3 != x // 3 or ny // 2 != y // 2) else 1.0
    total, loads = multicast_traffic(fan, xy, 6, 4, 3, 2, 4.0, with_loads=True)
    np.testing.assert_array_equal(loads, want)
    assert np.isclose(total, cost)
    # per synapse, every synapse pays its whole route: never less than per spike
    ev = objectives.evaluate(topo, xy, 6, 4, 3, 2, 4.0, (60, None), objective="multicast")
    assert ev["traffic"] == ev["multicast_traffic"] == total
    assert ev["connectivity"] <= total <= ev["synapse_traffic"]
