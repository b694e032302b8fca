"""Property tests on random DAGs: the plan keeps the graph acyclic, restores come before
their reads, the simulated peak stays under the budget whenever the plan says it fits,
and swapping never changes a value (cutting operators along the batch, when no plan fits
otherwise, changes them within rounding)."""

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corefold.executor import random_inputs, run
from corefold.ir import verify
from corefold.ir.domains import MEMORY_DOMAIN
from corefold.passes.memory import MemorySettings, PlanError, measure, plan_memory
from corefold.passes.memory.memory_pass import SPLIT_CLOSE
from corefold.passes.memory.memsim import floor_bytes
from corefold.passes.memory.testing import random_dag
from corefold.settings import preset
from corefold.target import load_target

TARGETS = {name: load_target(name) for name in ("gpu", "gpu-nvlink")}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), fraction=st.floats(0.0, 1.0), target=st.sampled_from(sorted(TARGETS)),
       reduction=st.sampled_from(["swap", "swap", "compress", "both", "auto"]), nodes=st.integers(8, 40),
       timing=st.sampled_from(["best", "retime", "relax"]))
def test_budget_plans_on_random_dags(seed, fraction, target, reduction, nodes, timing):
    g = random_dag(seed, nodes=nodes)
    t = TARGETS[target]
    feeds = random_inputs(g, seed)
    want = run(g, feeds)
    m = measure(g, t)
    floor, _ = floor_bytes(m.program)
    budget = int(floor + fraction * (m.step_peak - floor))
    try:
        res = plan_memory(g, t, MemorySettings(budget_bytes=budget, reduction=reduction, timing=timing))
    except PlanError:
        return  # the plan says it does not fit: nothing to check
    g = res.graph
    verify(g)  # acyclic over data and control edges, every invariant
    after = measure(g, t)
    assert after.timed.peak <= after.step_peak <= budget
    assert res.report["peak_after"] == after.step_peak
    for n in g.nodes:
        if n.domain == MEMORY_DOMAIN and n.op_type in ("SwapIn", "Decompress"):
            for reader in n.successors():
                assert after.schedule.end[n] <= after.schedule.start[reader]
    got = run(g, feeds)
    if reduction == "swap" or res.report["compressed_bytes"] == 0:
        for k, v in want.items():
            if res.report.get("split"):  # cut products and summed pieces reassociate
                assert np.max(np.abs(got[k] - v)) <= SPLIT_CLOSE.rtol * np.max(np.abs(v)) + 1e-30
            else:
                assert np.array_equal(got[k], v)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), th=st.integers(0, 300_000), count=st.integers(1, 20))
def test_the_seed_rule_on_random_dags(seed, th, count):
    g = random_dag(seed, nodes=30)
    t = TARGETS["gpu"]
    feeds = random_inputs(g, seed)
    want = run(g, feeds)
    res = plan_memory(g, t, replace(preset(MemorySettings, "seed"), th_tts=0.0, th_size=th, max_count=count))
    verify(g)
    assert res.report["reductions"] <= count
    after = measure(g, t)
    assert after.timed.peak <= after.step_peak
    got = run(g, feeds)
    for k, v in want.items():
        assert np.array_equal(got[k], v)
