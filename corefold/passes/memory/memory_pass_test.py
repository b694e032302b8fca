"""The memory pass end to end: same outputs under the executor, budget kept, edges right."""

from dataclasses import replace

import numpy as np
import pytest

from corefold.executor import random_inputs, run
from corefold.ir import parse, to_text, verify
from corefold.ir.domains import MEMORY_DOMAIN
from corefold.ops.defs.memory import COMPRESS_FORMATS
from corefold.passes.memory import (
    COMPRESS_SQNR_DB,
    BudgetError,
    MemoryPass,
    MemorySettings,
    measure,
    plan_memory,
)
from corefold.passes.memory.testing import training_mlp
from corefold.pipeline import CompileContext, Pipeline
from corefold.settings import preset
from corefold.target import load_target


@pytest.fixture(scope="module")
def gpu():
    return load_target("gpu-nvlink")


@pytest.fixture(scope="module")
def mlp():
    g = training_mlp(layers=6, batch=1024, width=128)
    feeds = random_inputs(g, seed=1)
    return g, feeds, run(g, feeds)


def _fresh(mlp):
    g, _, _ = mlp
    return parse(to_text(g))


def _memory_nodes(g, op):
    return [n for n in g.nodes if n.domain == MEMORY_DOMAIN and n.op_type == op]


