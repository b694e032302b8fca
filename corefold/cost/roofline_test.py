"""Roofline times on the gpu preset against hand-computed values; npu times unchanged."""

import pytest

from corefold.cost import graph_cost, op_cost
from corefold.ir import Graph, parse
from corefold.target import load_target

NET = """\
graph net
input x: float32[8, 64, 56, 56]
input h: float16[256, 1024]
const w: float32[64, 64, 3, 3] = fill(0.1)
const wh: float16[1024, 1024] = fill(0.1)
node conv = Conv(x, w) attrs {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]} -> (c: float32[8, 64, 56, 56])
node relu = Relu(c) -> (r: float32[8, 64, 56, 56])
node flat = Reshape(r, s) -> (f: float32[8, 200704])
node mmh = MatMul(h, wh) -> (y: float16[256, 1024])
const s: int64[2] = [8, 200704]
output f
output y
"""


@pytest.fixture(scope="module")
def net():
    return parse(NET), load_target("gpu")


def test_conv_is_compute_bound_at_fp32_rate(net):
    g, t = net
    c = op_cost(g.node("conv"), t)
    macs = 8 * 64 * 56 * 56 * 64 * 9
    assert c.flops == 2 * macs
    assert c.compute_seconds == pytest.approx(2e-6 + 2 * macs / 15.7e12)


def test_elementwise_is_bandwidth_bound(net):
    g, t = net
    c = op_cost(g.node("relu"), t)
    nbytes = 2 * 8 * 64 * 56 * 56 * 4
    assert c.compute_seconds == pytest.approx(2e-6 + nbytes / 900e9)


def test_half_precision_matmul_uses_the_tensor_rate(net):
    g, t = net
    c = op_cost(g.node("mmh"), t)
    flops = 2 * 256 * 1024 * 1024
    nbytes = (256 * 1024 + 1024 * 1024 + 256 * 1024) * 2
    assert c.compute_seconds == pytest.approx(2e-6 + max(flops / 125e12, nbytes / 900e9))


def test_shape_ops_are_free(net):
    g, t = net
    assert op_cost(g.node("flat"), t).compute_seconds == 0.0


def test_npu_results_do_not_change_with_the_gpu_presets(net):
    g, _ = net
    npu = load_target("npu")
    c = op_cost(g.node("conv"), npu)
    assert c.compute_seconds == pytest.approx(8 * 64 * 56 * 56 * 64 * 9 / (1024 * 1e9))
    assert isinstance(graph_cost(g, npu).peak_live_bytes, int)


def test_aten_convolution_backward_counts_both_gradients():
    from corefold.ir import Node, Value
    from corefold.ir.domains import ATEN_DOMAIN

    g = Graph("bw")
    go = g.add_input("go", (8, 64, 56, 56))
    x = g.add_input("x", (8, 64, 56, 56))
    w = g.add_input("w", (64, 64, 3, 3))
    outs = [Value("gx", (8, 64, 56, 56)), Value("gw", (64, 64, 3, 3))]
    n = g.add_node(Node("convolution_backward", [go, x, w], outs, {"output_mask": [1, 1, 0]},
                        domain=ATEN_DOMAIN))
    c = op_cost(n, load_target("gpu"))
    macs = 8 * 64 * 56 * 56 * 64 * 9
    assert c.flops == 4 * macs and c.unit == "matrix"
    assert c.compute_seconds == pytest.approx(2e-6 + 4 * macs / 15.7e12)
