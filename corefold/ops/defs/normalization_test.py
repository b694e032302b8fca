import numpy as np
import pytest

from corefold.ops.ort_oracle_test import check_node, randn


@pytest.mark.parametrize("shape", [(2, 4, 5, 6), (3, 4), (2, 4, 7)])
@pytest.mark.parametrize("attrs", [{}, {"epsilon": 1e-3}])
def test_batch_normalization(shape, attrs):
    rng = np.random.default_rng(0)
    c = shape[1]
    var = np.abs(randn(rng, c)) + np.float32(0.1)
    check_node("BatchNormalization", [randn(rng, *shape), randn(rng, c), randn(rng, c), randn(rng, c), var], attrs)


def test_instance_normalization():
    rng = np.random.default_rng(1)
    check_node("InstanceNormalization", [randn(rng, 2, 3, 5, 4), randn(rng, 3), randn(rng, 3)], {"epsilon": 1e-4})


@pytest.mark.parametrize("attrs", [{"size": 5}, {"size": 3, "alpha": 1e-2, "beta": 0.5, "bias": 2.0},
                                   {"size": 1}, {"size": 9}])
def test_lrn(attrs):
    rng = np.random.default_rng(2)
    check_node("LRN", [randn(rng, 2, 6, 4, 5) * np.float32(3)], attrs)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("attrs", [{}, {"axis": 1}, {"axis": 0}, {"axis": -2}])
def test_softmax(op, attrs):
    rng = np.random.default_rng(3)
    check_node(op, [randn(rng, 3, 4, 5) * np.float32(5)], attrs)


@pytest.mark.parametrize("attrs", [{}, {"axis": 1}, {"axis": -2, "epsilon": 1e-3}, {"axis": 0}])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_normalization(attrs, bias):
    rng = np.random.default_rng(4)
    shape = (2, 3, 4, 5)
    axis = attrs.get("axis", -1) % 4
    nshape = shape[axis:]
    inputs = [randn(rng, *shape), randn(rng, *nshape)] + ([randn(rng, *nshape)] if bias else [])
    check_node("LayerNormalization", inputs, attrs, n_outputs=3)


# -- GroupNormalization, RMSNormalization, LpNormalization, MeanVarianceNormalization --------------
from corefold.ops.facet_checks_test import check_facets  # noqa: E402
from corefold.ops.onnx_cases_test import case_params, check_case, check_ort  # noqa: E402


@pytest.mark.parametrize("case", case_params("groupnormalization", "rmsnormalization", "lpnormalization",
                                             "meanvariancenormalization"))
def test_onnx_node_case(case):
    check_case(case)


@pytest.mark.parametrize("groups", [1, 2, 6])
def test_group_normalization(groups):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 6, 4, 5)).astype(np.float32)
    scale, bias = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    attrs = {"num_groups": groups, "epsilon": 1e-3}
    check_ort("GroupNormalization", [x, scale, bias], attrs)
    check_facets("GroupNormalization", [x, scale, bias], attrs)


def test_group_normalization_opset18_per_group_scale():
    from onnx import TensorProto, helper, numpy_helper

    from corefold.executor import run
    from corefold.frontend.onnx import from_onnx
    from corefold.frontend.onnx.check import ort_run

    rng = np.random.default_rng(12)
    scale, bias = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 3, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[numpy_helper.from_array(scale, "s"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    x = rng.standard_normal((2, 6, 3, 3)).astype(np.float32)
    graph = from_onnx(model)
    assert graph.nodes[0].inputs[1].shape == (6,)
    np.testing.assert_allclose(run(graph, {"x": x})["y"], ort_run(model, {"x": x})["y"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axis", [-1, -2, 1])
def test_rms_normalization(axis):
    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 3, 4, 8)).astype(np.float32)
    scale = rng.standard_normal(x.shape[axis:] if axis < 0 else x.shape[axis:]).astype(np.float32)
    check_ort("RMSNormalization", [x, scale], {"axis": axis, "epsilon": 1e-4}, opset=23)
    check_facets("RMSNormalization", [x, scale], {"axis": axis})
    y, inv = check_facets("SimplifiedLayerNormalization", [x, scale], {"axis": axis})
    np.testing.assert_allclose(y, check_facets("RMSNormalization", [x, scale], {"axis": axis})[0])
    check_ort("SimplifiedLayerNormalization", [x, scale], {"axis": axis}, n_outputs=2, opset=17)


@pytest.mark.parametrize("attrs", [{}, {"axis": 0}, {"p": 1}, {"p": 1, "axis": 1}])
def test_lp_normalization(attrs):
    x = np.random.default_rng(14).standard_normal((3, 4, 5)).astype(np.float32)
    x[0, 0] = 0  # a zero line: zeros, not NaN
    check_ort("LpNormalization", [x], attrs)
    check_facets("LpNormalization", [x], attrs)


@pytest.mark.parametrize("axes", [None, [0, 2, 3], [1], [2, 3]])
def test_mean_variance_normalization(axes):
    x = np.random.default_rng(15).standard_normal((2, 3, 4, 5)).astype(np.float32)
    attrs = {} if axes is None else {"axes": axes}
    check_ort("MeanVarianceNormalization", [x], attrs)
    check_facets("MeanVarianceNormalization", [x], attrs)
