from types import SimpleNamespace

import numpy as np

from corefold.backend.emit import HOP_WEIGHT, assign_channels, region_traffic
from corefold.target import load_target


def _plan(regions: dict, events: dict):
    """A duck-typed plan: ``regions`` key -> (shape, dtype, name, core); ``events`` core ->
    list of (kind, region key, bytes)."""
    cores = {}
    for core, evs in events.items():
        cores[core] = SimpleNamespace(events=[
            SimpleNamespace(kind=k, region=key, region_view=((n,), (0,), (n,)), src_region=None,
                            src_region_view=None) for k, key, n in evs])
    return SimpleNamespace(cores=cores, regions=regions)


def test_channels_share_the_traffic_of_one_core():
    """Eight equal spills of the core next to channel 0: the nearest-channel rule put all
    eight on channel 0 (a quarter of the DRAM bandwidth); balanced, each of the four
    channels takes two."""
    t = load_target("npu")
    core = tuple(t.dram_channels[0])
    regions = {("spill", i): ((1 << 20,), np.dtype(np.uint8), f"s{i}", core) for i in range(8)}
    plan = _plan(regions, {core: [(k, ("spill", i), 1 << 20) for i in range(8) for k in ("store", "load")]})
    assert region_traffic(plan)[("spill", 3)] == {core: 2 << 20}
    got = assign_channels(plan, t)
    assert sorted(np.bincount(list(got.values()), minlength=4)) == [2, 2, 2, 2]


def test_small_regions_stay_near_and_unused_regions_go_nearest():
    """Once the channels are balanced, a region goes to the nearest channel among those with
    the least load plus ``HOP_WEIGHT`` x its bytes x hops; a region nobody moves goes to the
    channel nearest its core."""
    t = load_target("npu")
    far = tuple(t.dram_channels[3])
    regions = {("input", 0): ((64,), np.dtype(np.uint8), "x", far),
               ("output", 0): ((64,), np.dtype(np.uint8), "y", far)}
    plan = _plan(regions, {far: [("load", ("input", 0), 64)]})
    got = assign_channels(plan, t)
    assert got[("input", 0)] == 3 and got[("output", 0)] == 3
    assert 0 < HOP_WEIGHT < 1


def test_loads_stay_within_the_greedy_bound():
    """Random traffic: no channel exceeds the least-loaded one's final load plus the largest
    region plus the hop term (the largest-first greedy's bound)."""
    t = load_target("npu")
    rng = np.random.default_rng(0)
    cores = [tuple(c) for c in t.usable_cores]
    regions, events = {}, {}
    for i in range(40):
        core = cores[rng.integers(len(cores))]
        n = int(rng.integers(1, 1 << 20))
        regions[("spill", i)] = ((n,), np.dtype(np.uint8), f"s{i}", core)
        events.setdefault(core, []).append(("store", ("spill", i), n))
    plan = _plan(regions, events)
    got = assign_channels(plan, t)
    load = np.zeros(4)
    for key, (shape, *_rest) in regions.items():
        load[got[key]] += shape[0]
    biggest = max(s[0] for s, *_ in regions.values())
    assert load.max() - load.min() <= biggest * (1 + HOP_WEIGHT * (t.width + t.height))


def _reuse_loop(plan, core_buffers, life):
    """The pairs of ``_reuse_deps`` by the plain O(B^2) loop it replaced (the oracle)."""
    acts = sorted((b for b in core_buffers if b in life), key=lambda b: life[b][0])
    out = {b: [] for b in acts}
    for i, b in enumerate(acts):
        lo, hi = plan.buffers[b].offset, plan.buffers[b].offset + plan.buffers[b].nbytes
        for a in acts[:i]:
            a_lo, a_hi = plan.buffers[a].offset, plan.buffers[a].offset + plan.buffers[a].nbytes
            if life[a][1] < life[b][0] and a_lo < hi and lo < a_hi:
                out[b].append(a)
    return out


def test_reuse_dependencies_are_those_of_the_plain_loop(monkeypatch):
    """Every activation buffer waits for exactly the earlier ones whose addresses it reuses,
    in the plain loop's order, on random buffer sets: block edges (``REUSE_ROWS`` 7), ties
    of first use, weights (no lifetime) among them, and no buffer at all."""
    import corefold.backend.emit as emit

    monkeypatch.setattr(emit, "REUSE_ROWS", 7)
    rng = np.random.default_rng(0)
    found = 0
    for trial in range(60):
        n = int(rng.integers(0, 40))
        buffers = [SimpleNamespace(offset=int(rng.integers(0, 16)) * 64, nbytes=int(rng.integers(1, 300)))
                   for _ in range(n)]
        life = {}
        for b in range(n):
            if rng.random() < 0.85:  # else a weight: never in life
                a = int(rng.integers(0, 30))
                life[b] = (a, a + int(rng.integers(0, 6)))
        plan = SimpleNamespace(buffers=buffers)
        order = rng.permutation(n).tolist()
        got = emit._reuse_deps(plan, order, life)
        assert got == _reuse_loop(plan, order, life), trial
        found += sum(map(len, got.values()))
    assert found > 100  # the sets do reuse addresses
