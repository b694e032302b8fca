import numpy as np
import pytest

from corefold.errors import ShapeError, UnsupportedOpError
from corefold.ir import parse
from corefold.mapping.topology.expand import expand_graph, expand_topology
from corefold.mapping.topology.generate_cnn import STACKS, stack_graph


def _pairs(e):
    return sorted(zip(e.src.tolist(), e.dst.tolist(), strict=True))


TINY_CONV = """\
graph tiny opset 21
input x: float32[1, 1, 4, 4]
const w: float32[1, 1, 3, 3] = fill(1.0)
node c = Conv(x, w) attrs {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]} -> (y: float32[1, 1, 2, 2])
node r = Relu(y) -> (z: float32[1, 1, 2, 2])
output z
"""


def test_tiny_conv_gives_the_hand_computed_receptive_fields():
    e = expand_graph(parse(TINY_CONV))
    # inputs 0..15 (row-major 4x4), outputs 16..19 (row-major 2x2); pad 1, stride 2:
    # output row 0 sees input rows {0, 1}, output row 1 sees rows {1, 2, 3}; same for columns.
    expected = {16: [0, 1, 4, 5], 17: [1, 2, 3, 5, 6, 7], 18: [4, 5, 8, 9, 12, 13],
                19: [5, 6, 7, 9, 10, 11, 13, 14, 15]}
    assert e.num_neurons == 20
    assert _pairs(e) == sorted((s, d) for d, ss in expected.items() for s in ss)
    assert e.layers == [("x", 0, 16), ("c", 16, 4)]
    t = e.topology()
    t.validate()
    assert t.synapses.tolist() == [0] * 16 + [4, 6, 6, 9]
    assert t.num_edges == 25 and t.total_weight() == 25


def test_dense_layers_link_every_input_to_every_output():
    g = parse("""\
graph d opset 21
input x: float32[1, 5]
const w: float32[5, 3] = fill(0.5)
const v: float32[4, 3] = fill(0.5)
const b: float32[4] = fill(0.0)
node mm = MatMul(x, w) -> (h: float32[1, 3])
node gm = Gemm(h, v, b) attrs {"transB": 1} -> (y: float32[1, 4])
output y
""")
    e = expand_graph(g)
    assert e.num_neurons == 5 + 3 + 4 and e.num_synapses == 5 * 3 + 3 * 4
    assert _pairs(e) == sorted([(i, 5 + j) for i in range(5) for j in range(3)]
                               + [(5 + i, 8 + j) for i in range(3) for j in range(4)])
    t = e.topology()
    t.validate()
    assert t.degree().tolist() == [3] * 5 + [9] * 3 + [3] * 4


def test_grouped_conv_pool_residual_pad_concat():
    g = parse("""\
graph m opset 21
input x: float32[1, 2, 2, 2]
const dw: float32[2, 1, 1, 1] = fill(1.0)
node d = Conv(x, dw) attrs {"group": 2, "kernel_shape": [1, 1]} -> (y: float32[1, 2, 2, 2])
node s = Add(y, x) -> (r: float32[1, 2, 2, 2])
node p = MaxPool(r) attrs {"kernel_shape": [2, 2], "strides": [2, 2]} -> (q: float32[1, 2, 1, 1])
const pads: int64[8] = [0, 0, 0, 0, 0, 0, 0, 1]
node pd = Pad(q, pads) -> (qp: float32[1, 2, 1, 2])
node cat = Concat(qp, qp) attrs {"axis": 1} -> (cc: float32[1, 4, 1, 2])
node f = Flatten(cc) attrs {"axis": 1} -> (ff: float32[1, 8])
const w: float32[8, 1] = fill(1.0)
node fc = MatMul(ff, w) -> (o: float32[1, 1])
output o
""")
    e = expand_graph(g)
    # x: 0..7, depthwise d: 8..15 (channel c sees only x channel c, same pixel),
    # residual Add keeps d's neurons and adds x[i] -> d[i] (a second synapse on the same pair),
    # pool: 16, 17 (each sees its channel's 4 pixels of d), padding adds no neuron,
    # concat/flatten rearrange, fc: 18 sees 16, 17 twice each (the concat repeats them).
    dw = [(i, 8 + i) for i in range(8)]
    pool = [(8 + c * 4 + k, 16 + c) for c in range(2) for k in range(4)]
    fc = [(16, 18), (17, 18)] * 2
    assert _pairs(e) == sorted(dw * 2 + pool + fc)
    assert [name for name, _, _ in e.layers] == ["x", "d", "p", "fc"]
    t = e.topology()
    t.validate()
    i = t.indptr[0]
    assert t.indices[i:t.indptr[1]].tolist() == [8] and t.weights[i] == 2  # two synapses 0 -> 8
    assert t.synapses[18] == 4


