"""Cost model against hand-computed values."""

import pytest

from corefold.cost import graph_cost, op_cost, transfer_seconds
from corefold.ir import parse
from corefold.target import load_target

NET = """\
graph net
input x: float32[1, 3, 32, 32]
const w: float32[16, 3, 3, 3] = fill(0.1)
const b: float32[16] = fill(0.0)
const fw: float32[1024, 10] = fill(0.01)
node conv = Conv(x, w, b) attrs {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]} -> (c: float32[1, 16, 32, 32])
node relu = Relu(c) -> (r: float32[1, 16, 32, 32])
node pool = MaxPool(r) attrs {"kernel_shape": [2, 2], "strides": [2, 2]} -> (p: float32[1, 16, 16, 16])
node gap = AveragePool(p) attrs {"kernel_shape": [2, 2], "strides": [2, 2]} -> (q: float32[1, 16, 8, 8])
node flat = Flatten(q) -> (f: float32[1, 1024])
node fc = MatMul(f, fw) -> (y: float32[1, 10])
node tr = Transpose(q) attrs {"perm": [0, 2, 3, 1]} -> (t: float32[1, 8, 8, 16])
output y
output t
"""


@pytest.fixture(scope="module")
def costs():
    g = parse(NET)
    t = load_target("npu")  # 1 GHz; matrix 1024 MAC/cycle; vector 2 x 64 el/cycle; dma 64 B/cycle
    return {n.name: op_cost(n, t) for n in g.nodes}, g, t


def test_conv(costs):
    c = costs[0]["conv"]
    macs = 16 * 32 * 32 * 3 * 3 * 3  # outputs x (Cin/groups * kh * kw)
    assert c.macs == macs == 442368
    assert c.flops == 2 * macs + 16 * 32 * 32  # plus bias adds
    assert c.unit == "matrix"
    assert c.input_bytes == 3 * 32 * 32 * 4
    assert c.weight_bytes == (16 * 27 + 16) * 4
    assert c.output_bytes == 16 * 32 * 32 * 4
    assert c.compute_seconds == pytest.approx(macs / (1024 * 1e9))


def test_matmul(costs):
    c = costs[0]["fc"]
    assert c.macs == 1024 * 10 and c.flops == 2 * 10240 and c.unit == "matrix"
    assert c.weight_bytes == 1024 * 10 * 4
    assert c.compute_seconds == pytest.approx(10240 / 1024e9)


def test_pooling_and_elementwise(costs):
    relu, pool, avg = costs[0]["relu"], costs[0]["pool"], costs[0]["gap"]
    assert relu.unit == "vector" and relu.work == 16 * 32 * 32
    assert relu.compute_seconds == pytest.approx(16384 / 64e9)
    assert pool.work == 16 * 16 * 16 * 4  # outputs x kernel area
    assert avg.work == 16 * 8 * 8 * 4
    assert pool.macs == 0 and pool.flops == pool.work


def test_free_and_move_ops(costs):
    flat, tr = costs[0]["flat"], costs[0]["tr"]
    assert flat.compute_seconds == 0 and flat.work == 0
    assert tr.unit == "dma" and tr.work == 1024 * 4
    assert tr.compute_seconds == pytest.approx(4096 / 64e9)


def test_transfer_uses_the_slower_of_dma_and_dram(costs):
    _, _, t = costs
    # dma 64 B/cycle at 1 GHz = 64 GB/s, DRAM 25.6 GB/s: DRAM binds
    assert transfer_seconds(25.6e9, t) == pytest.approx(1.0)


def test_graph_totals(costs):
    _, g, t = costs
    gc = graph_cost(g, t)
    assert gc.macs == 442368 + 10240
    assert gc.parameters == 16 * 27 + 16 + 10240
    assert gc.count_by_op["Conv"] == 1
    assert gc.seconds_by_unit["matrix"] == pytest.approx((442368 + 10240) / 1024e9)
    # live set: after conv x (12 KiB) + c (64 KiB); x is then freed; after relu c + r = 128 KiB (peak)
    assert gc.peak_live_bytes == 2 * 16 * 32 * 32 * 4