def test_swap_is_bit_exact_and_fits_the_budget(mlp, gpu):
    g = _fresh(mlp)
    before = measure(g, gpu)
    budget = (before.step_peak + before.step_peak // 2) // 2  # 75% of the peak
    res = plan_memory(g, gpu, MemorySettings(budget_bytes=budget))
    verify(g)
    r = res.report
    assert res.modified and r["peak_after"] <= budget < r["peak_before"]
    assert r["timed_peak_after"] <= r["peak_after"]
    assert r["floor"] <= r["peak_after"] and r["swapped_bytes"] > 0 and r["compressed_bytes"] == 0
    got = run(g, mlp[1])
    for k, want in mlp[2].items():
        assert np.array_equal(got[k], want), k
    # each restore ends before its readers start; each SwapOut before its release node
    m = measure(g, gpu)
    for s_in in _memory_nodes(g, "SwapIn"):
        for reader in s_in.successors():
            assert m.schedule.end[s_in] <= m.schedule.start[reader]
        assert any(p.domain != MEMORY_DOMAIN for p in s_in.control_preds)  # prefetch edge
    for s_out in _memory_nodes(g, "SwapOut"):
        assert any(s.domain != MEMORY_DOMAIN for s in s_out.control_succs)  # serialization edge


def test_text_form_keeps_the_control_edges(mlp, gpu):
    g = _fresh(mlp)
    plan_memory(g, gpu, MemorySettings(budget_bytes=int(measure(g, gpu).step_peak * 0.7)))
    text = to_text(g)
    again = parse(text)
    assert to_text(again) == text and "after(" in text
    assert measure(again, gpu).step_peak == measure(g, gpu).step_peak


@pytest.mark.parametrize("fmt", list(COMPRESS_FORMATS))
def test_compression_stays_within_its_bounds(mlp, gpu, fmt):
    g = _fresh(mlp)
    budget = int(measure(g, gpu).step_peak * 0.8)
    res = plan_memory(g, gpu, MemorySettings(budget_bytes=budget, reduction="compress", compress_format=fmt))
    verify(g)
    assert res.report["peak_after"] <= budget and res.report["compressed_bytes"] > 0
    decomp = _memory_nodes(g, "Decompress")
    assert decomp
    # every restored tensor is within the format's bound of the original
    originals = [n.meta["of"] for n in decomp]
    restored = [n.outputs[0].name for n in decomp]
    ref = run(_fresh(mlp), mlp[1], outputs=originals)
    got = run(g, mlp[1], outputs=restored + [n.outputs[-1].name for n in _memory_nodes(g, "Compress")])
    scales = {n.meta["of"]: float(got[n.outputs[-1].name]) if len(n.outputs) > 1 else 1.0
              for n in _memory_nodes(g, "Compress")}
    spec = COMPRESS_FORMATS[fmt]
    for orig, rest in zip(originals, restored, strict=True):
        err = np.abs(got[rest].astype(np.float64) - ref[orig])
        assert np.all(err <= spec.bound(ref[orig], scales[orig]))
    # and the outputs within the pass's stated SQNR
    out = run(g, mlp[1])
    for k, want in mlp[2].items():
        noise = np.sum((out[k].astype(np.float64) - want) ** 2)
        assert noise == 0 or 10 * np.log10(np.sum(want.astype(np.float64) ** 2) / noise) >= COMPRESS_SQNR_DB[fmt]


def test_budget_below_the_floor_names_the_floor(mlp, gpu):
    g = _fresh(mlp)
    res = measure(g, gpu)
    from corefold.passes.memory.memsim import floor_bytes

    floor, _ = floor_bytes(res.program)
    with pytest.raises(BudgetError, match=f"floor of {floor:,} bytes"):
        plan_memory(g, gpu, MemorySettings(budget_bytes=floor - 1, split="off"))
    assert not any(n.domain == MEMORY_DOMAIN for n in g.nodes)


def test_one_reduction_feeds_several_restores(gpu):
    # x is read at the start, in the middle and at the end of a long chain
    lines = ["graph three", "input x: float32[1024, 256]", "node a0 = Relu(x) -> (v0: float32[1024, 256])"]
    for i in range(1, 40):
        lines.append(f"node a{i} = Tanh(v{i - 1}) -> (v{i}: float32[1024, 256])")
        if i == 20:
            lines.append(f"node mid = Add(v{i}, v0) -> (m: float32[1024, 256])")
    lines += ["node last = Add(v39, v0) -> (y: float32[1024, 256])", "node both = Add(y, m) -> (z: float32[1024, 256])",
              "output z"]
    g = parse("\n".join(lines) + "\n")
    feeds = random_inputs(g, 0)
    want = run(g, feeds)["z"]
    res = plan_memory(g, gpu, replace(preset(MemorySettings, "seed"), th_tts=0.0, th_size=0, max_count=2))
    verify(g)
    outs, ins = _memory_nodes(g, "SwapOut"), _memory_nodes(g, "SwapIn")
    assert len(outs) == 1 and len(ins) == 2 and all(s.inputs[0] is outs[0].outputs[0] for s in ins)
    assert res.report["restores"] == 2
    # the seed's serialization between restores: the first restore's reader before the second restore
    first_reader = g.node("mid")
    assert any(first_reader in s.control_preds for s in ins)
    assert np.array_equal(run(g, feeds)["z"], want)


def test_forward_graph_with_the_seed_rule_is_exact(gpu):
    from corefold.examples import example_path
    from corefold.frontend.onnx import load_model

    g = load_model(example_path("tiny_cnn"))
    feeds = random_inputs(g, 0)
    want = run(g, feeds)
    res = plan_memory(g, gpu, replace(preset(MemorySettings, "seed"), th_tts=0.0, th_size=1024))
    verify(g)
    assert res.modified and res.report["reductions"] >= 1
    got = run(g, feeds)
    for k in want:
        assert np.array_equal(got[k], want[k])


def test_as_a_pipeline_pass_in_debug_mode(mlp, gpu):
    g = _fresh(mlp)
    budget = int(measure(g, gpu).step_peak * 0.75)
    for reduction in ("swap", "compress"):
        settings = MemorySettings(budget_bytes=budget, reduction=reduction)
        ctx = CompileContext(target=gpu, settings={"memory": settings}, debug=True)
        result = Pipeline([MemoryPass()]).run(parse(to_text(g)), ctx)
        assert result.modified and ctx.reports[0][1]["peak_after"] <= budget


def test_a_graph_that_fits_is_left_alone(mlp, gpu):
    g = _fresh(mlp)
    text = to_text(g)
    res = plan_memory(g, gpu, MemorySettings())  # 16 GiB
    assert not res.modified and to_text(g) == text and res.report["peak_after"] == res.report["peak_before"]
