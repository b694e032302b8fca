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
