"""Budget mode's two timings of one choice of gaps: both keep the budget and the values, and
``best`` keeps the faster in simulation."""

from dataclasses import replace

import numpy as np
import pytest

from corefold.executor import random_inputs, run
from corefold.ir import parse, to_text, verify
from corefold.passes.memory import MemorySettings, measure, plan_memory
from corefold.passes.memory.memsim import floor_bytes
from corefold.passes.memory.testing import training_mlp
from corefold.target import load_target


@pytest.fixture(scope="module")
def chain():
    g = training_mlp(layers=6, batch=1024, width=128)
    feeds = random_inputs(g, seed=1)
    return to_text(g), feeds, run(g, feeds)


def _budget(g, t, fraction):
    m = measure(g, t)
    floor, _ = floor_bytes(m.program)
    return int(floor + fraction * (m.step_peak - floor))


@pytest.mark.parametrize("fraction", [0.3, 0.5])
def test_each_timing_fits_and_best_is_the_faster(chain, fraction):
    t = load_target("gpu-nvlink")
    text, feeds, want = chain
    budget = _budget(parse(text), t, fraction)
    times = {}
    for timing in ("retime", "relax", "best"):
        g = parse(text)
        res = plan_memory(g, t, MemorySettings(budget_bytes=budget, timing=timing))
        verify(g)
        r = res.report
        after = measure(g, t)
        assert after.timed.peak <= after.step_peak == r["peak_after"] <= budget < r["peak_before"]
        assert r["time_after"] == pytest.approx(after.schedule.makespan)
        got = run(g, feeds)
        for k, v in want.items():
            assert np.array_equal(got[k], v), (timing, k)
        times[timing] = r["time_after"]
        if timing != "best":
            assert r["timing"] == timing
    assert times["best"] == pytest.approx(min(times["retime"], times["relax"]))


def test_retime_hides_more_of_the_link_on_a_tight_chain(chain):
    # at 30% of the way from the floor to the peak the greedy's as-late-as-possible
    # restores crowd the end of the backward phase; the list schedule starts them earlier
    t = load_target("gpu-nvlink")
    text = chain[0]
    budget = _budget(parse(text), t, 0.3)
    over = {timing: plan_memory(parse(text), t, MemorySettings(budget_bytes=budget, timing=timing)).report["overhead"]
            for timing in ("retime", "relax")}
    assert over["retime"] < over["relax"] - 0.05
    best = plan_memory(parse(text), t, replace(MemorySettings(budget_bytes=budget), timing="best")).report
    assert best["timing"] == "retime" and best["overhead"] == pytest.approx(over["retime"])
