import numpy as np
import pytest

from corefold.mapping.nets import Fanout, fanout_of
from corefold.mapping.objectives import loads_of, multicast_traffic, part_fill
from corefold.mapping.partition.multicast import _delta, multicast_state, refine_multicast
from corefold.mapping.partition.refine import ObjectiveMismatch
from corefold.mapping.topology.model import Topology


def _case(seed, n=300, synapses=1500, w=4, h=3):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, synapses)
    dst = np.where(rng.random(synapses) < 0.7, (src + rng.integers(1, 12, synapses)) % n, rng.integers(0, n, synapses))
    topo = Topology.from_edges(src, dst, num_vertices=n, directions=True)
    k = w * h
    part = (np.arange(n) * k // n).astype(np.int64)
    part = np.where(rng.random(n) < 0.3, rng.integers(0, k, n), part).astype(np.int64)
    part_xy = np.array([(p % w, p // w) for p in range(k)], np.int64)
    return topo, part, part_xy


@pytest.mark.parametrize("chips", [(4, 3, 1.0), (2, 3, 4.0)])
def test_net_deltas_are_exact(chips):
    mw, mh, kappa = chips
    topo, part, part_xy = _case(1)
    fan = fanout_of(topo)
    k = part_xy.shape[0]
    px, py = part_xy[:, 0].copy(), part_xy[:, 1].copy()
    state = multicast_state(fan.ptr, fan.pins, part, px, py, k, 4, mw, mh, kappa - 1.0)
    phi, colptr, colparts, minx, maxx, cnt, lo, hi, cost = state
    rng = np.random.default_rng(0)
    checked = 0
    for s in rng.permutation(topo.num_vertices)[:120]:
        dests = fan.pins[fan.ptr[s]:fan.ptr[s + 1]]
        if dests.size == 0:
            continue
        for rem, add in ((int(part[dests[0]]), -1), (-1, int(rng.integers(k))), (int(part[dests[0]]), int(rng.integers(k)))):
            r = part[s]
            if rem >= 0 and (rem == r or phi[s, rem] != 1):
                continue
            if add >= 0 and (add == r or phi[s, add] != 0 or add == rem):
                continue
            parts = {int(p) for p in part[dests]} - {int(r)}
            if rem >= 0:
                parts.discard(rem)
            if add >= 0:
                parts.add(add)
            # the tree after: one vertex per destination part, the source at its root
            xy = np.array([part_xy[r]] + [part_xy[p] for p in sorted(parts)])
            one_net = Fanout(np.array([0, len(parts)] + [len(parts)] * len(parts)), np.arange(1, len(parts) + 1),
                             np.ones(len(parts) + 1))
            after = multicast_traffic(one_net, xy, 4, 3, mw, mh, kappa)
            d = _delta(s, rem, add, phi, part, px, py, colptr, colparts, mw, mh, kappa - 1.0, minx, maxx, cnt, lo, hi)
            assert np.isclose(d, after - cost[s]), (s, rem, add)
            checked += 1
    assert checked > 50


def test_refinement_lowers_multicast_traffic_exactly_and_keeps_capacities():
    for seed in range(3):
        topo, part, part_xy = _case(seed)
        fan = fanout_of(topo)
        loads = loads_of(topo)
        k = part_xy.shape[0]
        fill = part_fill(loads, part, k)
        caps = np.repeat(np.maximum(fill.max(axis=0), [30, 0])[None, :] + [2, 10], k, axis=0)
        before = multicast_traffic(fan, part_xy[part], 4, 3, 2, 3, 2.0)
        gain = refine_multicast(topo.indptr, topo.indices, fan, loads, part, fill, caps, part_xy, 4, 2, 3, 2.0,
                                np.random.default_rng(seed), passes=4, debug=True)
        after = multicast_traffic(fan, part_xy[part], 4, 3, 2, 3, 2.0)
        assert gain > 0 and np.isclose(before - after, gain)
        assert (part_fill(loads, part, k) <= caps).all() and (fill == part_fill(loads, part, k)).all()


def test_debug_mode_catches_a_wrong_gain(monkeypatch):
    import corefold.mapping.partition.multicast as mc

    topo, part, part_xy = _case(5)
    fan = fanout_of(topo)
    loads = loads_of(topo)
    fill = part_fill(loads, part, 12)
    caps = np.repeat([[10**6, 10**9]], 12, axis=0)
    real = mc.multicast_pass

    def wrong(*args):
        gain, moves = real(*args)
        return gain * 1.5 + 1.0, moves

    monkeypatch.setattr(mc, "multicast_pass", wrong)
    with pytest.raises(ObjectiveMismatch):
        refine_multicast(topo.indptr, topo.indices, fan, loads, part, fill, caps, part_xy, 4, 4, 3, 1.0,
                         np.random.default_rng(0), debug=True)
