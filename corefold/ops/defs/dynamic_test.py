"""What depends on data is refused in one line naming the node, the operator and why; the
same operators fold, or become a Gather, once their decisive inputs are bound values."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from corefold.errors import UnsupportedOpError
from corefold.executor import run
from corefold.frontend.onnx import from_onnx
from corefold.frontend.onnx.check import ort_run

F, B = TensorProto.FLOAT, TensorProto.BOOL
V = helper.make_tensor_value_info


def one_node(op, inputs, outputs=("y",), opset=17, out_type=F, **attrs):
    g = helper.make_graph([helper.make_node(op, [n for n, _, _ in inputs], list(outputs), name="the_node", **attrs)],
                          "g", [V(n, t, s) for n, t, s in inputs], [V(o, out_type, None) for o in outputs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("op, inputs, why", [
    ("NonZero", [("x", F, [3, 4])], "output shape depends on the values"),
    ("Unique", [("x", F, [6])], "output shape depends on the values"),
    ("RandomNormalLike", [("x", F, [3])], "random numbers"),
    ("Bernoulli", [("x", F, [3])], "random numbers"),
    ("SequenceConstruct", [("x", F, [3])], "sequences"),
    ("OptionalHasElement", [("x", F, [3])], "optional values"),
])
def test_data_dependent_operators_are_refused_by_name(op, inputs, why):
    with pytest.raises(UnsupportedOpError, match=f"node 'the_node': operator {op} is not supported: .*{why}"):
        from_onnx(one_node(op, inputs))


def test_nonzero_of_a_bound_value_folds():
    mask = np.array([[True, False, True], [False, False, True]])
    graph = from_onnx(one_node("NonZero", [("m", B, [2, 3])]), values={"m": mask})
    assert graph.nodes == []
    np.testing.assert_array_equal(graph.outputs[0].const, np.array(np.nonzero(mask)))


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress_with_a_bound_condition_is_a_gather(axis):
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    cond = np.array([True, False, True])
    attrs = {} if axis is None else {"axis": axis}
    m = one_node("Compress", [("x", F, [3, 4]), ("c", B, [3])], **attrs)
    graph = from_onnx(m, values={"c": cond})
    assert "Gather" in [n.op_type for n in graph.nodes]
    got = run(graph, {"x": x})["y"]
    np.testing.assert_array_equal(got, ort_run(m, {"x": x, "c": cond})["y"])
    with pytest.raises(UnsupportedOpError, match=r"node 'the_node' \(Compress\): the condition 'c' depends on data"):
        from_onnx(m)


def test_sequence_inputs_are_refused_in_one_line():
    seq = helper.make_tensor_sequence_value_info("s", F, [3])
    g = helper.make_graph([helper.make_node("SequenceLength", ["s"], ["n"])], "g", [seq],
                          [V("n", TensorProto.INT64, [])])
    with pytest.raises(UnsupportedOpError, match="graph input 's' is not a tensor \\(it is a sequence\\)"):
        from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
