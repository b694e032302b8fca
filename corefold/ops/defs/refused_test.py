"""Refused operators: importing one fails with one line naming the node, the operator and
the reason; the data-dependent ones still have kernels (for constant folding), checked
against ONNX's node cases and ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from corefold import ops
from corefold.errors import UnsupportedOpError
from corefold.frontend.onnx import from_onnx
from corefold.ops.defs.refused import REFUSED
from corefold.ops.onnx_cases_test import check_ort, node_cases
from corefold.ops.ort_oracle_test import run_kernel


@pytest.mark.parametrize("op", sorted(REFUSED))
def test_import_names_the_operator_and_the_reason(op):
    node = helper.make_node(op, ["x"], ["y"], name="the_node")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    with pytest.raises(UnsupportedOpError) as err:
        from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]))
    msg = str(err.value)
    assert "the_node" in msg and op in msg and REFUSED[op] in msg and "\n" not in msg
    entry = ops.get(op)
    assert entry.refuse == REFUSED[op] and entry.missing_facets() == []


@pytest.mark.parametrize("case", [c for m in ("nonzero", "unique") for c in node_cases(m)],
                         ids=lambda c: c.name)
def test_data_dependent_kernels_on_onnx_cases(case):
    from corefold.frontend.onnx.protos import attribute_value
    from corefold.ops.onnx_cases_test import to_array

    node = case.model.graph.node[0]
    attrs = {a.name: attribute_value(node.op_type, a, node.op_type) for a in node.attribute}
    real = [vi.name for vi in case.model.graph.input]
    for inputs, outputs in case.data_sets:
        env = dict(zip(real, (to_array(a) for a in inputs), strict=False))
        got = run_kernel(node.op_type, [env[x] if x else None for x in node.input], attrs)
        for g, w in zip(got, outputs, strict=False):
            np.testing.assert_array_equal(g, to_array(w))


def test_data_dependent_kernels_against_ort():
    rng = np.random.default_rng(0)
    x = rng.integers(-2, 3, (3, 4, 5)).astype(np.float32)
    check_ort("NonZero", [x])
    for attrs in ({}, {"sorted": 0}, {"axis": 0}, {"axis": 2, "sorted": 0}):
        check_ort("Unique", [x], attrs, n_outputs=4)
