from corefold.ir import parse
from corefold.passes.quantize.ranges import Interval, static_ranges

TEXT = """graph g opset 21
input x: float32[1, 2, 4, 4]
const w: float32[2, 2, 1, 1] = [1.0, -1.0, 0.5, 2.0]
const lo: float32[] = [0.0]
const hi: float32[] = [6.0]
const nlo: float32[] = [-1.0]
node conv = Conv(x, w) -> (c: float32[1, 2, 4, 4])
node relu = Relu(c) -> (r: float32[1, 2, 4, 4])
node clip = Clip(c, lo, hi) -> (r6: float32[1, 2, 4, 4])
node nclip = Clip(c, nlo, hi) -> (n6: float32[1, 2, 4, 4])
node cat = Concat(r, r6) attrs {"axis": 1} -> (cc: float32[1, 4, 4, 4])
node bad = Concat(r, c) attrs {"axis": 1} -> (cb: float32[1, 4, 4, 4])
node add = Add(r, r6) -> (s: float32[1, 2, 4, 4])
node pool = MaxPool(s) attrs {"kernel_shape": [2, 2]} -> (p: float32[1, 2, 3, 3])
node mx = Max(c, r) -> (m: float32[1, 2, 4, 4])
node fused = com.microsoft::FusedConv(x, w) attrs {"activation": "Relu"} -> (f: float32[1, 2, 4, 4])
output cc
output cb
output p
output n6
output m
output f
"""


def test_static_ranges_without_data():
    g = parse(TEXT)
    r = {v.name: iv for v, iv in static_ranges(g).items()}
    assert r["r"].non_negative and r["r6"] == Interval(0.0, 6.0)
    assert not r["c"].non_negative and not r["x"].non_negative
    assert not r["n6"].non_negative
    assert r["cc"].non_negative and not r["cb"].non_negative
    assert r["s"].non_negative and r["p"].non_negative and r["m"].non_negative
    assert r["f"].non_negative
    assert r["w"] == Interval(-1.0, 2.0)