def _dimpairs(n, k, s, p):
    """(output size, valid (output, kernel offset) pairs) along one axis, by brute force."""
    out = (n + 2 * p - k) // s + 1
    return out, sum(1 for o in range(out) for kk in range(k) if 0 <= o * s - p + kk < n)


@pytest.mark.parametrize("name", ["lenet", "mobilenet-tiny"])
def test_stack_counts_match_the_window_formula(name):
    chw, layers = STACKS[name]
    c, h, w = chw
    neurons, synapses = c * h * w, 0
    flat = None
    for layer in layers:
        if layer[0] in ("conv", "pool"):
            cout, k, s, p, groups = (layer[1:5] + ((layer[5],) if len(layer) > 5 else (1,))) if layer[0] == "conv" \
                else (c, 2, 2, 0, c)
            oh, ph = _dimpairs(h, k, s, p)
            ow, pw = _dimpairs(w, k, s, p)
            neurons += cout * oh * ow
            synapses += cout * (c // groups) * ph * pw
            c, h, w = cout, oh, ow
        else:
            flat = flat or c * h * w
            neurons += layer[1]
            synapses += flat * layer[1]
            flat = layer[1]
    e = expand_graph(stack_graph(name, chw, layers))
    assert (e.num_neurons, e.num_synapses) == (neurons, synapses)


def test_unsupported_and_unshaped_inputs_name_the_node():
    g = parse("""\
graph u opset 21
input x: float32[1, 4]
node t = TopK(x) -> (y: float32[1, 4])
output y
""")
    with pytest.raises(UnsupportedOpError, match="node 't': operator TopK"):
        expand_topology(g)
    g = parse(TINY_CONV.replace("[1, 1, 4, 4]", "[2, 1, 4, 4]"))
    with pytest.raises(ShapeError, match="node 'c'.*batch 2"):
        expand_graph(g)
    g = parse(TINY_CONV.replace("[1, 1, 4, 4]", "[1, 1, N, 4]"))
    with pytest.raises(ShapeError, match="graph input 'x'"):
        expand_graph(g)


def test_same_upper_dilated_conv_matches_a_direct_loop():
    g = parse("""\
graph s opset 21
input x: float32[1, 2, 5, 6]
const w: float32[3, 2, 3, 2] = fill(1.0)
node c = Conv(x, w) attrs {"auto_pad": "SAME_UPPER", "dilations": [2, 1], "kernel_shape": [3, 2], "strides": [2, 2]} -> (y: float32[1, 3, 3, 3])
output y
""")
    e = expand_graph(g)
    ref = []
    total_h = max(0, (3 - 1) * 2 + (3 - 1) * 2 + 1 - 5)
    total_w = max(0, (3 - 1) * 2 + 1 + 1 - 6)
    ph, pw = total_h // 2, total_w // 2
    for co in range(3):
        for oy in range(3):
            for ox in range(3):
                for ci in range(2):
                    for ky in range(3):
                        for kx in range(2):
                            iy, ix = oy * 2 - ph + ky * 2, ox * 2 - pw + kx
                            if 0 <= iy < 5 and 0 <= ix < 6:
                                ref.append((ci * 30 + iy * 6 + ix, 60 + co * 9 + oy * 3 + ox))
    assert _pairs(e) == sorted(ref)


def test_slice_split_and_reduce():
    g = parse("""\
graph r opset 21
input x: float32[1, 4, 2, 2]
const starts: int64[1] = [1]
const ends: int64[1] = [9223372036854775807]
const axes: int64[1] = [1]
node sl = Slice(x, starts, ends, axes) -> (y: float32[1, 3, 2, 2])
const sizes: int64[2] = [1, 2]
node sp = Split(y, sizes) attrs {"axis": 1} -> (a: float32[1, 1, 2, 2], b: float32[1, 2, 2, 2])
const raxes: int64[2] = [2, 3]
node rm = ReduceMean(b, raxes) attrs {"keepdims": 1} -> (m: float32[1, 2, 1, 1])
node mul = Mul(a, m) -> (o: float32[1, 2, 2, 2])
output o
""")
    e = expand_graph(g)
    # x: 0..15 (channel c = 4c..4c+3); slice keeps channels 1..3; a = channel 1, b = channels 2, 3;
    # ReduceMean: neurons 16, 17 over channels 2 and 3; Mul broadcasts a (1 channel) against
    # m (2 channels): the output (1, 2, 2, 2) matches neither, so 8 new neurons 18..25.
    reduce = [(8 + k, 16) for k in range(4)] + [(12 + k, 17) for k in range(4)]
    out = 18 + np.arange(8).reshape(2, 2, 2)
    mul = [(4 + p // 2 * 2 + p % 2, int(out[c].reshape(-1)[p])) for c in range(2) for p in range(4)]
    mul += [(16 + c, int(o)) for c in range(2) for o in out[c].reshape(-1)]
    assert _pairs(e) == sorted(reduce + mul)
