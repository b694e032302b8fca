"""Which tensors are quantized: the seed's fused conv + activation rule (SPEC M5 §1), the
general activation regions beyond it, and parameter inputs that are never quantized."""

import json

import numpy as np
import pytest

from corefold.ir import parse
from corefold.passes.quantize.select import select_tensors
from corefold.passes.quantize.settings import QuantizeSettings

CONV_ACTS = """graph acts opset 21
input x: float32[1, 2, 4, 4]
const w: float32[2, 2, 1, 1] = [1.0, -1.0, 0.5, 2.0]
const w2: float32[2, 2, 1, 1] = [0.5, 1.0, -1.0, 0.25]
const w3: float32[2, 2, 1, 1] = [1.5, 0.5, 1.0, -2.0]
const lo: float32[] = [0.0]
const hi: float32[] = [6.0]
const nlo: float32[] = [-1.0]
node c1 = Conv(x, w) -> (a: float32[1, 2, 4, 4])
node relu = Relu(a) -> (r: float32[1, 2, 4, 4])
node c2 = Conv(r, w2) -> (b: float32[1, 2, 4, 4])
node clip = Clip(b, lo, hi) -> (k: float32[1, 2, 4, 4])
node c3 = Conv(k, w3) -> (c: float32[1, 2, 4, 4])
node nclip = Clip(c, nlo, hi) -> (n: float32[1, 2, 4, 4])
node sig = Sigmoid(n) -> (s: float32[1, 2, 4, 4])
node mul = Mul(n, s) -> (y: float32[1, 2, 4, 4])
output y
"""


def test_seed_fused_conv_activation_rule():
    """SPEC M5 §1: a conv followed by a ReLU, or a Clip with min >= 0, is one fused op: its
    pre-activation tensor is not stored, only the activation's (non-negative, so unsigned)
    output. A Clip with a negative lower bound is no such activation: the conv output stays.

    Mutation check: with the seed branch of ``activation_region`` returning None (the rule
    broken), ``a`` and ``b`` are selected and this test fails (run when it was written)."""
    g = parse(CONV_ACTS)
    sel = select_tensors(g, fuse_activations=False, quantize_outputs=True)
    assert "a" not in sel.activations and "b" not in sel.activations
    assert "fused" in sel.skipped["a"] and "fused" in sel.skipped["b"]
    assert {"r", "k"} <= set(sel.activations)
    assert "c" in sel.activations  # Clip(min = -1): not the seed's activation
    assert {"n", "s", "y"} <= set(sel.activations)


def test_seed_rule_gives_unsigned_activation_outputs(tmp_path):
    """The stored activation outputs are unsigned (min >= 0) in the seed preset end to end."""
    from corefold.passes.quantize import load_calibration, quantize_graph
    from corefold.settings import preset

    g = parse(CONV_ACTS)
    np.savez(tmp_path / "c.npz", x=np.random.default_rng(0).standard_normal((4, 2, 4, 4)).astype(np.float32))
    res = quantize_graph(g, load_calibration(tmp_path / "c.npz", g), preset(QuantizeSettings, "seed"),
                         progress=False)
    assert res.plan["r"].mode == "unsigned" and res.plan["k"].mode == "unsigned"
    assert "a" not in res.plan and "b" not in res.plan and "c" in res.plan


def test_general_activation_region():
    """Beyond the seed: the Clip(-1, 6) -> Sigmoid -> Mul chain after conv c3 is one region
    (SiLU-like) whose only stored tensor is y; the seed's fusions still hold."""
    g = parse(CONV_ACTS)
    sel = select_tensors(g, fuse_activations=True, quantize_outputs=True)
    assert {"a", "b", "c", "n", "s"}.isdisjoint(sel.activations)
    assert {"r", "k", "y"} <= set(sel.activations)


def test_region_with_two_exits_is_not_fused():
    """A region that two tensors leave (the sigmoid is also a graph output) is not fused:
    the conv output is stored."""
    text = CONV_ACTS.replace("output y", "output y\noutput s")
    sel = select_tensors(parse(text), fuse_activations=True, quantize_outputs=True)
    assert "c" in sel.activations


RESIZE_SHARED = """graph rs opset 21
input x: float32[1, 2, 4, 4]
const sc: float32[4] = [1.0, 1.0, 2.0, 1.0]
node up = Resize(x, _, sc) attrs {"mode": "nearest"} -> (u: float32[1, 2, 8, 4])
node scale = Mul(u, sc) -> (y: float32[1, 2, 8, 4])
output y
"""


@pytest.mark.parametrize("fuse", [True, False])
def test_parameter_inputs_read_float_even_when_quantized_elsewhere(tmp_path, fuse):
    """A constant that is a Resize's scales and a Mul's operand: the Mul reads it quantized,
    the Resize keeps reading the float constant (its output shape stays [1, 2, 8, 4])."""
    from corefold.executor import run
    from corefold.frontend.onnx import to_onnx
    from corefold.frontend.onnx.check import ort_session
    from corefold.ir import verify
    from corefold.passes.quantize import load_calibration, quantize_graph

    g = parse(RESIZE_SHARED)
    ref = parse(RESIZE_SHARED)
    x = np.random.default_rng(1).standard_normal((4, 2, 4, 4)).astype(np.float32)
    np.savez(tmp_path / "c.npz", x=x)
    res = quantize_graph(g, load_calibration(tmp_path / "c.npz", g),
                         QuantizeSettings(fuse_activations=fuse, quantize_outputs=True), progress=False)
    verify(g)
    assert "sc" in res.plan  # the Mul's operand is a weight
    resize = next(n for n in g.nodes if n.op_type == "Resize")
    assert resize.inputs[2].name == "sc" and resize.inputs[2].const is not None
    want = run(ref, {"x": x[:1]})["y"]
    got = ort_session(to_onnx(g), qdq_exact=True).run(None, {"x": x[:1]})[0]
    assert got.shape == want.shape
    assert 10 * np.log10(np.sum(want**2) / np.sum((got - want) ** 2)) > 30  # 8 bits, measured ~40 dB


def test_json_report_names_fusions():
    sel = select_tensors(parse(CONV_ACTS), fuse_activations=True)
    assert json.dumps(sel.skipped)  # JSON-able reasons
    assert "'y' is stored" in sel.skipped["c"]
