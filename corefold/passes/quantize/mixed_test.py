import json

import numpy as np
import pytest

from corefold.ir import parse
from corefold.passes.quantize import QuantizeSettings, load_calibration, quantize_graph
from corefold.passes.quantize.mixed import simulate, sqnr_db
from corefold.passes.quantize.select_test import RESIZE_SHARED

TEXT = """graph mlp opset 21
input x: float32[1, 16]
const w1: float32[16, 32] = {w1}
const w2: float32[32, 4] = {w2}
node mm1 = MatMul(x, w1) -> (h: float32[1, 32])
node relu = Relu(h) -> (r: float32[1, 32])
node mm2 = MatMul(r, w2) -> (y: float32[1, 4])
output y
"""


def _graph(rng):
    f = lambda a: json.dumps([round(float(v), 5) for v in a.ravel()])  # noqa: E731
    return TEXT.format(w1=f(rng.standard_normal((16, 32))), w2=f(rng.standard_normal((32, 4)) * 0.3))


def test_mixed_precision_reaches_target_and_reports_cost(tmp_path):
    rng = np.random.default_rng(0)
    text = _graph(rng)
    np.savez(tmp_path / "c.npz", x=rng.standard_normal((16, 16)).astype(np.float32))
    base_graph = parse(text)
    base = quantize_graph(base_graph, load_calibration(tmp_path / "c.npz", base_graph),
                          QuantizeSettings(bits=4, weight_rounding="nearest"), progress=False)
    g = parse(text)
    res = quantize_graph(g, load_calibration(tmp_path / "c.npz", g),
                         QuantizeSettings(bits=4, weight_rounding="nearest", target_sqnr_db=35.0), progress=False)
    m = res.mixed
    assert m["start_sqnr_db"] < 35.0 <= m["final_sqnr_db"] and m["reached"]
    assert m["raises"] and all(r["to_bits"] > r["from_bits"] for r in m["raises"])
    raised = {t for r in m["raises"] for t in r["tensors"]}
    assert {t for t, p in res.plan.items() if p.bits == 8} == raised
    assert m["weight_bytes_added"] + m["activation_bytes_added"] == sum(r["bytes_added"] for r in m["raises"])
    # the reported SQNR is the simulated model's on the measurement batches
    f = parse(text)
    xs = [{"x": x[None]} for x in np.load(tmp_path / "c.npz")["x"][:4]]
    got = sqnr_db([y for d in xs for y in simulate(f, {}, d)], [y for d in xs for y in simulate(f, res.plan, d)])
    assert got == pytest.approx(m["final_sqnr_db"], abs=1e-6)
    assert all(p.bits == 4 for t, p in base.plan.items() if p.bits != 32)


def test_simulate_reads_parameter_inputs_float():
    """``sc`` is both a Resize's scales and a Mul's operand: planned, the Mul reads it
    fake-quantized while the Resize reads the float scales (as the QDQ model does), so the
    output keeps its shape and equals the hand computation. Reading the quantized scales
    (0.996 for 1.0) would make an empty resize and fail."""
    from corefold.passes.quantize.params import params_for_range

    x = np.random.default_rng(2).standard_normal((1, 2, 4, 4)).astype(np.float32)
    g = parse(RESIZE_SHARED)
    plan = {"sc": params_for_range(0.0, 2.0, 8, magnitude=2.0), "x": params_for_range(-3.0, 3.0, 8),
            "u": params_for_range(-3.0, 3.0, 8), "y": params_for_range(-6.0, 6.0, 8)}
    assert not np.array_equal(plan["sc"].fake_quantize(np.float32([1.0])), np.float32([1.0]))
    got = simulate(g, plan, {"x": x})[0]
    u = np.repeat(plan["x"].fake_quantize(x), 2, axis=2)  # nearest, scales [1, 1, 2, 1]
    want = plan["y"].fake_quantize(plan["u"].fake_quantize(u) * plan["sc"].fake_quantize(np.float32([1, 1, 2, 1])))
    assert got.shape == (1, 2, 8, 4)
    np.testing.assert_array_equal(got, want)
    # the float run (empty plan) is the plain graph
    np.testing.assert_array_equal(simulate(g, {}, {"x": x})[0], np.repeat(x, 2, axis=2) * np.float32([1, 1, 2, 1]))
