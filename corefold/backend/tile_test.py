"""The tile step's clean-up before fusion: nodes that compute their input unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from corefold.backend import check_executable, lower, run_executable
from corefold.backend.executable import Compute
from corefold.backend.tile import copy_graph, drop_identities
from corefold.executor import random_inputs, run
from corefold.ir import Graph
from corefold.passes.quantize.integer import IntegerRunner
from corefold.target import load_target


def _qdq_dropout(training=None, mask_out: bool = False, same_scale: bool = True, bits: str = "int8") -> Graph:
    """x -> Q -> DQ -> Conv(3 x 3, 8 ch) -> Q -> DQ -> Dropout -> Q -> DQ -> Conv -> Q -> DQ,
    as corefold's quantizer writes a Dropout (its output takes its input's scale)."""
    rng = np.random.default_rng(0)
    g = Graph("qdq_dropout")
    x = g.add_input("x", (1, 4, 12, 12), "float32")

    def node(op, ins, shape, dtype, attrs=None, name=None, num_outputs=1):
        n = g.make_node(op, ins, attrs or {}, name=name, num_outputs=num_outputs)
        for o in n.outputs:
            o.shape, o.dtype = shape, np.dtype(dtype)
        return n.outputs

    def qdq(v, s, name, shape):
        sc = g.add_constant(f"{name}_s", np.float32(s))
        zp = g.add_constant(f"{name}_z", np.zeros((), bits))
        q = node("QuantizeLinear", [v, sc, zp], shape, bits, name=f"{name}_q")[0]
        return node("DequantizeLinear", [q, sc, zp], shape, "float32", name=f"{name}_dq")[0]

    def conv(v, cin, name):
        wq = g.add_constant(f"{name}_wq", rng.integers(-127, 128, (8, cin, 3, 3)).astype(np.int8))
        ws = g.add_constant(f"{name}_ws", np.float32(0.004))
        wz = g.add_constant(f"{name}_wz", np.int8(0))
        w = node("DequantizeLinear", [wq, ws, wz], (8, cin, 3, 3), "float32", name=f"{name}_wdq")[0]
        return node("Conv", [v, w], (1, 8, 12, 12), "float32", {"pads": [1, 1, 1, 1]}, name=name)[0]

    shape = (1, 8, 12, 12)
    h = qdq(conv(qdq(x, 0.03, "in", (1, 4, 12, 12)), 4, "conv0"), 0.05, "c0", shape)
    ins = [h, g.add_constant("ratio", np.float32(0.5))]
    if training is not None:
        ins.append(g.add_constant("training", np.bool_(training)))
    outs = node("Dropout", ins, shape, "float32", name="drop", num_outputs=2)
    outs[1].dtype = np.dtype(bool)
    h = qdq(outs[0], 0.05 if same_scale else 0.06, "d", shape)
    g.outputs = [qdq(conv(h, 8, "conv1"), 0.1, "out", shape)]
    if mask_out:
        g.outputs.append(outs[1])
    return g


def test_an_inference_dropout_and_the_requantize_it_leaves_are_removed_and_the_integers_unchanged():
    """In a QDQ model, ``DQ -> Dropout -> Q`` of one scale is the identity on the integers:
    the Dropout goes, then the ``Q(DQ(q))`` it leaves, and the second convolution reads
    the first one's integers. The copy computes what the graph does (executor and
    integer runner, exactly), and lowered on the 8 x 8 preset no dequantize or quantize
    is left on any core, with the simulation equal to the integer runner."""
    g = _qdq_dropout()
    feeds = random_inputs(g, 0)
    cleaned = copy_graph(g)
    assert drop_identities(cleaned) == 2
    assert [n.op_type for n in cleaned.nodes].count("QuantizeLinear") == 3
    assert "Dropout" not in [n.op_type for n in cleaned.nodes]
    for a, b in ((run(g, feeds), run(cleaned, feeds)), (IntegerRunner(g).run(feeds), IntegerRunner(cleaned).run(feeds))):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    target = load_target("npu")
    exe = lower(g, target)
    check_executable(exe, target)
    names = [exe.ops[ins.op].name for p in exe.programs for ins in p.instructions if isinstance(ins, Compute)]
    assert not [n for n in names if n.startswith(("d_q", "d_dq", "c0_dq", "drop"))], names
    want = IntegerRunner(g).run(feeds)
    got = run_executable(exe, feeds)
    for k in want:
        np.testing.assert_array_equal(want[k], got[k])


@pytest.mark.parametrize("case", ["training", "mask read", "other scale", "int32"])
def test_what_changes_the_data_stays(case):
    """A Dropout in training mode, or whose mask is a graph output, stays; a Q after a DQ
    with another scale, or of 32-bit integers (``(q - z) * s / s`` need not round back),
    stays. The executor computes the same on the copy in every case."""
    g = {"training": lambda: _qdq_dropout(training=True), "mask read": lambda: _qdq_dropout(mask_out=True),
         "other scale": lambda: _qdq_dropout(same_scale=False), "int32": lambda: _qdq_dropout(bits="int32")}[case]()
    cleaned = copy_graph(g)
    dropped = drop_identities(cleaned)
    ops = [n.op_type for n in cleaned.nodes]
    if case in ("training", "mask read"):
        assert dropped == 0 and "Dropout" in ops
    else:
        assert dropped == 1 and "Dropout" not in ops and ops.count("QuantizeLinear") == 4
    feeds = random_inputs(g, 0)
    a, b = run(g, feeds), run(cleaned, feeds)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_an_identity_goes_unless_it_makes_a_graph_output():
    g = Graph("ids")
    x = g.add_input("x", (2, 3), "float32")
    a = g.make_node("Identity", [x], {}, name="id0").outputs[0]
    a.shape, a.dtype = (2, 3), np.dtype("float32")
    b = g.make_node("Relu", [a], {}, name="relu").outputs[0]
    b.shape, b.dtype = (2, 3), np.dtype("float32")
    c = g.make_node("Identity", [b], {}, name="id1").outputs[0]
    c.shape, c.dtype = (2, 3), np.dtype("float32")
    g.outputs = [c]
    cleaned = copy_graph(g)
    assert drop_identities(cleaned) == 1
    assert [n.name for n in cleaned.nodes] == ["relu", "id1"]
    feeds = random_inputs(g, 0)
    np.testing.assert_array_equal(run(g, feeds)[c.name], run(cleaned, feeds)[c.name])
