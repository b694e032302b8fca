"""The critical path: by hand on small executables, and its invariant on a lowered model."""

import numpy as np
import pytest

from corefold.backend.executable import DmaLoad, DmaStore, xy_route
from corefold.sim.critical import critical_path
from corefold.sim.simulate import run_simulation
from corefold.sim.simulate_test import _matmul_relu
from corefold.sim.testing import ExeBuilder, small_target

NS = 1e-9


def test_a_chain_on_one_core_is_its_own_critical_path_with_each_step_timed_by_hand():
    exe, t, _ = _matmul_relu()
    sim = run_simulation(exe, {"x": np.ones((1, 4), np.float32)}, t)
    path = critical_path(sim.timed)
    # the run of test_one_core_timeline_and_report_by_hand: load 0-4 ns (channel, hop, DMA),
    # matmul 4-6, relu 6-7, store 7-11 (run-relative)
    assert [s.category for s in path.steps] == ["dma_load", "compute", "compute", "dma_store"]
    assert [s.service_s / NS for s in path.steps] == pytest.approx([4, 2, 1, 4])
    assert [s.start_s / NS for s in path.steps] == pytest.approx([0, 4, 6, 7])
    assert all(s.wait_s == 0 for s in path.steps)
    cats = path.by_category()
    assert list(cats) == ["dma_load", "dma_store", "compute"]  # the largest first, ties in path order
    assert [cats[k][0] / NS for k in cats] == pytest.approx([4, 4, 3])
    doc = path.to_json()
    assert doc["steps"] == 4 and doc["longest"][0]["category"] == "dma_load"
    assert path.summary(unit=NS, suffix="ns") == "4 steps: dma_load 4.0, dma_store 4.0, compute 3.0 ns"
    assert path.summary() == "4 steps, under 0.05 us each category"


def test_a_load_that_queues_for_the_dram_channel_waits_on_the_path():
    """Two cores load 16 B each from the one channel at once (1 ns each at 16 GB/s); the
    load granted second waits 1 ns for the channel, and its chain ends last."""
    t = small_target()
    b = ExeBuilder(t)
    x0, x1 = b.graph_input("x0", (4,)), b.graph_input("x1", (4,))
    y0, y1 = b.graph_output("y0", (4,)), b.graph_output("y1", (4,))
    for core, x, y in (((1, 0), x0, y0), ((1, 1), x1, y1)):
        buf = b.buffer(core, (4,))
        b.add(core, DmaLoad("dma0", b.view(x, dram=True), b.view(buf), xy_route((1, 0), core)))
        b.add(core, DmaStore("dma0", b.view(buf), b.view(y, dram=True), xy_route(core, (1, 0)), deps=(0,)))
    sim = run_simulation(exe := b.build(), {"x0": np.ones(4, np.float32), "x1": np.ones(4, np.float32)}, t)
    path = critical_path(sim.timed)
    assert path.steps[0].category == "dma_load"
    assert path.steps[0].wait_s == pytest.approx(1 * NS)
    total = sum(s.service_s + s.wait_s for s in path.steps)
    assert total == pytest.approx(sim.report.latency_s)
    assert len(exe.programs) == 2


def test_on_a_lowered_model_the_steps_add_up_to_the_latency_in_time_order():
    from corefold.backend.lower import LowerSettings, lower
    from corefold.backend.lower_test import _matmuls
    from corefold.target import load_target

    t = load_target("npu")
    graph = _matmuls(8, parallel=False)
    exe = lower(graph, t, LowerSettings(order_budget_seconds=0.0))
    feeds = {v.name: np.random.default_rng(0).standard_normal(v.shape).astype(np.float32) for v in graph.inputs}
    sim = run_simulation(exe, feeds, t)
    path = critical_path(sim.timed)
    assert len(path.steps) > 3
    total = sum(s.service_s + s.wait_s for s in path.steps)
    assert total == pytest.approx(sim.report.latency_s, rel=1e-9)
    assert all(s.service_s >= 0 and s.wait_s >= 0 for s in path.steps)
    # each step ends where the next one's time begins: its start is no later than that end
    ends = np.cumsum([s.service_s + s.wait_s for s in path.steps])
    assert all(s.start_s <= e * (1 + 1e-12) for s, e in zip(path.steps, ends, strict=True))
    cats = path.by_category()
    assert "compute" in cats and sum(a + w for a, w in cats.values()) == pytest.approx(total)
